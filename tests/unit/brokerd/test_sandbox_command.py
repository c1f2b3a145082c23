"""`sandbox.command` (SPEC §8.2), pure: the flags, what of the host is bound, and in what order;
and `open_granted`, which pins the winner's path without following a symbolic link.

The argument vector is read back by a small parser that knows every option `command` may
use; an option it does not know fails the test, so a new mount is added here on purpose.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from bxcore.tools import BROKERED, Mount, Runner
from services.brokerd.sandbox import (
    CA_INSIDE,
    INSIDE,
    PROXY_INSIDE,
    Call,
    Host,
    Unconfinable,
    command,
    open_granted,
)

HOST = Host(
    bwrap="/usr/bin/bwrap",
    python="/opt/py/bin/python3.11",
    python_prefix="/opt/py",
    toolkit="/srv/bx/services/toolkit",
    links=(("usr/bin", "/bin"), ("usr/lib", "/lib"), ("usr/sbin", "/sbin")),
    folders=("/lib64",),
)
FLAGS = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
)
ARITY = {
    **dict.fromkeys(FLAGS, 0),
    "--cap-drop": 1,
    "--proc": 1,
    "--dev": 1,
    "--tmpfs": 1,
    "--chdir": 1,
    "--ro-bind": 2,
    "--bind": 2,
    "--ro-bind-try": 2,
    "--bind-try": 2,
    "--ro-bind-fd": 2,
    "--bind-fd": 2,
    "--symlink": 2,
    "--setenv": 2,
}
BINDS = {"--ro-bind", "--bind", "--ro-bind-try", "--bind-try"}
FD_BINDS = {"--ro-bind-fd", "--bind-fd"}
WRITABLE = {"--bind", "--bind-try", "--bind-fd"}
SYSTEM = {"/usr", "/opt/py", "/srv/bx/services/toolkit", "/lib64"}
GRANT_FD = 7


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple[str, ...]

    @property
    def dest(self) -> str:
        """Where in the sandbox this option puts something (None-like "" for flags)."""
        if self.name in BINDS | FD_BINDS | {"--symlink"}:
            return self.args[1]
        if self.name in {"--proc", "--dev", "--tmpfs"}:
            return self.args[0]
        return ""


@dataclass(frozen=True)
class Parsed:
    ops: tuple[Op, ...]
    program: tuple[str, ...]

    def named(self, *names: str) -> list[Op]:
        return [op for op in self.ops if op.name in names]

    @property
    def env(self) -> dict[str, str]:
        return {op.args[0]: op.args[1] for op in self.named("--setenv")}

    @property
    def mounts(self) -> list[Op]:
        return [op for op in self.ops if op.dest]

    @property
    def host_sources(self) -> set[str]:
        return {op.args[0] for op in self.named(*BINDS)}


def parse(argv: list[str]) -> Parsed:
    assert argv[0] == HOST.bwrap
    ops: list[Op] = []
    at = 1
    while argv[at].startswith("--"):
        name = argv[at]
        assert name in ARITY, f"an option this test does not know: {name}"
        ops.append(Op(name, tuple(argv[at + 1 : at + 1 + ARITY[name]])))
        at += 1 + ARITY[name]
    return Parsed(tuple(ops), tuple(argv[at:]))


def call_for(
    tool: str,
    path: str = "/home/kyle/notes",
    *,
    bound: int | None = GRANT_FD,
    cwd: str | None = None,
    ca_file: str | None = None,
) -> Call:
    """The call the courier would make for `tool` with the winner's `path` pinned as `bound`."""
    mount = BROKERED[tool].mount
    call = Call(tool=tool, mount=mount, path=None, cwd=cwd, timeout_s=5.0, ca_file=ca_file)
    if mount in (Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR):
        call = replace(call, path=path, bound=bound)
    if mount is Mount.PROXY:
        call = replace(call, proxy="/home/kyle/.bx/run/fetch-ab12cd34/p.sock")
    return call


SANDBOXED = sorted(name for name, spec in BROKERED.items() if spec.runner is Runner.SANDBOX)


