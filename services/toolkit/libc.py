"""The two libc calls `shell` makes that Python has no function for: `prctl` and `capset`.

Called through `_ctypes`, the C module under `ctypes`, with one C function type and plain
`bytes` for the structures `capset` reads: `import ctypes` costs 5.7 ms of a shell call's
start, `_ctypes` 0.6, and declaring the C types the structures would need another 0.5
(2-core x86_64, issue 15). Linux only; every call returns True when the kernel said yes.
"""

import _ctypes
import sys

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522  # <linux/capability.h>
_RTLD_NOW = 2


class _Function(_ctypes.CFuncPtr):
    """A C function returning `int` (the type's default) whose `errno` is kept."""

    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO


def _function(name: str) -> "_Function":
    program = _ctypes.dlopen(None, _RTLD_NOW)  # type: ignore[arg-type]  # None: libc and all
    return _Function(_ctypes.dlsym(program, name))


def prctl(option: int, value: int) -> bool:
    """`prctl(option, value, 0, 0, 0) == 0`."""
    return bool(_function("prctl")(option, value, 0, 0, 0) == 0)


def drop_capabilities() -> bool:
    """No capability left in this process's effective, permitted or inheritable sets (the
    ambient set empties with them)."""
    # struct __user_cap_header_struct {u32 version; int pid}, pid 0: this process. Made here,
    # not a constant: the kernel writes its own version into it if it refuses ours.
    header = _CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4)
    data = bytes(24)  # struct __user_cap_data_struct[2]: effective, permitted, inheritable
    return bool(_function("capset")(header, data) == 0)
