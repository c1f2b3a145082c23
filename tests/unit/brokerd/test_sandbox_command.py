"""`bwrap.command` (SPEC §8.2), pure: the flags, who runs the tool, what of the host is bound,
in what order, what is read-only; and `open_granted` and `layers`, which pin the winner's path
and what is laid over it without following a symbolic link.

The argument vector is read back by a small parser that knows every option `command` may
use; an option it does not know fails the test, so a new mount is added here on purpose.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from bxcore.tools import BROKERED, Mount, Runner
from services.brokerd.core.args import inside
from services.brokerd.core.bwrap import (
    CA_INSIDE,
    INSIDE,
    LIB_INSIDE,
    PROXY_INSIDE,
    PYTHON_INSIDE,
    TOOLKIT_INSIDE,
    Confined,
    Cover,
    Host,
    Layer,
    command,
    environment,
)
from services.brokerd.core.view import View
from services.brokerd.sandbox import Unconfinable, close, layers, open_granted

HOST = Host(
    bwrap="/usr/bin/bwrap",
    python="/opt/py/bin/python3.11",
    python_prefix="/opt/py",
    toolkit="/srv/bx/services/toolkit",
    stdlib=("lib/python3.11", "lib/python3.11/lib-dynload"),
    links=(("usr/bin", "/bin"), ("usr/lib", "/lib"), ("usr/sbin", "/sbin")),
    folders=("/lib64",),
)
ROOT_HOST = replace(HOST, drop_to=(65534, 65534))
FLAGS = ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv")
ARITY = {
    **dict.fromkeys((*FLAGS, "--disable-userns"), 0),
    **dict.fromkeys(("--cap-drop", "--cap-add", "--seccomp", "--info-fd"), 1),
    **dict.fromkeys(("--block-fd", "--userns-block-fd", "--size", "--perms"), 1),
    **dict.fromkeys(("--proc", "--dev", "--tmpfs", "--dir", "--remount-ro", "--chdir"), 1),
    **dict.fromkeys(("--ro-bind", "--bind", "--ro-bind-try", "--ro-bind-fd", "--bind-fd"), 2),
    **dict.fromkeys(("--symlink", "--setenv"), 2),
}
BINDS = {"--ro-bind", "--bind", "--ro-bind-try"}
FD_BINDS = {"--ro-bind-fd", "--bind-fd"}
WRITABLE = {"--bind", "--bind-fd"}
SYSTEM = {"/usr", "/opt/py", "/srv/bx/services/toolkit", "/lib64"}
GRANT_FD = 7


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple[str, ...]

    @property
    def dest(self) -> str:
        """Where in the sandbox this option puts something ("" for a flag)."""
        if self.name in BINDS | FD_BINDS | {"--symlink"}:
            return self.args[1]
        if self.name in {"--proc", "--dev", "--tmpfs", "--dir"}:
            return self.args[0]
        return ""


@dataclass(frozen=True)
class Parsed:
    ops: tuple[Op, ...]
    program: tuple[str, ...]

    def named(self, *names: str) -> list[Op]:
        return [op for op in self.ops if op.name in names]

    def args(self, name: str) -> list[tuple[str, ...]]:
        return [op.args for op in self.named(name)]

    @property
    def env(self) -> dict[str, str]:
        return {op.args[0]: op.args[1] for op in self.named("--setenv")}

    @property
    def mounts(self) -> list[Op]:
        return [op for op in self.ops if op.dest and op.name != "--dir"]

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
    **more: object,
) -> Confined:
    """The call the courier would make for `tool` with the winner's `path` pinned as `bound`."""
    mount = BROKERED[tool].mount
    call = Confined(tool=tool, mount=mount, path=None, cwd=cwd, timeout_s=5.0, ca_file=ca_file)
    if mount in (Mount.READ_ONLY, Mount.READ_WRITE, Mount.WORKDIR):
        call = replace(call, path=path, bound=bound)
    if mount is Mount.PROXY:
        call = replace(call, proxy="/home/kyle/.bx/run/fetch-ab12cd34/p.sock")
    return replace(call, **more)  # type: ignore[arg-type]


