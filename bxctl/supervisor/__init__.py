"""The supervisor of `bxctl up` (SPEC §13): the services of a home in order (`runner`), one
supervised service (`service`) and its life as a table (`lifecycle`), what it runs (`specs`),
services started ahead of their turn (`held`), its hold on a home (`pidfile`), the logs
(`logs`), and one question to it while it runs (`link`)."""
