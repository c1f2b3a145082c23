"""The guided `bxctl init` on a terminal (issue 27), as a new owner meets it: `bxctl init` on a
pseudo-terminal, its local model server a real HTTP server (the fake model of the e2e tests)
found where `$OLLAMA_HOST` says Ollama listens, `model check` run against it on the spot. The
answers shape the config (one `[model]` table), the workspace and the first grants; `--yes`
and no terminal ask nothing; leaving before the end writes nothing.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.config.written import COMMENTED_CONFIG
from tests.fakes.model_server import FakeModel
from tests.support.brokerd import short_folder
from tests.support.cli import bxctl
from tests.support.owner import Terminal

CALL = ("get_weather", '{"city":"Paris"}')


@pytest.fixture
def root() -> Iterator[Path]:
    with short_folder() as folder:
        yield folder


def init_on_a_terminal(home: Path, model: FakeModel | None, *argv: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "OPENAI_BASE_URL")}
    if model is not None:
        env["OLLAMA_HOST"] = f"127.0.0.1:{model.port}"  # as Ollama's own tools read it
    return Terminal([sys.executable, "-m", "bxctl", "--home", str(home), "init", *argv], env=env)


def test_a_new_owner_is_guided_from_the_model_server_to_the_first_grants(root: Path) -> None:
    home, workspace = root / "h", root / "work"
    with FakeModel() as model, init_on_a_terminal(home, model) as term:
        model.reply(tool_calls=[CALL])  # the check: whole, then streamed
        model.reply(tool_calls=[CALL])
        term.expect(r"Looking for model servers on this machine")
        term.expect(r"Which model server\?")
        term.expect(rf" 1  Ollama at {re.escape(model.base_url)} \(answering, 1 model\)")
        term.expect(r"OpenAI at https://api.openai.com/v1")
        term.expect(r"Anthropic at https://api.anthropic.com")
        term.expect(r"server \[1\]: ")
        term.type("99\n")  # not a choice: asked again
        term.expect(r"type a number from 1 to \d+, or nothing for 1")
        term.type("\n")
        term.expect(r"Which model\? Ollama lists:\s+1  fake")
        term.expect(r"model \(a number or a name\) \[fake\]: ")
        term.type("1\n")
        term.expect(r"key variable \(- for none\) \[-\]: ")
        term.type("\n")
        term.expect(r"Checking it, as `bxctl model check` does")
        term.expect(r"usable: the box can use this model")
        term.expect(r"workspace \[.*\]: ")
        term.type(f"{workspace}\n")
        term.expect(r"Let the agent read files in the workspace\? \[Y/n\] ")
        term.type("\n")
        term.expect(r"write files in the workspace\? \[Y/n\] ")
        term.type("n\n")
        term.expect(r"approved by you first\? \[Y/n\] ")
        term.type("y\n")
        term.expect(r"memory\)\? \[Y/n\] ")
        term.type("\n")
        term.expect(rf"ready: {re.escape(str(home))}")
        term.expect(r"Start the box now \(`bxctl up`\)\? \[Y/n\] ")
        term.type("n\n")
        term.expect(r"start it later with `bxctl up`")
        assert term.wait() == 0
        asked = [request["stream"] for request in model.requests]
    assert asked == [False, True], "model check ran on the spot, whole then streamed"
    text = (home / "config.toml").read_text()
    assert text.count("\n[model]\n") == 1
    settings = tomllib.loads(text)["model"]
    assert settings == {
        "provider": "openai",
        "base_url": model.base_url,
        "model": "fake",
        "api_key_env": "",
    }
    grants = {path.stem: tomllib.loads(path.read_text()) for path in (home / "grants").iterdir()}
    assert sorted(grants) == ["memory", "workspace-read", "workspace-shell"]
    assert grants["workspace-read"]["path"] == grants["workspace-shell"]["path"] == str(workspace)
    assert workspace.is_dir() and workspace.stat().st_mode & 0o777 == 0o700
    assert (home / "keys" / "owner.key_secret").exists()


def test_a_model_that_fails_its_check_can_be_kept_or_changed(root: Path) -> None:
    home = root / "h"
    with FakeModel() as model, init_on_a_terminal(home, model) as term:
        model.reply(text="I would call get_weather now.")  # no tool call: not usable
        term.expect(r"server \[1\]: ")
        term.type("\n")
        term.expect(r"\[fake\]: ")
        term.type("\n")
        term.expect(r"\[-\]: ")
        term.type("OPENAI_API_KEY\n")  # not set in this environment
        term.expect(r"\$OPENAI_API_KEY is not set here: export it where `bxctl up` runs")
        term.expect(r"not usable as configured")
        term.expect(r"Choose another server\? \[y/N\] ")
        term.type("y\n")
        term.expect(r"server \[1\]: ")
        term.type("\n")
        term.expect(r"\[fake\]: ")
        term.type("\n")
        term.expect(r"\[-\]: ")
        term.type("\n")
        term.expect(r"Choose another server\? \[y/N\] ")
        term.type("\n")  # keep it as it is
        term.expect(r"workspace \[.*\]: ")
        term.type("\x04")  # Ctrl-D: leave
        term.expect(r"left the setup before its end; nothing was written")
        assert term.wait() == 1
    assert not (home / "config.toml").exists() and not (home / "grants").exists()


def test_with_yes_or_without_a_terminal_init_asks_nothing(root: Path) -> None:
    with init_on_a_terminal(root / "y", None, "--yes") as term:
        term.expect(r"ready: ")
        assert term.wait() == 0
    piped = bxctl(root / "p", "init")
    assert piped.returncode == 0 and "ready: " in piped.stdout
    for home in (root / "y", root / "p"):
        assert (home / "config.toml").read_text() == COMMENTED_CONFIG
        assert len(list((home / "grants").iterdir())) == 4


def test_init_again_on_a_terminal_asks_nothing_and_changes_nothing(root: Path) -> None:
    home = root / "h"
    assert bxctl(home, "init").returncode == 0
    with init_on_a_terminal(home, None) as term:
        term.expect(r"already initialised: ")
        assert term.wait() == 0
