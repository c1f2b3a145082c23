"""The toolkit's entry point (SPEC §8.3): read the arguments, run one tool, print, exit 0/1/2.

Runs as `services.toolkit.__main__` and, bound alone into a sandbox, as `toolkit.__main__`, so
it imports its own package only relatively and nothing outside the standard library. Only the
chosen tool's module is imported: `read_file` loads no `os`, `json`, `ssl` or `subprocess`.
"""

import sys

from .input import ArgumentsError, InputError, parse_arguments, quoted, read_input
from .outcome import Outcome

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import BinaryIO, NoReturn

    from .input import Fields

    Runner = Callable[[dict[str, str], Mapping[str, str] | None, bool], Outcome]

SHELL_TIMEOUT_S = 60.0
FETCH_TIMEOUT_S = 20.0


def main() -> "NoReturn":
    """Confine this process as brokerd asked, then run the tool named by the one
    command-line argument and exit with its code."""
    import posix

    from .confine import ConfineError, confine

    try:
        confine(posix.environ)
    except ConfineError as error:
        outcome = Outcome.misuse(f"toolkit: {error}")
    else:
        stdin = sys.stdin.buffer if sys.stdin is not None else None
        outcome = run(tool_name(sys.argv[1:]), stdin, whole_process=True)
    _write_all(1, outcome.stdout)
    _write_all(2, outcome.stderr + "\n" if outcome.stderr else "")
    # Nothing is left to flush or close (the answer went straight to the descriptors), so
    # the interpreter is not torn down: that cost 1.5 ms of every call (issue 15).
    posix._exit(outcome.exit)


def tool_name(argv: "list[str]") -> str:
    """The tool name: the only argument, or "" when there is not exactly one or it is not
    UTF-8 (Python hands undecodable bytes over as lone surrogates)."""
    if len(argv) != 1:
        return ""
    try:
        argv[0].encode("utf-8")
    except UnicodeEncodeError:
        return ""
    return argv[0]


def run(
    name: str,
    stdin: "BinaryIO | None",
    environ: "Mapping[str, str] | None" = None,
    *,
    whole_process: bool = False,
) -> Outcome:
    """Run tool `name` with the arguments on `stdin`. The input is read before the name is
    looked at. `environ` defaults to the process's own (BX_ROOT, BX_TIMEOUT_S, BX_FETCH_PROXY).
    `whole_process`: this process exists only for this run (main), so `shell` may adopt, kill
    and reap every child it has, not only the command's process group."""
    try:
        text = read_input(stdin)
    except InputError as error:
        return Outcome.misuse(f"toolkit: {error}")
    tool = TOOLS.get(name)
    if tool is None:
        return Outcome.misuse(f"toolkit: unknown tool {quoted(name)}")
    fields, runner = tool
    try:
        arguments = parse_arguments(text, fields)
    except ArgumentsError as error:
        return Outcome.misuse(f"toolkit: {name}: the arguments do not parse: {error}")
    return runner(arguments, environ, whole_process)


def _read_file(
    arguments: "dict[str, str]", environ: "Mapping[str, str] | None", whole_process: bool
) -> Outcome:
    from .files import read_file

    return read_file(arguments["path"])


def _write_file(
    arguments: "dict[str, str]", environ: "Mapping[str, str] | None", whole_process: bool
) -> Outcome:
    from .files import write_file

    return write_file(arguments["path"], arguments["content"])


def _shell(
    arguments: "dict[str, str]", environ: "Mapping[str, str] | None", whole_process: bool
) -> Outcome:
    environ = _environ(environ)
    timeout_s = _timeout(environ, SHELL_TIMEOUT_S)
    if isinstance(timeout_s, Outcome):
        return timeout_s
    from .shell import run_shell

    limits = _limits(environ)
    if isinstance(limits, Outcome):
        return limits
    cgroup = _cgroup_fd(environ)
    if isinstance(cgroup, Outcome):
        return cgroup
    cwd = arguments["cwd"] if "cwd" in arguments else environ.get("BX_ROOT") or "/"
    return run_shell(
        arguments["command"],
        cwd,
        timeout_s,
        reap_orphans=whole_process,
        pid_namespace=environ.get("BX_PID_NAMESPACE") == "own",
        limits=limits,
        cgroup=cgroup,
    )


def _http_fetch(
    arguments: "dict[str, str]", environ: "Mapping[str, str] | None", whole_process: bool
) -> Outcome:
    environ = _environ(environ)
    timeout_s = _timeout(environ, FETCH_TIMEOUT_S)
    if isinstance(timeout_s, Outcome):
        return timeout_s
    proxy = environ.get("BX_FETCH_PROXY")
    if not proxy:
        return Outcome.misuse("toolkit: http_fetch: BX_FETCH_PROXY is not set")
    from .fetch import http_fetch

    return http_fetch(arguments["url"], proxy, timeout_s)


def _environ(environ: "Mapping[str, str] | None") -> "Mapping[str, str]":
    """The given environment, or the process's own, read from `posix` (`os` costs 1.2 ms of
    a shell call's start), decoded as `os.environ` would."""
    if environ is not None:
        return environ
    import posix

    return {
        key.decode("utf-8", "surrogateescape"): value.decode("utf-8", "surrogateescape")
        for key, value in posix.environ.items()
    }


def _limits(environ: "Mapping[str, str]") -> "tuple[int | None, int | None] | Outcome":
    """BX_MEMORY_MB and BX_MAX_PROCESSES (positive integers; unset means no limit)."""
    found: list[int | None] = []
    for name in ("BX_MEMORY_MB", "BX_MAX_PROCESSES"):
        text = environ.get(name)
        if text is None:
            found.append(None)
        elif text.isascii() and text.isdigit() and int(text) > 0:
            found.append(int(text))
        else:
            return Outcome.misuse(f"toolkit: {name} is not a positive integer: {quoted(text)}")
    return found[0], found[1]


def _cgroup_fd(environ: "Mapping[str, str]") -> "int | Outcome | None":
    """BX_CGROUP_FD: the call's memory cgroup, to join before the command starts (a
    descriptor above 2); unset: there is none."""
    text = environ.get("BX_CGROUP_FD")
    if text is None:
        return None
    if text.isascii() and text.isdigit() and int(text) > 2:
        return int(text)
    return Outcome.misuse(f"toolkit: BX_CGROUP_FD is not a descriptor: {quoted(text)}")


def _timeout(environ: "Mapping[str, str]", default: float) -> "float | Outcome":
    """BX_TIMEOUT_S as seconds (a positive, finite number), the default when it is unset."""
    text = environ.get("BX_TIMEOUT_S")
    if text is None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        return Outcome.misuse(f"toolkit: BX_TIMEOUT_S is not a positive number: {quoted(text)}")
    return seconds


# Each tool's fields (name, required), in SPEC §4.1's order, and the function that runs it.
TOOLS: "dict[str, tuple[Fields, Runner]]" = {
    "read_file": ((("path", True),), _read_file),
    "write_file": ((("path", True), ("content", True)), _write_file),
    "shell": ((("command", True), ("cwd", False)), _shell),
    "http_fetch": ((("url", True),), _http_fetch),
}


def _write_all(fd: int, text: str) -> None:
    """Write `text` as UTF-8 straight to `fd`, ignoring a closed pipe: there is nobody to tell."""
    if not text:
        return
    import io

    data = memoryview(text.encode("utf-8", "replace"))
    try:
        with io.FileIO(fd, "wb", closefd=False) as out:
            while data:
                written = out.write(data)
                data = data[written or 0 :]
    except OSError:
        pass


if __name__ == "__main__":
    main()
