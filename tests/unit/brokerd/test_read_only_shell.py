"""A shell grant's `write = false` (issue 15): parsed strictly, shell grants only; it changes
no step of the decision, and the decision's trace says how the folder is bound."""

from __future__ import annotations

import json

import pytest

from bxcore.labels import DataClass, Label
from services.brokerd.core.grants import Grant, InvalidGrant, Mode, parse_grant
from services.brokerd.core.policy import Allowed, Ask, Denied, binding, decide

SHELL = b'tool = "shell"\nmode = "allow"\npath = "/home/kyle/notes"\n'
PRIVATE = Label(DataClass.PRIVATE, False)


@pytest.mark.parametrize(
    ("content", "write"),
    [
        (SHELL, True),
        (SHELL + b"write = true\n", True),
        (SHELL + b"write = false\n", False),
    ],
)
def test_a_shell_grant_writes_unless_it_says_write_false(content: bytes, write: bool) -> None:
    grant = parse_grant("notes-sh", content)
    assert isinstance(grant, Grant) and grant.write is write
    assert ("read-only" in repr(grant)) is not write


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (SHELL + b'write = "no"\n', "write: expected true or false"),
        (SHELL + b"write = 0\n", "write: expected true or false"),
        (
            b'tool = "read_file"\nmode = "allow"\npath = "/a"\nwrite = false\n',
            "write: only a shell grant takes write",
        ),
        (
            b'tool = "write_file"\nmode = "allow"\npath = "/a"\nwrite = true\n',
            "write: only a shell grant takes write",
        ),
        (b'tool = "memory"\nmode = "allow"\nwrite = false\n', "only a shell grant"),
        (
            b'tool = "http_fetch"\nmode = "allow"\nhost = "a.org"\nwrite = false\n',
            "only a shell grant",
        ),
        (b'tool = "mcp__git__*"\nmode = "allow"\nwrite = false\n', "only a shell grant"),
    ],
)
def test_write_is_refused_where_it_means_nothing(content: bytes, why: str) -> None:
    grant = parse_grant("x", content)
    assert isinstance(grant, InvalidGrant) and why in grant.problem


def g(gid: str, mode: str = "allow", *, write: bool = True, cls: str = "private") -> Grant:
    path = "/home/kyle/notes"
    return Grant(
        gid, "shell", Mode(mode), path, None, DataClass(cls), False, "", "0" * 64, write=write
    )


def shell_call(label: Label, grants: list[Grant], trace: list[str] | None = None) -> object:
    arguments = json.dumps({"command": "grep -r todo .", "cwd": "/home/kyle/notes"})
    return decide(label, "shell", arguments, grants, trace)


@pytest.mark.parametrize(
    ("label", "grants", "outcome", "winner"),
    [
        (PRIVATE, [g("ro", write=False)], Allowed, "ro"),
        (PRIVATE, [g("ro", "ask", write=False)], Ask, "ro"),
        (PRIVATE, [g("ro", write=False), g("rw", "deny")], Denied, "rw"),
        # still a sink: the flow and untrusted checks hold as for any shell (§5.2 steps 6-7)
        (Label(DataClass.SECRET, False), [g("ro", write=False)], Denied, "ro"),
        (Label(DataClass.PRIVATE, True), [g("ro", write=False)], Ask, "ro"),
        # at equal specificity, ask beats allow, then the smaller id, whatever `write` says
        (PRIVATE, [g("b-ro", write=False), g("a-rw")], Allowed, "a-rw"),
        (PRIVATE, [g("a-ro", write=False), g("b-rw")], Allowed, "a-ro"),
        (PRIVATE, [g("a-rw"), g("b-ro", "ask", write=False)], Ask, "b-ro"),
    ],
)
def test_write_false_changes_no_step_of_the_decision(
    label: Label, grants: list[Grant], outcome: type, winner: str
) -> None:
    decision = shell_call(label, grants)
    assert isinstance(decision, outcome)
    named = decision.grant if isinstance(decision, Denied) else decision.winner  # type: ignore[attr-defined]
    assert named is not None and named.id == winner


@pytest.mark.parametrize(
    ("write", "said"),
    [
        (True, "/home/kyle/notes is bound read-write in the sandbox"),
        (False, "/home/kyle/notes is bound read-only in the sandbox (write = false)"),
    ],
)
@pytest.mark.parametrize("mode", ["allow", "ask"])
def test_the_trace_says_how_the_shells_folder_is_bound(write: bool, said: str, mode: str) -> None:
    trace: list[str] = []
    decision = shell_call(PRIVATE, [g("notes-sh", mode, write=write)], trace)
    assert isinstance(decision, Allowed | Ask) and decision.winner.write is write
    assert said in trace
    assert binding(decision.winner) == ("read-write" if write else "read-only")
