"""The toolkit starts fast and stands alone: what `read_file` imports, and what the package may
import at all (SPEC §8.3: standard library only; `read_file` must not pay for `ssl`)."""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "services" / "toolkit"

# What the read_file path must not load: the heavy tools' modules, and even `os` and `json`
# (input.py reads brokerd's plain canonical object by hand; files.py uses built-in `open`).
NOT_FOR_READ_FILE = {
    "_json",
    "ssl",
    "socket",
    "subprocess",
    "selectors",
    "http",
    "typing",
    "dataclasses",
    "json",
    "re",
    "os",
    "toolkit.shell",
    "toolkit.fetch",
}


def _imported(stderr: str) -> list[str]:
    """Module names from `-X importtime` output."""
    names = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.append(name)
    return names


def _importtime(
    toolkit_command: list[str], tool: str, stdin: bytes, env: dict[str, str] | None = None
) -> list[str]:
    python, *rest = toolkit_command
    done = subprocess.run(
        [python, "-X", "importtime", *rest, tool],
        input=stdin,
        capture_output=True,
        env=env or {},
        timeout=20,
    )
    return _imported(done.stderr.decode())


def test_read_file_imports_no_ssl_socket_subprocess_or_even_os(toolkit_command, tmp_path):
    (tmp_path / "f").write_text("x")
    names = _importtime(toolkit_command, "read_file", f'{{"path":"{tmp_path}/f"}}'.encode())
    assert "toolkit.files" in names
    assert set(names) & NOT_FOR_READ_FILE == set()
    ours = [name for name in names if name.startswith("toolkit")]
    assert sorted(ours) == [
        "toolkit",
        "toolkit.__main__",
        "toolkit.confine",  # posix only: becoming the tool user, checking the binds
        "toolkit.files",
        "toolkit.input",
        "toolkit.outcome",
    ]


# What shell must not load (issue 15): together they were 50 ms of its start.
NOT_FOR_SHELL = {"ssl", "socket", "subprocess", "signal", "enum", "ctypes", "threading", "os"}
NOT_FOR_SHELL |= {"contextlib"}


def test_shell_imports_no_subprocess_signal_or_ctypes(toolkit_command, tmp_path):
    shell = _importtime(
        toolkit_command, "shell", f'{{"command":"true","cwd":"{tmp_path}"}}'.encode()
    )
    # `_ctypes` too, here: run directly, nothing sealed it (in a sandbox: test_shell_namespace)
    assert "toolkit.shell" in shell
    assert set(shell) & NOT_FOR_SHELL == set()


def test_only_http_fetch_imports_ssl(toolkit_command, tmp_path):
    no_proxy = {"BX_FETCH_PROXY": str(tmp_path / "none.sock")}
    fetch = _importtime(toolkit_command, "http_fetch", b'{"url":"https://x.test/"}', no_proxy)
    assert "ssl" in fetch and "subprocess" not in fetch


def test_read_file_start_up_is_measured_against_a_bare_python(toolkit_command, tmp_path, capsys):
    """Measured, not asserted (timing is the bench's job, §17): printed with `pytest -s`."""
    (tmp_path / "f").write_text("x")
    python = toolkit_command[0]
    stdin = f'{{"path":"{tmp_path}/f"}}'.encode()

    def median_ms(argv: list[str]) -> float:
        times = []
        for _ in range(15):
            start = time.perf_counter()
            subprocess.run(argv, input=stdin, capture_output=True, timeout=20)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000

    bare = median_ms([python, "-I", "-S", "-c", "pass"])
    read = median_ms([*toolkit_command, "read_file"])
    with capsys.disabled():
        print(f"\n[toolkit start-up] python -I -S -c pass: {bare:.1f} ms; read_file: {read:.1f} ms")


def test_the_package_imports_only_the_standard_library_and_itself() -> None:
    for source in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(source.read_text(), str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: its own package
                    continue
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in sys.stdlib_module_names, f"{source.name} imports {root}"


def test_every_module_of_the_package_opens_with_a_docstring() -> None:
    for source in sorted(Path(PACKAGE).glob("*.py")):
        assert ast.get_docstring(ast.parse(source.read_text())), source.name
