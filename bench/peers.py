"""`python -m bench toolcall --peers` (issue 15): other sandboxes reading the same file, timed in
the same interleaved rounds as boxmaker's calls, each beside what it can do.

- the bare floor: `bwrap --unshare-all … cat FILE`, always;
- Codex CLI's sandbox helper (`codex-linux-sandbox`: bwrap and seccomp) called directly, and
  Anthropic's sandbox runtime embedded as Claude Code embeds it (its proxies started once, then
  `wrapWithSandbox` and a spawn per call), when their npm packages are installed in the folder
  `BX_BENCH_PEERS` names (and `node` is on PATH); otherwise a line says how to install them.

Nothing here is part of boxmaker, and CI never needs the peers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PEERS_ENV = "BX_BENCH_PEERS"
INSTALL = (
    "npm install --prefix DIR @openai/codex @anthropic-ai/sandbox-runtime, "
    "apt-get install bubblewrap ripgrep socat, then run with BX_BENCH_PEERS=DIR"
)
SRT_DRIVER = Path(__file__).with_name("peers_srt.mjs")
# What Codex's CLI hands its helper for its default read-only mode (seen with strace).
CODEX_READ_ONLY = {
    "type": "managed",
    "file_system": {
        "type": "restricted",
        "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}],
    },
    "network": "restricted",
}


@dataclass(frozen=True, slots=True)
class Peer:
    """One way to read the file, and what it can do besides."""

    name: str
    once: Callable[[], None]
    sees: str  # what of the host the command sees
    decides: bool  # decides each call against grants and writes a ledger


def bwrap_cat(path: Path) -> Peer:
    """The floor: a fresh bwrap sandbox that binds the file's folder and runs `cat`."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bwrap is not installed"
    folder = str(path.parent)
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
            "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
            "--dev", "/dev", "--ro-bind", folder, folder, "/bin/cat", str(path)]  # fmt: skip

    def once() -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)

    return Peer("bare bwrap --unshare-all … cat FILE", once, "its folder, read-only", False)


@contextlib.contextmanager
def started(path: Path, scratch: Path) -> Iterator[list[Peer]]:
    """The floor and every peer that is installed, ready to be timed; says which are not."""
    found = [bwrap_cat(path)]
    where = os.environ.get(PEERS_ENV)
    if not where:
        print(f"  peers skipped: {PEERS_ENV} is not set; to time them: {INSTALL}")
        yield found
        return
    modules = Path(where) / "node_modules"
    with contextlib.ExitStack() as held:
        codex = _codex(modules, path, scratch)
        if codex is None:
            print(f"  Codex's sandbox helper skipped: no @openai/codex in {modules}; {INSTALL}")
        else:
            found.append(codex)
        srt = held.enter_context(_srt(modules, path))
        if srt is None:
            print(f"  sandbox-runtime skipped: no node or package in {modules}; {INSTALL}")
        else:
            found.append(srt)
        yield found


def _codex(modules: Path, path: Path, scratch: Path) -> Peer | None:
    """Codex's own binary, called under the name that makes it its Linux sandbox helper."""
    binaries = sorted(modules.glob("@openai/codex-linux-*/vendor/*/bin/codex"))
    if not binaries:
        return None
    helper = scratch / "codex-linux-sandbox"
    helper.symlink_to(binaries[0])
    folder = str(path.parent)
    profile = json.dumps(CODEX_READ_ONLY)
    argv = [str(helper), "--sandbox-policy-cwd", folder, "--command-cwd", folder,
            "--permission-profile", profile, "--", "cat", str(path)]  # fmt: skip

    def once() -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=folder)

    sees = "the whole host, read-only"
    return Peer("Codex's sandbox helper, called directly", once, sees, False)


@contextlib.contextmanager
def _srt(modules: Path, path: Path) -> Iterator[Peer | None]:
    """Anthropic's sandbox runtime in a node process of its own, driven line by line."""
    package = modules / "@anthropic-ai" / "sandbox-runtime"
    node = shutil.which("node")
    if node is None or not (package / "dist" / "index.js").is_file():
        yield None
        return
    driver = subprocess.Popen(
        [node, str(SRT_DRIVER), str(package), str(path.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdin is not None and driver.stdout is not None
    stdin, stdout = driver.stdin, driver.stdout
    try:
        if stdout.readline().strip() != "ready":
            print("  sandbox-runtime skipped: it did not start (see its error above)")
            yield None
            return

        def once() -> None:
            stdin.write(f"{path}\n")
            stdin.flush()
            code, _ = stdout.readline().split()
            assert code == "0", f"sandbox-runtime's cat ended with {code}"

        sees = "the whole host, read-only, but what it denies; network through its proxies"
        yield Peer("Anthropic's sandbox runtime, embedded", once, sees, False)
    finally:
        stdin.close()
        try:
            driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
