"""`bxctl` for tests, in the test's own process where it can be (issue 11): `bxctl.app.main`
on its own argv, its standard streams and environment swapped in for the call, which saves
the half second of imports a `python -m bxctl` costs.

`up` (it forks the supervisor), `chat` (it waits out a turn, and reads the keyboard) and
`logs -f` (it runs until Ctrl-C) still run as processes of their own, as the owner runs them;
`down` and `restart` run here: they ask the supervisor, and wait, as any blocking call does.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bxctl.app import main


@dataclass(frozen=True)
class Completed:
    """What a run of bxctl gave: named as `subprocess.CompletedProcess` names it."""

    returncode: int
    stdout: str
    stderr: str


def needs_a_process(args: Sequence[str]) -> bool:
    """`up`, `chat` and `logs -f`: see above."""
    command = args[0] if args else None
    follows = command == "logs" and ("-f" in args or "--follow" in args)
    return command in ("up", "chat") or follows


def bxctl(
    home: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
) -> Completed:
    """`bxctl --home HOME ARGS`, standard input at its end: in this process, or in its own
    when the command needs one (`cwd` and `timeout` are for that process only)."""
    if not needs_a_process(args):
        return run(home, *args, env=env)
    done = subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    return Completed(done.returncode, done.stdout, done.stderr)


def run(home: Path, *args: str, env: Mapping[str, str] | None = None) -> Completed:
    """`bxctl --home HOME ARGS` in this process: nothing is a terminal (plain columns, no
    colour, no question asked), and `env`, when given, is the whole environment meanwhile."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with (
        environment(env),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        empty_stdin(),
    ):
        try:
            main(["--home", str(home), *args])
        except SystemExit as stop:
            code = int(stop.code or 0)
    return Completed(code, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """`os.environ` made `env` (None: left as it is), and put back after. Only the variables
    that differ change, so another thread never sees an empty environment."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    _become(env)
    try:
        yield
    finally:
        _become(saved)


def _become(env: Mapping[str, str]) -> None:
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@contextlib.contextmanager
def empty_stdin() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO()
    try:
        yield
    finally:
        sys.stdin = saved
