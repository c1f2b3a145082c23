"""`run_daemon`'s exit status when a daemon cannot start (issue 10): 78 for what only the owner
can mend, so the supervisor marks it failed at once; 1 for what a restart may mend. In this
process, with a `serve` that fails at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bxcore.daemon import Context, Serve, SetupError, StartError, run_daemon
from bxcore.errors import SETUP_ERROR_EXIT


def failing(error: Exception) -> Serve:
    async def serve(ctx: Context) -> None:
        raise error

    return serve


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (SetupError("cannot bind ipc:///x/gateway.sock: Address already in use"), SETUP_ERROR_EXIT),
        (StartError("cannot open the memory store"), 1),
        (OSError(5, "Input/output error", "/x/y"), 1),
    ],
)
def test_a_daemon_that_cannot_start_says_so_in_one_line_with_its_status(
    short_tmp: Path, capsys: pytest.CaptureFixture[str], error: Exception, status: int
) -> None:
    assert run_daemon("testd", failing(error), ["--home", str(short_tmp)]) == status
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("testd: ")]
    assert len(said) == 1 and "Traceback" not in err


def test_a_bad_config_is_a_setup_error(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (short_tmp / "config.toml").write_text("[loop]\nmax_stepz = 3\n")
    serve = failing(AssertionError("not reached"))
    assert run_daemon("testd", serve, ["--home", str(short_tmp)]) == SETUP_ERROR_EXIT
    assert "max_stepz" in capsys.readouterr().err


def test_a_daemon_imports_anyios_asyncio_backend_before_it_is_let_go() -> None:
    """Else `anyio.run` imports it after the start gate, in each service one after another."""
    code = "import sys, bxcore.daemon; print('anyio._backends._asyncio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