def ancestor_or_same(parent: str, child: str) -> bool:
    return parent == "/" or child == parent or child.startswith(parent + "/")


# --- the flags ----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", SANDBOXED)
def test_every_sandboxed_tool_gets_every_isolation_flag_of_the_spec(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    names = [op.name for op in parsed.ops]
    for flag in FLAGS:
        assert names.count(flag) == 1, flag
    assert [op.args for op in parsed.named("--cap-drop")] == [("ALL",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_sandbox_shares_nothing_and_gets_a_private_proc_dev_and_tmp(tool: str) -> None:
    argv = command(HOST, call_for(tool))
    parsed = parse(argv)
    assert not [a for a in argv if a.startswith("--share") or a.startswith("--dev-bind")]
    assert [op.args for op in parsed.named("--proc")] == [("/proc",)]
    assert [op.args for op in parsed.named("--dev")] == [("/dev",)]
    assert [op.args for op in parsed.named("--tmpfs")] == [("/tmp",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_toolkit_runs_isolated_from_the_bound_package_with_only_the_tool_name(
    tool: str,
) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert parsed.program[:4] == (HOST.python, "-I", "-S", "-c")
    assert "sys.path.insert(0,'/srv/bx/services')" in parsed.program[4]
    assert parsed.program[5:] == (tool,)
    assert [op.args for op in parsed.named("--chdir")] == [("/",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_environment_is_cleared_and_only_the_toolkits_variables_are_set(tool: str) -> None:
    env = parse(command(HOST, call_for(tool))).env
    expected = {"PATH", "HOME", "LANG", "BX_TIMEOUT_S"}
    if tool == "shell":
        expected.add("BX_ROOT")
    if tool == "http_fetch":
        expected.add("BX_FETCH_PROXY")
    assert set(env) == expected
    assert env["HOME"] == "/tmp" and env["BX_TIMEOUT_S"] == "5"


# --- what of the host is bound ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "kind"),
    [("read_file", "--ro-bind-fd"), ("write_file", "--bind-fd"), ("shell", "--bind-fd")],
)
def test_only_the_winners_path_is_bound_read_only_for_reads_and_read_write_otherwise(
    tool: str, kind: str
) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert parsed.named(*FD_BINDS) == [Op(kind, (str(GRANT_FD), "/home/kyle/notes"))]
    assert parsed.host_sources == SYSTEM
    writable = [op for op in parsed.ops if op.name in WRITABLE]
    grant = Op(kind, (str(GRANT_FD), "/home/kyle/notes"))
    assert writable == ([] if tool == "read_file" else [grant])


@pytest.mark.parametrize("tool", ["read_file", "write_file", "shell"])
def test_a_winners_path_that_does_not_exist_binds_nothing(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool, bound=None)))
    assert parsed.named(*FD_BINDS) == []
    assert parsed.host_sources == SYSTEM


@pytest.mark.parametrize("tool", ["read_file", "write_file", "shell"])
def test_no_host_path_but_system_folders_the_python_and_the_toolkit_is_bound(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    ro = {op.args for op in parsed.named("--ro-bind")}
    assert ro == {
        ("/usr", "/usr"),
        ("/opt/py", "/opt/py"),
        ("/lib64", "/lib64"),
        ("/srv/bx/services/toolkit", "/srv/bx/services/toolkit"),
    }
    links = {op.args for op in parsed.named("--symlink")}
    assert links == set(HOST.links)
    assert not parsed.named("--bind", "--bind-try", "--ro-bind-try")


def test_shell_starts_in_its_granted_root_through_the_toolkit_not_through_bwrap() -> None:
    parsed = parse(command(HOST, call_for("shell", cwd="/home/kyle/notes/sub")))
    assert parsed.env["BX_ROOT"] == "/home/kyle/notes"
    assert [op.args for op in parsed.named("--chdir")] == [("/",)]


def test_http_fetch_sees_only_the_proxy_socket_and_the_system_certificates() -> None:
    call = call_for("http_fetch")
    parsed = parse(command(HOST, call))
    assert parsed.named(*FD_BINDS) == []
    assert parsed.host_sources == SYSTEM | {call.proxy, "/etc/ssl/certs"}
    assert Op("--ro-bind-try", ("/etc/ssl/certs", "/etc/ssl/certs")) in parsed.ops
    assert Op("--ro-bind", (str(call.proxy), PROXY_INSIDE)) in parsed.ops
    assert not [op for op in parsed.ops if op.name in WRITABLE]
    assert parsed.env["BX_FETCH_PROXY"] == PROXY_INSIDE
    assert "SSL_CERT_FILE" not in parsed.env


def test_http_fetch_binds_no_winners_path_even_if_one_were_given() -> None:
    call = replace(call_for("http_fetch"), path="/home/kyle", bound=GRANT_FD)
    parsed = parse(command(HOST, call))
    assert parsed.named(*FD_BINDS) == []
    assert "/home/kyle" not in parsed.host_sources


def test_a_test_ca_file_is_bound_read_only_and_trusted_through_ssl_cert_file() -> None:
    parsed = parse(command(HOST, call_for("http_fetch", ca_file="/tmp/bx-1/ca.pem")))
    assert Op("--ro-bind", ("/tmp/bx-1/ca.pem", CA_INSIDE)) in parsed.ops
    assert parsed.env["SSL_CERT_FILE"] == CA_INSIDE


def test_real_system_folders_are_bound_and_system_links_are_recreated() -> None:
    host = replace(HOST, links=(("usr/bin", "/bin"),), folders=("/lib", "/lib64"))
    parsed = parse(command(host, call_for("read_file")))
    assert {op.args[0] for op in parsed.named("--ro-bind")} >= {"/lib", "/lib64"}
    assert [op.args for op in parsed.named("--symlink")] == [("usr/bin", "/bin")]


# --- order: parents before children -------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ("read_file", "/tmp/bx-abc/g"),  # under the private /tmp
        ("shell", "/tmp/bx-abc/g"),
        ("write_file", "/tmp"),  # /tmp itself: the grant wins over the private one
        ("read_file", "/"),  # everything: mounted first, then covered by the system mounts
        ("shell", "/"),
        ("read_file", "/opt"),  # a parent of the python prefix
        ("write_file", "/usr/local/share/notes"),  # under a read-only system folder
        ("read_file", "/usr"),
        ("shell", "/run"),  # a parent of where the toolkit is bound
        ("read_file", "/srv/bx"),
    ],
)
def test_mounts_come_parents_first_so_none_is_hidden_under_a_wider_one(
    tool: str, path: str
) -> None:
    mounts = parse(command(HOST, call_for(tool, path=path))).mounts
    dests = [op.dest for op in mounts]
    for later, child in enumerate(dests):
        for parent in dests[later + 1 :]:
            assert not (ancestor_or_same(parent, child) and parent != child), (parent, child)
    grant = next(i for i, op in enumerate(mounts) if op.name in FD_BINDS)
    for i, op in enumerate(mounts):
        if ancestor_or_same(op.dest, path) and i != grant:
            assert i < grant or op.dest == "/", f"{op} comes after the grant of {path}"


@pytest.mark.parametrize("tool", ["read_file", "shell"])
def test_a_grant_of_root_is_mounted_first_and_brings_the_hosts_own_links(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool, path="/")))
    kind = "--ro-bind-fd" if tool == "read_file" else "--bind-fd"
    assert parsed.mounts[0] == Op(kind, (str(GRANT_FD), "/"))
    assert parsed.named("--symlink") == []  # bwrap 0.8 fails on a link that exists


@pytest.mark.parametrize("tool", SANDBOXED)
def test_system_folders_are_bound_where_they_are_so_no_mount_point_is_made_in_a_grant(
    tool: str,
) -> None:
    """Under a grant of `/`, a destination that is not already a folder of the host would
    have to be created in it (and cannot be, read-only)."""
    for op in parse(command(HOST, call_for(tool, path="/"))).named("--ro-bind"):
        source, dest = op.args
        assert source == dest or dest.startswith(f"{INSIDE}/"), op
        assert tool == "http_fetch" or not dest.startswith(f"{INSIDE}/"), op


def test_a_grant_under_tmp_comes_after_the_private_tmp() -> None:
    mounts = parse(command(HOST, call_for("read_file", path="/tmp/bx-abc/g"))).mounts
    tmpfs = mounts.index(Op("--tmpfs", ("/tmp",)))
    grant = mounts.index(Op("--ro-bind-fd", (str(GRANT_FD), "/tmp/bx-abc/g")))
    assert tmpfs < grant


def test_the_proxy_socket_comes_after_the_folders_it_lies_under() -> None:
    mounts = parse(command(HOST, call_for("http_fetch", ca_file="/tmp/ca.pem"))).mounts
    dests = [op.dest for op in mounts]
    assert dests.index("/tmp") < dests.index(PROXY_INSIDE)
    assert dests.index("/tmp") < dests.index(CA_INSIDE)


# --- pinning the winner's path (open_granted) ---------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """real/ (a folder with a.txt), link -> real, file.txt."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("a")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file.txt").write_text("f")
    return tmp_path.resolve()


@pytest.mark.parametrize("name", ["real", "real/a.txt", "file.txt"])
def test_a_real_path_is_pinned_as_a_descriptor_of_exactly_that_file(tree: Path, name: str) -> None:
    before = open_fds()
    fd = open_granted(str(tree / name))
    assert fd is not None
    try:
        pinned, there = os.fstat(fd), os.stat(tree / name)
        assert (pinned.st_dev, pinned.st_ino) == (there.st_dev, there.st_ino)
    finally:
        os.close(fd)
    assert open_fds() == before


def test_the_root_folder_can_be_pinned() -> None:
    fd = open_granted("/")
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == os.stat("/").st_ino
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["missing", "real/missing", "file.txt/below", "missing/below"])
def test_a_path_that_does_not_exist_pins_nothing(tree: Path, name: str) -> None:
    before = open_fds()
    assert open_granted(str(tree / name)) is None
    assert open_fds() == before


