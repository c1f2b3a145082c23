"""Attacks a hostile model makes with nothing but tool calls under ordinary grants (issue 9),
each through a real brokerd running real bwrap: every path out of a sandbox raises the label,
a narrower grant's content is never reached under a wider grant's label, boxmaker's own files
are out of every tool's reach, no tool runs as root or leaves a setuid file, and a sandbox's
own file systems are bounded.

Each test would fail on the main branch before issue 9: they are the attacks as found.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import Denied, Done, Failed, Outcome, ToolRequest, ToolResponse
from services.brokerd.sandbox import cgroup
from tests.support.brokerd import records_of, short_folder, state_file, write_grant
from tests.support.daemons import Daemon, init_home, running, tool_owned

PRIVATE = Label(DataClass.PRIVATE, False)
SECRET = Label(DataClass.SECRET, False)
ROOT = os.geteuid() == 0


@dataclass
class Box:
    """A brokerd whose grants the test writes; `place` is a folder outside its home."""

    home: Path
    place: Path
    brokerd: Daemon
    ids: Iterator[int] = field(default_factory=itertools.count)

    def call(self, tool: str, session: str = "", **arguments: Any) -> Outcome:
        n = next(self.ids)
        request = ToolRequest(f"r{n}", session or f"s{n}", f"c{n}", tool, json.dumps(arguments))
        answer = self.brokerd.ask(request, timeout=30.0)
        assert isinstance(answer, ToolResponse), answer
        return answer.outcome

    def shell(self, command: str, cwd: Path | str, session: str = "") -> str:
        outcome = self.call("shell", session, command=command, cwd=str(cwd))
        assert isinstance(outcome, Done) and outcome.ok, outcome
        return outcome.output

    def label(self, session: str) -> Label:
        data = json.loads(state_file(self.home, session).read_text())
        return Label(DataClass(data["class"]), data["untrusted"])


def grant(box_home: Path, name: str, tool: str, path: Path | str, **more: Any) -> None:
    write_grant(box_home, name, tool=tool, mode=more.pop("mode", "allow"), path=str(path), **more)


@pytest.fixture
def make_box() -> Iterator[Any]:
    made: list[Any] = []

    def make(config: str = "") -> Box:
        folder = short_folder()
        root = folder.__enter__()
        made.append(folder)
        home = init_home(root / "h", config)
        for starter in (home / "grants").glob("workspace-*.toml"):
            starter.unlink()
        place = root / "p"
        place.mkdir()
        daemon = running("brokerd", home)
        made.append(daemon)
        return Box(home, place, daemon.__enter__())

    yield make
    for context in reversed(made):
        context.__exit__(None, None, None)


# --- 1: once a sandbox has started, the session rises whatever the outcome ----------------


@pytest.mark.parametrize(
    "ending",
    [
        "kill -9 $PPID",  # the toolkit killed: status 137
        "kill -15 $PPID",  # another signal, another status: the same sentence
    ],
)
def test_a_secret_written_to_the_toolkits_stderr_never_reaches_the_model_and_the_label_rises(
    make_box: Any, ending: str
) -> None:
    """As root, brokerd's toolkit became the tool user, which leaves it undumpable: the
    command cannot even open its stderr. As the owner it can; either way nothing of it
    reaches the model."""
    box = make_box()
    vault = box.place / "vault"
    vault.mkdir()
    (vault / "pin.txt").write_text("PIN=4711\n")
    tool_owned(vault)
    grant(box.home, "vault-shell", "shell", vault, class_="secret")
    outcome = box.call(
        "shell", "leak", command=f"cat pin.txt > /proc/$PPID/fd/2; {ending}", cwd=str(vault)
    )
    assert isinstance(outcome, Failed), outcome
    assert "4711" not in outcome.message and "PIN" not in outcome.message
    assert "status" not in outcome.message  # nor a number the command chose
    assert box.label("leak") == SECRET  # raised before the answer
    executed = [r for r in records_of(box.home, "leak") if r["kind"] == "executed"]
    assert executed and executed[0]["ok"] is False
    assert executed[0]["label"] == {"class": "secret", "untrusted": False}
    if not ROOT:  # the owner can still learn what happened: brokerd's log holds it
        assert "4711" in box.brokerd.output()


def test_the_answer_to_a_killed_toolkit_does_not_depend_on_the_signal(make_box: Any) -> None:
    box = make_box()
    tool_owned(box.place)
    grant(box.home, "place-shell", "shell", box.place, class_="secret")
    answers = {
        str(box.call("shell", "s", command=f"kill -{n} $PPID", cwd=str(box.place)))
        for n in (9, 15, 31, 37)
    }
    assert len(answers) == 1, answers


# --- 2: a narrower grant's content is never reached under the wider grant's label ---------


@pytest.fixture
def nested(make_box: Any) -> Box:
    """A shell, a writer and a reader granted `place` (private); a reader granted
    `place/docs/vault` (secret) and a deny on `place/closed`."""
    box = make_box()
    (box.place / "docs" / "vault").mkdir(parents=True)
    (box.place / "docs" / "vault" / "s.txt").write_text("the secret\n")
    (box.place / "docs" / "open.txt").write_text("open\n")
    (box.place / "closed").mkdir()
    (box.place / "closed" / "c.txt").write_text("closed\n")
    tool_owned(box.place)
    for tool in ("shell", "read_file", "write_file"):
        grant(box.home, f"wide-{tool.replace('_', '-')}", tool, box.place)
    grant(box.home, "vault", "read_file", box.place / "docs" / "vault", class_="secret")
    grant(box.home, "closed", "read_file", box.place / "closed", mode="deny")
    return box


@pytest.mark.parametrize(
    "command",
    [
        "mv docs docs2",  # a parent of the vault
        "mv docs/vault v2",  # the vault itself
        "rm -rf docs",  # remove the parent and all in it
        "mv closed closed2",
    ],
)
def test_a_shell_cannot_move_a_covered_place_or_any_folder_above_it(
    nested: Box, command: str
) -> None:
    output = nested.shell(f"{command}; ls -A . docs", nested.place)
    assert "[exit status 0]" in output.splitlines()[-1]
    assert (nested.place / "docs" / "vault" / "s.txt").read_text() == "the secret\n"
    assert (nested.place / "closed" / "c.txt").read_text() == "closed\n"
    assert not (nested.place / "docs2").exists() and not (nested.place / "closed2").exists()
    # `mv` of a mount point to another mount copies what it shows: the empty cover.
    assert not (nested.place / "v2").exists() or not any((nested.place / "v2").iterdir())


def test_after_a_rename_attempt_the_vault_is_still_read_only_as_secret(nested: Box) -> None:
    nested.shell("mv docs docs2 || true", nested.place)
    for path in ("docs2/vault/s.txt", "v2/s.txt"):
        outcome = nested.call("read_file", "after", path=str(nested.place / path))
        assert isinstance(outcome, Done) and not outcome.ok, outcome  # nothing there
    read = nested.call("read_file", "after", path=str(nested.place / "docs/vault/s.txt"))
    assert isinstance(read, Done) and read.label == SECRET


@pytest.mark.parametrize(
    "command",
    [
        "ln -s docs/vault v; cat v/s.txt",
        "ln docs/vault/s.txt hard; cat hard",
        "cp -r docs/vault copy; cat copy/s.txt",
        "cat docs/vault/s.txt closed/c.txt",
    ],
)
def test_links_and_copies_made_under_the_wide_grant_reach_nothing_covered(
    nested: Box, command: str
) -> None:
    output = nested.shell(f"{command} 2>&1; true", nested.place)
    assert "the secret" not in output and "closed" not in output.replace("closed/", "")
    for name in ("v/s.txt", "hard", "copy/s.txt"):
        later = nested.call("read_file", "later", path=str(nested.place / name))
        assert not (isinstance(later, Done) and "the secret" in later.output)


def test_content_moved_by_a_sandbox_that_may_see_it_stays_as_high_as_it_was(
    make_box: Any,
) -> None:
    """A secret shell over `docs` may move the vault's content within `docs`; every later
    read of it joins that secret grant, so nothing comes out lower."""
    box = make_box()
    (box.place / "docs" / "vault").mkdir(parents=True)
    (box.place / "docs" / "vault" / "s.txt").write_text("the secret\n")
    tool_owned(box.place)
    grant(box.home, "wide-read", "read_file", box.place)
    grant(box.home, "vault", "read_file", box.place / "docs" / "vault", class_="secret")
    grant(box.home, "docs-shell", "shell", box.place / "docs", class_="secret")
    box.shell(
        "cp vault/s.txt moved.txt && mkdir -p sub && cp vault/s.txt sub/x", box.place / "docs"
    )
    for name in ("docs/moved.txt", "docs/sub/x"):
        outcome = box.call("read_file", "reader", path=str(box.place / name))
        assert not (isinstance(outcome, Done) and outcome.ok and outcome.label != SECRET), outcome


def test_two_grants_on_one_folder_give_what_is_read_there_the_higher_label(
    make_box: Any,
) -> None:
    box = make_box()
    (box.place / "pin.txt").write_text("1234\n")
    tool_owned(box.place)
    grant(box.home, "d-shell", "shell", box.place, class_="private")
    grant(box.home, "d-read", "read_file", box.place, class_="secret")
    outcome = box.call("shell", "both", command="cat pin.txt", cwd=str(box.place))
    assert isinstance(outcome, Done) and outcome.label == SECRET
    assert box.label("both") == SECRET


# --- 3: the box's own home and its installation ---------------------------------------------


@pytest.fixture
def around_home(make_box: Any) -> Box:
    """Every file tool and the shell granted the folder that holds the home (as a grant of
    `~` holds `~/.local/share/boxmaker`); its files are the tool user's, so permissions stop
    nothing."""
    box = make_box()
    outer = box.home.parent
    tool_owned(box.home)  # as if the home were the owner's and tools ran as the owner
    owner = box.home.stat()
    os.chown(outer, owner.st_uid, owner.st_gid)
    for tool in ("shell", "read_file", "write_file"):
        grant(box.home, f"outer-{tool.replace('_', '-')}", tool, outer)
    return box


@pytest.mark.parametrize(
    "tool, where",
    [
        ("write_file", "grants/zz.toml"),
        ("write_file", "config.toml"),
        ("read_file", "keys/owner.key_secret"),
        ("read_file", "audit/ledger.jsonl"),
        ("read_file", "state"),
        ("shell", "run"),
        ("shell", "."),
    ],
)
def test_no_grant_reaches_the_boxs_own_home(around_home: Box, tool: str, where: str) -> None:
    path = os.path.normpath(around_home.home / where)
    if tool == "shell":
        outcome = around_home.call("shell", command="ls", cwd=path)
    elif tool == "write_file":
        outcome = around_home.call(tool, path=path, content='tool = "shell"\nmode = "allow"\n')
    else:
        outcome = around_home.call(tool, path=path)
    assert outcome == Denied(DenyReason.PROTECTED)
    assert not (around_home.home / "grants" / "zz.toml").exists()


def test_a_shell_over_the_home_sees_only_its_workspace_and_can_change_nothing_else(
    around_home: Box,
) -> None:
    home = around_home.home
    (home / "workspace" / "todo.md").write_text("milk\n")
    output = around_home.shell(
        f"ls -A {home}; cat {home}/keys/owner.key_secret; "
        f"echo 'tool = \"shell\"' > {home}/grants/zz.toml; mv {home} {home}.moved; "
        f"cat {home}/workspace/todo.md; echo made > {home}/workspace/made.txt",
        home.parent,
    )
    assert output.splitlines()[0] == "workspace"
    assert "milk" in output
    assert not (home / "grants" / "zz.toml").exists() and home.exists()
    assert (home / "workspace" / "made.txt").read_text() == "made\n"
    assert "CURVE" not in output and "secret-key" not in output


def test_no_grant_reaches_the_installation(make_box: Any) -> None:
    import bxcore

    install = Path(bxcore.__file__).resolve().parent.parent
    box = make_box()
    grant(box.home, "all-write", "write_file", "/")
    grant(box.home, "all-shell", "shell", "/")
    planted = install / "services" / "subprocess.py"
    outcome = box.call("write_file", path=str(planted), content="raise SystemExit('planted')")
    assert outcome == Denied(DenyReason.PROTECTED)
    shown = box.shell(f"ls -A {install}; echo x > {planted}; true", "/")
    # An empty, read-only folder there (or nothing at all, when it lies under /tmp, which
    # is the sandbox's own): nothing of it is listed, nothing can be planted.
    assert f"/bin/sh: 1: cannot create {planted}: Directory nonexistent" in shown
    assert "bxcore" not in shown.replace(str(install), "") and "services" not in shown.replace(
        str(planted), ""
    )
    assert not planted.exists()


# --- 4: no tool runs as root, and none leaves a setuid or setgid file -----------------------


def test_a_setuid_copy_of_a_shell_is_refused_and_nothing_made_is_roots(make_box: Any) -> None:
    box = make_box()
    tool_owned(box.place)
    grant(box.home, "place-shell", "shell", box.place)
    output = box.shell(
        "cp /bin/sh s; chmod 4755 s; chmod u+s s; chmod 2755 s; install -m 4755 /bin/sh t; "
        "mkdir -m 2775 d; id -u",
        box.place,
    )
    assert "Operation not permitted" in output
    for name in ("s", "t", "d"):
        path = box.place / name
        if path.exists():
            info = path.lstat()
            assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID), (name, oct(info.st_mode))
            assert info.st_uid != 0 or not ROOT, name
    assert output.splitlines()[-2] != "0"


# --- 7: a sandbox's own file systems are bounded ---------------------------------------------


def test_tmp_and_shm_are_bounded_and_nothing_else_of_the_sandbox_is_writable(
    make_box: Any,
) -> None:
    box = make_box("[sandbox]\ntmp_mb = 16\n")
    tool_owned(box.place)
    grant(box.home, "place-shell", "shell", box.place)
    output = box.shell(
        "head -c 64M /dev/zero > /tmp/fill; echo tmp=$?; "
        "head -c 64M /dev/zero > /dev/shm/fill; echo shm=$?; "
        "echo x > /dev/fill; echo dev=$?; echo x > /fill; echo root=$?; "
        "echo x > /dev/.bx/x; echo private=$?",
        box.place,
    )
    for name in ("tmp", "shm", "dev", "root", "private"):
        assert f"{name}=0" not in output, output
    assert "No space left on device" in output


def test_a_calls_memory_is_bounded_as_a_whole_where_a_cgroup_can_be_had(make_box: Any) -> None:
    if isinstance(cgroup.discover(64), cgroup.Unavailable) and not os.environ.get("CI"):
        pytest.skip("no cgroup can be had here (not root, no delegation): bxctl status says so")
    box = make_box("[sandbox]\nmemory_mb = 128\ntmp_mb = 100\n")
    tool_owned(box.place)
    grant(box.home, "place-shell", "shell", box.place)
    report = json.loads((box.home / "run" / "brokerd.json").read_text())["sandbox"]
    assert report["memory"] and "cgroup" in report["memory"]
    outcome = box.call(
        "shell",
        command="head -c 90M /dev/zero > /tmp/a; head -c 90M /dev/zero > /dev/shm/b; echo both",
        cwd=str(box.place),
    )
    # 180 MiB of tmpfs is over the call's 128: the kernel stops it in its cgroup.
    assert not (isinstance(outcome, Done) and "both" in outcome.output and outcome.ok), outcome
    assert box.shell("echo still serving", box.place) == "still serving\n[exit status 0]"
