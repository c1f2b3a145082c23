"""The sandbox's host side (SPEC §8.2): what the host looks like and the descriptors a call
binds (`host`; the command itself is pure, in `services.brokerd.core.bwrap`), one sandbox
process within its limits (`child`, `limits`, `cgroup`), the fetch proxy (`fetch_proxy`) and
what a killed brokerd left behind (`leftovers`)."""