@pytest.mark.parametrize(("name", "at"), [("link", "link"), ("link/a.txt", "link")])
def test_a_path_through_a_symbolic_link_cannot_be_confined(tree: Path, name: str, at: str) -> None:
    before = open_fds()
    with pytest.raises(Unconfinable) as raised:
        open_granted(str(tree / name))
    assert str(raised.value) == (
        f"the granted path {tree / name} cannot be confined: {tree / at} is a symbolic link"
    )
    assert open_fds() == before


# --- what a narrower grant hides ------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read_file", "write_file", "shell"])
def test_hidden_places_are_covered_after_the_grant_is_bound(tool: str) -> None:
    hidden = (("/home/kyle/notes/vault", True), ("/home/kyle/notes/key.pem", False))
    parsed = parse(command(HOST, replace(call_for(tool), hidden=hidden)))
    mounts = [(op.name, op.dest) for op in parsed.mounts]
    grant = next(i for i, (_, dest) in enumerate(mounts) if dest == "/home/kyle/notes")
    folder = mounts.index(("--tmpfs", "/home/kyle/notes/vault"))
    file = next(i for i, op in enumerate(parsed.mounts)
                if op.dest == "/home/kyle/notes/key.pem")  # fmt: skip
    assert grant < folder and grant < file
    assert parsed.mounts[file].name == "--ro-bind" and parsed.mounts[file].args[0] == "/dev/null"


def test_hidden_places_are_found_without_following_links(tmp_path: Path) -> None:
    from services.brokerd.sandbox import hidden_places

    (tmp_path / "vault").mkdir()
    (tmp_path / "key.pem").write_text("k")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to("elsewhere")
    bound = open_granted(str(tmp_path))
    assert bound is not None
    try:
        places = [f"{tmp_path}/vault", f"{tmp_path}/key.pem", f"{tmp_path}/missing/x"]
        assert hidden_places(bound, str(tmp_path), places) == (
            (f"{tmp_path}/vault", True),
            (f"{tmp_path}/key.pem", False),
        )
        with pytest.raises(Unconfinable, match="symbolic link"):
            hidden_places(bound, str(tmp_path), [f"{tmp_path}/linked/inner"])
    finally:
        os.close(bound)
