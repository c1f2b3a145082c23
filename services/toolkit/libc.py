"""The two libc calls `shell` makes that Python has no function for: `prctl` and `capset`.

Called through `_ctypes`, the C module under `ctypes`, with the few C types they need declared
here: `import ctypes` costs 5.7 ms of a shell call's start, `_ctypes` 0.4 ms (2-core x86_64,
issue 15). Linux only; every call returns True when the kernel said yes.
"""

import _ctypes

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522  # <linux/capability.h>
_RTLD_NOW = 2


class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # generic in stubs only
    _type_ = "i"


class _U32(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "I"


class _CapHeader(_ctypes.Array):  # type: ignore[type-arg]  # struct __user_cap_header_struct: version, pid
    _type_ = _U32
    _length_ = 2


class _CapData(_ctypes.Array):  # type: ignore[type-arg]  # struct __user_cap_data_struct[2]: effective, permitted,
    _type_ = _U32  # inheritable; twice (the low and the high 32 capabilities)
    _length_ = 6


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


def _function(name: str) -> "_Function":
    program = _ctypes.dlopen(None, _RTLD_NOW)  # type: ignore[arg-type]  # None: libc and all
    return _Function(_ctypes.dlsym(program, name))


def prctl(option: int, value: int) -> bool:
    """`prctl(option, value, 0, 0, 0) == 0`."""
    return bool(_function("prctl")(option, value, 0, 0, 0) == 0)


def drop_capabilities() -> bool:
    """No capability left in this process's effective, permitted or inheritable sets (the
    ambient set empties with them)."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    return bool(_function("capset")(header, _CapData()) == 0)
