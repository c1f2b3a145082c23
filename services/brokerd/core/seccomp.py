"""The sandbox's seccomp filter (SPEC §8.2, issue 9): no setuid or setgid bit is ever made.

A tool that runs as the owner (or as root, were brokerd to let it) could leave a setuid copy of
a shell in a granted folder, which anyone who reaches it runs as that user. As systemd's
`RestrictSUIDSGID=` does, the filter refuses (`EPERM`) every chmod, mkdir, mknod and creating
open whose mode carries `S_ISUID` or `S_ISGID`; `openat2` (whose mode it cannot read) and
io_uring (which opens files outside seccomp's sight) answer `ENOSYS`; a system call of another
architecture (x32, i386) is refused whole. Pure: `program(arch)` gives the classic BPF bytes
that bwrap's `--seccomp FD` loads.
"""

from __future__ import annotations

import errno
import struct

from bxcore.frozen import frozen

S_ISUID = 0o4000
S_ISGID = 0o2000
O_CREAT = 0o100  # the same on x86_64 and aarch64
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE, likewise

# classic BPF (linux/filter.h, linux/seccomp.h)
_LD_ABS_W = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_NR = 0  # offsetof(struct seccomp_data, nr)
_ARCH = 4  # offsetof(struct seccomp_data, arch)
_X32_BIT = 0x40000000


def _arg(n: int) -> int:
    """The offset of the low 32 bits of argument `n` (little-endian machines only)."""
    return 16 + 8 * n


@frozen
class Watched:
    """A system call whose mode argument is checked; `flags` is set for opens, whose mode
    counts only when they create a file."""

    number: int
    mode: int
    flags: int | None = None


@frozen
class Arch:
    name: str
    audit: int  # AUDIT_ARCH_*
    watched: tuple[Watched, ...]
    refused: tuple[int, ...]  # answered ENOSYS whatever their arguments
    x32: bool = False  # x86_64: refuse the x32 ABI's numbers too


_IO_URING = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register
_OPENAT2 = 437

ARCHES: dict[str, Arch] = {
    "x86_64": Arch(
        "x86_64",
        0xC000003E,
        (
            Watched(2, mode=2, flags=1),  # open
            Watched(85, mode=1),  # creat
            Watched(257, mode=3, flags=2),  # openat
            Watched(83, mode=1),  # mkdir
            Watched(258, mode=2),  # mkdirat
            Watched(133, mode=1),  # mknod
            Watched(259, mode=2),  # mknodat
            Watched(90, mode=1),  # chmod
            Watched(91, mode=1),  # fchmod
            Watched(268, mode=2),  # fchmodat
            Watched(452, mode=2),  # fchmodat2
        ),
        (_OPENAT2, *_IO_URING),
        x32=True,
    ),
    "aarch64": Arch(
        "aarch64",
        0xC00000B7,
        (
            Watched(56, mode=3, flags=2),  # openat
            Watched(34, mode=2),  # mkdirat
            Watched(33, mode=2),  # mknodat
            Watched(52, mode=1),  # fchmod
            Watched(53, mode=2),  # fchmodat
            Watched(452, mode=2),  # fchmodat2
        ),
        (_OPENAT2, *_IO_URING),
    ),
}


class Unsupported(Exception):
    """No filter is known for this machine's architecture."""


def program(machine: str) -> bytes:
    """The filter for `machine` (`platform.machine()`), as bwrap's `--seccomp` reads it."""
    arch = ARCHES.get(machine)
    if arch is None:
        raise Unsupported(f"no seccomp filter for the {machine} architecture")
    return b"".join(struct.pack("=HBBI", *op) for op in _assemble(arch))


# A program is built from labelled jumps, then resolved: classic BPF only jumps forward.
_Jump = tuple[int, int, str, str]  # code, k, label if true, label if false
_Op = tuple[int, int, int, int] | _Jump | str  # a plain instruction, a jump, or a label


def _assemble(arch: Arch) -> list[tuple[int, int, int, int]]:
    deny = RET_ERRNO | errno.EPERM
    nosys = RET_ERRNO | errno.ENOSYS
    body: list[_Op] = [
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ_K, arch.audit, "native", "deny"),
        "native",
        (_LD_ABS_W, 0, 0, _NR),
    ]
    if arch.x32:
        body.append((_JGE_K, _X32_BIT, "deny", "x32-checked"))
        body.append("x32-checked")
    for number in arch.refused:
        body += [(_JEQ_K, number, "nosys", f"not-{number}"), f"not-{number}"]
    for index, call in enumerate(arch.watched):
        here, after = f"call-{index}", f"after-{index}"
        body += [(_JEQ_K, call.number, here, after), here]
        if call.flags is not None:
            body += [
                (_LD_ABS_W, 0, 0, _arg(call.flags)),
                (_JSET_K, O_CREAT | O_TMPFILE_BIT, f"mode-{index}", "allow"),
                f"mode-{index}",
            ]
        body += [(_LD_ABS_W, 0, 0, _arg(call.mode)), (_JSET_K, S_ISUID | S_ISGID, "deny", "allow")]
        body.append(after)
    body += [
        "allow",
        (_RET_K, 0, 0, RET_ALLOW),
        "deny",
        (_RET_K, 0, 0, deny),
        "nosys",
        (_RET_K, 0, 0, nosys),
    ]
    return _resolve(body)


def _resolve(body: list[_Op]) -> list[tuple[int, int, int, int]]:
    where: dict[str, int] = {}
    count = 0
    for op in body:
        if isinstance(op, str):
            where[op] = count
        else:
            count += 1
    out: list[tuple[int, int, int, int]] = []
    for op in body:
        if isinstance(op, str):
            continue
        if isinstance(op[2], str):
            code, k, yes, no = op
            at = len(out) + 1  # jumps count from the next instruction
            jt, jf = where[str(yes)] - at, where[str(no)] - at
            assert 0 <= jt < 256 and 0 <= jf < 256, "a jump too far for classic BPF"
            out.append((int(code), int(jt), int(jf), int(k)))
        else:
            code, jt, jf, k = op
            out.append((int(code), int(jt), int(jf), int(k)))
    return out