def rooted(tool: str, **more: object) -> list[str]:
    """The command when brokerd runs as root: it maps the user while bwrap waits."""
    return command(ROOT_HOST, call_for(tool, info_fd=11, block_fd=12, **more))


SANDBOXED = sorted(name for name, spec in BROKERED.items() if spec.runner is Runner.SANDBOX)


def ancestor_or_same(parent: str, child: str) -> bool:
    return parent == "/" or child == parent or child.startswith(parent + "/")


# --- the flags and who runs the tool -------------------------------------------------------


@pytest.mark.parametrize("tool", SANDBOXED)
def test_every_sandboxed_tool_gets_every_isolation_flag_of_the_spec(tool: str) -> None:
    for argv in (command(HOST, call_for(tool)), rooted(tool)):
        parsed = parse(argv)
        names = [op.name for op in parsed.ops]
        for flag in FLAGS:
            assert names.count(flag) == 1, flag
        assert parsed.args("--cap-drop") == [("ALL",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_as_its_own_user_brokerd_turns_nested_user_namespaces_off_and_gives_no_capability(
    tool: str,
) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert parsed.named("--disable-userns") and not parsed.named("--cap-add")
    assert not {"BX_USER", "BX_USERNS"} & set(parsed.env)


@pytest.mark.parametrize("tool", SANDBOXED)
def test_as_root_brokerd_maps_the_user_itself_and_the_toolkit_becomes_the_tool_user(
    tool: str,
) -> None:
    parsed = parse(rooted(tool))
    assert parsed.args("--info-fd") == [("11",)]
    assert parsed.args("--userns-block-fd") == [("12",)]
    assert not parsed.named("--disable-userns", "--block-fd")
    assert parsed.args("--cap-add") == [
        ("CAP_SETUID",),
        ("CAP_SETGID",),
        ("CAP_SYS_RESOURCE",),
        ("CAP_DAC_READ_SEARCH",),
    ]
    assert parsed.env["BX_USER"] == "65534:65534" and parsed.env["BX_USERNS"] == "0"


def test_as_root_the_map_cannot_be_left_out() -> None:
    with pytest.raises(AssertionError):
        command(ROOT_HOST, call_for("read_file"))


def test_a_hold_for_a_cgroup_waits_after_setup_when_brokerd_is_not_root() -> None:
    parsed = parse(command(HOST, call_for("shell", info_fd=11, block_fd=12)))
    assert parsed.args("--info-fd") == [("11",)] and parsed.args("--block-fd") == [("12",)]


def test_a_shells_rlimits_are_set_while_bwrap_waits_not_passed_to_the_toolkit() -> None:
    limits = {"memory_mb": 256, "max_processes": 16}
    for argv in (
        command(HOST, call_for("shell", info_fd=11, block_fd=12, **limits)),
        rooted("shell", **limits),
    ):
        env = parse(argv).env
        assert "BX_MEMORY_MB" not in env and "BX_MAX_PROCESSES" not in env
    with pytest.raises(AssertionError):  # never a shell without them
        command(HOST, call_for("shell", **limits))
    unconfined = environment(call_for("shell", **limits), inside=False)
    assert (unconfined["BX_MEMORY_MB"], unconfined["BX_MAX_PROCESSES"]) == ("256", "16")


def test_a_cgroup_the_toolkit_joins_itself_is_handed_over_as_a_descriptor() -> None:
    for argv in (command(HOST, call_for("shell", cgroup_fd=14)), rooted("shell", cgroup_fd=14)):
        parsed = parse(argv)
        assert parsed.env["BX_CGROUP_FD"] == "14" and not parsed.named("--block-fd")
    assert "BX_CGROUP_FD" not in parse(command(HOST, call_for("shell"))).env


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_seccomp_filter_is_loaded_when_given(tool: str) -> None:
    assert parse(command(HOST, call_for(tool, seccomp_fd=9))).args("--seccomp") == [("9",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_sandbox_shares_nothing_and_gets_a_private_proc_dev_and_bounded_tmp(tool: str) -> None:
    argv = command(HOST, call_for(tool, tmp_mb=64))
    parsed = parse(argv)
    assert not [a for a in argv if a.startswith("--share") or a.startswith("--dev-bind")]
    assert parsed.args("--proc") == [("/proc",)]
    assert parsed.args("--dev") == [("/dev",)]
    tmpfs = [op.args[0] for op in parsed.named("--tmpfs")]
    assert tmpfs == ["/tmp", "/dev/shm"]
    for index, op in enumerate(parsed.ops):
        if op.name == "--tmpfs":  # each is bounded, and open to all with the sticky bit
            assert parsed.ops[index - 1] == Op("--size", (str(64 * 1024 * 1024),))
            assert parsed.ops[index - 2] == Op("--perms", ("1777",))


@pytest.mark.parametrize("tool", SANDBOXED)
def test_nothing_of_the_sandboxes_own_is_writable_but_tmp_and_shm(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert parsed.args("--remount-ro") == [("/dev",), ("/",)]
    last_mount = max(i for i, op in enumerate(parsed.ops) if op.dest)
    first_remount = min(i for i, op in enumerate(parsed.ops) if op.name == "--remount-ro")
    assert last_mount < first_remount  # once every mount is made


def test_a_grant_of_root_stays_writable_where_it_is_granted() -> None:
    parsed = parse(command(HOST, call_for("shell", path="/")))
    assert ("/",) not in parsed.args("--remount-ro")


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_toolkit_runs_from_its_private_read_only_folder_with_only_the_tool_name(
    tool: str,
) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert parsed.program[:4] == (HOST.python, "-I", "-S", "-c")
    path = [
        LIB_INSIDE,
        f"{PYTHON_INSIDE}/lib/python3.11",
        f"{PYTHON_INSIDE}/lib/python3.11/lib-dynload",
    ]
    assert f"sys.path[:0]={path!r}" in parsed.program[4]
    assert "/srv/bx" not in parsed.program[4]  # never the folder the package lies in
    assert parsed.program[5:] == (tool,)
    assert Op("--ro-bind", (HOST.toolkit, TOOLKIT_INSIDE)) in parsed.ops
    assert Op("--ro-bind", (HOST.python_prefix, PYTHON_INSIDE)) in parsed.ops
    assert parsed.args("--chdir") == [("/",)]


@pytest.mark.parametrize("tool", SANDBOXED)
def test_the_environment_is_cleared_and_only_the_toolkits_variables_are_set(tool: str) -> None:
    env = parse(command(HOST, call_for(tool))).env
    expected = {"PATH", "HOME", "LANG", "BX_TIMEOUT_S"}
    if tool == "shell":
        expected |= {"BX_ROOT", "BX_PID_NAMESPACE"}
    if tool == "http_fetch":
        expected.add("BX_FETCH_PROXY")
    assert set(env) == expected
    assert env["HOME"] == "/tmp" and env["BX_TIMEOUT_S"] == "5"


def test_the_toolkit_is_told_which_folder_each_bound_path_must_be() -> None:
    checks = (("/home/kyle/notes", 64769, 12), ("/home/kyle/notes/a b", 64769, 13))
    env = parse(command(HOST, call_for("shell", checks=checks))).env
    assert env["BX_BOUND"] == (
        f"64769:12:{b'/home/kyle/notes'.hex()};64769:13:{b'/home/kyle/notes/a b'.hex()}"
    )


# --- what of the host is bound ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "kind"),
    [("read_file", "--ro-bind-fd"), ("write_file", "--bind-fd"), ("shell", "--bind-fd")],
)
def test_only_the_winners_path_is_bound_read_only_for_reads_and_read_write_otherwise(
    tool: str, kind: str
) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    grant = Op(kind, (str(GRANT_FD), "/home/kyle/notes"))
    assert parsed.named(*FD_BINDS) == [grant]
    assert parsed.host_sources == SYSTEM
    writable = [op for op in parsed.ops if op.name in WRITABLE]
    assert writable == ([] if tool == "read_file" else [grant])


def test_a_read_only_shell_binds_its_path_read_only_and_nothing_writable_of_the_host() -> None:
    parsed = parse(command(HOST, call_for("shell", read_only=True)))
    assert parsed.named(*FD_BINDS) == [Op("--ro-bind-fd", (str(GRANT_FD), "/home/kyle/notes"))]
    assert [op for op in parsed.ops if op.name in WRITABLE] == []
    assert parsed.env["BX_ROOT"] == "/home/kyle/notes"


@pytest.mark.parametrize("tool", ["read_file", "write_file", "shell"])
def test_a_winners_path_that_does_not_exist_binds_nothing(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool, bound=None)))
    assert parsed.named(*FD_BINDS) == []
    assert parsed.host_sources == SYSTEM


@pytest.mark.parametrize("tool", ["read_file", "write_file", "shell"])
def test_no_host_path_but_system_folders_the_python_and_the_toolkit_is_bound(tool: str) -> None:
    parsed = parse(command(HOST, call_for(tool)))
    assert set(parsed.args("--ro-bind")) == {
        ("/usr", "/usr"),
        ("/opt/py", "/opt/py"),
        ("/opt/py", PYTHON_INSIDE),
        ("/lib64", "/lib64"),
        ("/srv/bx/services/toolkit", TOOLKIT_INSIDE),
    }
    assert set(parsed.args("--symlink")) == set(HOST.links)
    assert not parsed.named("--bind", "--ro-bind-try")


def test_shell_starts_in_its_granted_root_through_the_toolkit_not_through_bwrap() -> None:
    parsed = parse(command(HOST, call_for("shell", cwd="/home/kyle/notes/sub")))
    assert parsed.env["BX_ROOT"] == "/home/kyle/notes"
    assert parsed.args("--chdir") == [("/",)]


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
    assert parsed.args("--symlink") == [("usr/bin", "/bin")]


# --- order: parents before children; folders made only where nothing of the host is -------


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
        ("shell", "/run"),
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


@pytest.mark.parametrize(
    ("tool", "path"),
    [("read_file", "/"), ("shell", "/"), ("shell", "/opt"), ("read_file", "/tmp/bx-abc/g")],
)
def test_folders_are_made_0755_only_in_the_sandboxes_own_file_systems(tool: str, path: str) -> None:
    """bwrap makes a mount point's missing parents 0700, which the tool user could not pass
    through; so they are made first, 0755. A folder inside a host bind is never made."""
    parsed = parse(command(HOST, call_for(tool, path=path)))
    made = [op.args[0] for op in parsed.named("--dir")]
    for index, op in enumerate(parsed.ops):
        if op.name == "--dir":
            assert parsed.ops[index - 1] == Op("--perms", ("0755",))
    assert f"{INSIDE}" in made and f"{INSIDE}/lib" in made
    for folder in made:  # never in a host folder: only under the sandbox's own /dev or /tmp
        assert not inside(path, folder) or inside("/dev", folder) or inside("/tmp", folder)
    if path == "/":
        assert made == [INSIDE, f"{INSIDE}/lib"]  # all else is the host's
    if path == "/tmp/bx-abc/g":
        assert "/tmp/bx-abc" in made  # inside the private /tmp


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
    have to be created in it; brokerd's own things go under the sandbox's own /dev."""
    for op in parse(command(HOST, call_for(tool, path="/"))).named("--ro-bind"):
        source, dest = op.args
        assert source == dest or dest.startswith(f"{INSIDE}/"), op


def test_a_grant_under_tmp_comes_after_the_private_tmp() -> None:
    mounts = parse(command(HOST, call_for("read_file", path="/tmp/bx-abc/g"))).mounts
    tmpfs = mounts.index(Op("--tmpfs", ("/tmp",)))
    grant = mounts.index(Op("--ro-bind-fd", (str(GRANT_FD), "/tmp/bx-abc/g")))
    assert tmpfs < grant


def test_the_proxy_socket_comes_after_the_folders_it_lies_under() -> None:
    mounts = parse(command(HOST, call_for("http_fetch", ca_file="/tmp/ca.pem"))).mounts
    dests = [op.dest for op in mounts]
    assert dests.index("/dev") < dests.index(PROXY_INSIDE)
    assert dests.index("/dev") < dests.index(CA_INSIDE)


# --- layers over the winner's path ----------------------------------------------------------


@pytest.mark.parametrize(("tool", "kind"), [("read_file", "--ro-bind-fd"), ("shell", "--bind-fd")])
def test_covers_pins_and_reopened_folders_come_after_the_grant_in_order(
    tool: str, kind: str
) -> None:
    found = (
        Layer(Cover.PIN, "/home/kyle/notes/docs", 21),
        Layer(Cover.FOLDER, "/home/kyle/notes/box"),
        Layer(Cover.FILE, "/home/kyle/notes/key.pem"),
        Layer(Cover.REOPEN, "/home/kyle/notes/box/workspace", 22),
        Layer(Cover.FOLDER, "/home/kyle/notes/docs/vault"),
    )
    parsed = parse(command(HOST, call_for(tool, layers=found)))
    mounts = [(op.name, op.dest) for op in parsed.mounts if inside("/home/kyle/notes", op.dest)]
    assert mounts == [
        (kind, "/home/kyle/notes"),
        (kind, "/home/kyle/notes/docs"),
        ("--tmpfs", "/home/kyle/notes/box"),
        ("--ro-bind", "/home/kyle/notes/key.pem"),
        (kind, "/home/kyle/notes/box/workspace"),
        ("--tmpfs", "/home/kyle/notes/docs/vault"),
    ]
    assert Op("--ro-bind", ("/dev/null", "/home/kyle/notes/key.pem")) in parsed.ops
    assert Op(kind, ("21", "/home/kyle/notes/docs")) in parsed.ops
    remounts = parsed.args("--remount-ro")
    assert ("/home/kyle/notes/box",) in remounts and ("/home/kyle/notes/docs/vault",) in remounts
    # the folder the workspace is shown again in is made inside the cover, 0755
    assert "/home/kyle/notes/box" not in [op.args[0] for op in parsed.named("--dir")]


# --- pinning the winner's path (open_granted) and what lies over it (layers) ---------------


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


def test_layers_are_found_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "docs" / "vault").mkdir(parents=True)
    (tmp_path / "key.pem").write_text("k")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to("elsewhere")
    root = str(tmp_path)
    view = View(
        root,
        covers=(f"{root}/docs/vault", f"{root}/key.pem", f"{root}/missing/x", f"{root}/linked/own"),
        pins=(f"{root}/docs", f"{root}/missing", f"{root}/linked"),
        strict=frozenset({f"{root}/docs/vault", f"{root}/key.pem"}),
    )
    bound = open_granted(root)
    assert bound is not None
    before = open_fds()
    try:
        found = layers(bound, view, writable=True)
        try:
            assert [(layer.cover, layer.path) for layer in found] == [
                (Cover.PIN, f"{root}/docs"),
                (Cover.FILE, f"{root}/key.pem"),
                (Cover.FOLDER, f"{root}/docs/vault"),
            ]  # parents first; what is missing, or one of boxmaker's own behind a link, skipped
            pin = found[0].fd
            assert os.fstat(pin).st_ino == os.stat(tmp_path / "docs").st_ino
        finally:
            close(found)
        assert open_fds() == before
        read_only = layers(bound, view, writable=False)
        assert [layer.cover for layer in read_only] == [Cover.FILE, Cover.FOLDER]  # no pins:
        close(read_only)  # a read-only sandbox can move nothing
        strict = View(
            root, covers=(f"{root}/linked/inner",), strict=frozenset({f"{root}/linked/inner"})
        )
        with pytest.raises(Unconfinable, match="symbolic link"):
            layers(bound, strict, writable=True)
        assert open_fds() == before
    finally:
        os.close(bound)
