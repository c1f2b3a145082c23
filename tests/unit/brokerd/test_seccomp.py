"""The seccomp filter (`services.brokerd.core.seccomp`), run by a small classic-BPF interpreter over
every system call it watches: no mode with a setuid or setgid bit ever passes, every other
mode does, other architectures are refused whole. A real sandbox is tried in
tests/service/test_hostile_model.py."""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.brokerd.core.seccomp import (
    ARCHES,
    O_CREAT,
    O_TMPFILE_BIT,
    RET_ALLOW,
    RET_ERRNO,
    S_ISGID,
    S_ISUID,
    Unsupported,
    program,
)

DENY = RET_ERRNO | errno.EPERM
NOSYS = RET_ERRNO | errno.ENOSYS


def run(code: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """What the filter answers for one call (struct seccomp_data, little-endian)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    ops = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    acc, pc = 0, 0
    for _ in range(len(ops) + 1):
        op, jt, jf, k = ops[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if hit else jf)
        elif op == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"an instruction the filter should not use: {op:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_a_chmod_of_any_kind_with_a_setuid_or_setgid_bit_is_refused(machine: str) -> None:
    arch = ARCHES[machine]
    code = program(machine)
    for call in arch.watched:
        for mode in (0o4755, 0o2755, 0o6777, 0o104755, 0o4000 | 0xFFFF0000):
            args = [0] * 6
            args[call.mode] = mode
            if call.flags is not None:
                args[call.flags] = O_CREAT
            assert run(code, call.number, arch.audit, tuple(args)) == DENY, (call, oct(mode))


@pytest.mark.parametrize("machine", sorted(ARCHES))
@given(mode=st.integers(0, 2**32 - 1), flags=st.integers(0, 2**32 - 1))
def test_a_mode_passes_exactly_when_it_sets_no_such_bit_or_creates_nothing(
    machine: str, mode: int, flags: int
) -> None:
    arch = ARCHES[machine]
    code = program(machine)
    for call in arch.watched:
        args = [0] * 6
        args[call.mode] = mode
        creates = True
        if call.flags is not None:
            args[call.flags] = flags
            creates = bool(flags & (O_CREAT | O_TMPFILE_BIT))
        refused = creates and bool(mode & (S_ISUID | S_ISGID))
        assert run(code, call.number, arch.audit, tuple(args)) == (DENY if refused else RET_ALLOW)


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_openat2_and_io_uring_are_not_there_and_other_calls_pass(machine: str) -> None:
    arch = ARCHES[machine]
    code = program(machine)
    for number in arch.refused:
        assert run(code, number, arch.audit, (0, 0, 0, 0o4755, 0, 0)) == NOSYS
    watched = {call.number for call in arch.watched} | set(arch.refused)
    for number in range(0, 460):
        if number not in watched:
            assert run(code, number, arch.audit, (0o4755,) * 6) == RET_ALLOW, number


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_a_call_of_another_architecture_is_refused_whole(machine: str) -> None:
    code = program(machine)
    for audit in (0x40000003, 0xC000003E, 0xC00000B7):  # i386, x86_64, aarch64
        if audit != ARCHES[machine].audit:
            assert run(code, 1, audit) == DENY


def test_x86_64s_x32_numbers_are_refused() -> None:
    arch = ARCHES["x86_64"]
    assert run(program("x86_64"), 0x40000000 | 90, arch.audit, (0, 0o755, 0, 0, 0, 0)) == DENY


def test_an_unknown_architecture_has_no_filter() -> None:
    with pytest.raises(Unsupported, match="riscv64"):
        program("riscv64")
