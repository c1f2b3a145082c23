"""Foreign exceptions as the one line an owner reads (SPEC §1 I7: every refusal says why), and
the two ways a daemon refuses to start: `StartError` (retried) and `SetupError` (not)."""

from __future__ import annotations


def one_line(error: BaseException) -> str:
    """`error` as one line: an OSError names its file and cause; anything else its text."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        text = f"{where}{error.strerror}"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


class StartError(Exception):
    """A daemon cannot start; the text is the one line the owner reads. The supervisor
    restarts it with backoff: the cause may pass (a store briefly unreadable, …)."""


class SetupError(StartError):
    """A daemon cannot start until the owner changes something (a socket path taken, a key
    missing, a bad `[sockets]` entry): no restart can mend it, so the daemon exits
    `SETUP_ERROR_EXIT` and the supervisor marks it failed at once."""


#: The exit status of a daemon that met a `SetupError`: sysexits.h's EX_CONFIG, as systemd's
#: `RestartPreventExitStatus=` and supervisord's `exitcodes` use such a status.
SETUP_ERROR_EXIT = 78
