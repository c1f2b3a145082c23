"""memoryd: the memory tool's store and the daemon that serves it (SPEC §11)."""
