"""The home folder's files (SPEC §2.2, §2.3): where each lives and the run folder (`layout`),
writing a small file whole (`atomic`), each daemon's lock in the run folder (`runlock`), what a
daemon reports of itself in `{run}/<service>.json` (`report`), the ledger head the owner's
side keeps in `{home}/witness/` (`witness`), and the room left on the disks under the home
(`disk`)."""
