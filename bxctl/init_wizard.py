"""The guided `bxctl init` on a terminal (issue 27, docs/cli.md): the model server (the local
ones that answer found first), the model, the key's variable, `bxctl model check` on the spot,
the workspace, the first grants; then the home is written and `bxctl up` offered.

The shell of `init_guide`: it asks through `ask` (a line, None at the end of input), says
through `say`, probes the usual local addresses at once with a short limit, and writes
nothing until every question is answered (Ctrl-C or Ctrl-D before that leaves nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import anyio

from bxcore.config.file import ModelConfig
from bxcore.home.layout import Home
from bxctl import init_guide
from bxctl.init import init_home, starter_set
from bxctl.init_guide import ModelChoice, Retry, Server
from bxctl.output import CommandError, invocation, say

PROBE_S = 1.0  # a local server answers its model list in milliseconds; a loaded machine, slower
T = TypeVar("T")
Ask = Callable[[str], str | None]

#: The starter grants as questions, in the order asked (every one's answer defaults to yes).
GRANT_QUESTIONS = (
    ("workspace-read", "read files in the workspace"),
    ("workspace-write", "write files in the workspace"),
    ("workspace-shell", "run commands in the workspace, each one approved by you first"),
    ("memory", "keep notes across conversations (memory)"),
)


class Left(CommandError):
    """The owner left before the end: nothing was written."""

    def __init__(self) -> None:
        super().__init__("left the setup before its end; nothing was written", 1)


def terminal_input(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


def guide(home: Home, ask: Ask = terminal_input, environ: Mapping[str, str] = os.environ) -> int:
    """The whole dialogue; the home written at its end; the exit status (`bxctl up`'s, when
    the owner starts the box)."""
    say(f"Setting up boxmaker in {home.root} (`bxctl init --yes` asks nothing).")
    say("Everything asked here stays editable in config.toml and with `bxctl grant`.")
    while True:
        choice = _model(ask, environ)
        if _checked(choice, environ) or not _question(ask, "Choose another server?", False):
            break
    workspace = _workspace(ask, home)
    wanted = [
        grant for grant, what in GRANT_QUESTIONS if _question(ask, f"Let the agent {what}?", True)
    ]
    grants = {k: v for k, v in starter_set(home, workspace).items() if k in wanted}
    made = init_home(
        home, config=init_guide.config_text(choice), grants=grants, workspace=workspace
    )
    for line in made:
        say(f"created {line}")
    say(f"ready: {home.root}", style="green")
    if not grants:
        say("no grants: the agent may do nothing until you add one (`bxctl grant add`)")
    if not _question(ask, "Start the box now (`bxctl up`)?", True):
        say(f"start it later with `{invocation()} up`")
        return 0
    up = [sys.executable, "-m", "bxctl", "--home", str(home.root), "up"]
    return subprocess.run(up, check=False).returncode


# --- the model ----------------------------------------------------------------------------


def _model(ask: Ask, environ: Mapping[str, str]) -> ModelChoice:
    say("Looking for model servers on this machine…")
    found = anyio.run(_probe_all, init_guide.probed(environ))
    answering = [server for server in found if server.found]
    if not answering:
        say("  none answers at the usual addresses; choose one below to set it up")
    offered = init_guide.choices(found)
    say("Which model server?")
    for number, server in enumerate(offered, start=1):
        say(f"  {number:>2}  {server.shown()}")
    index = _until(ask, "server [1]: ", lambda r: init_guide.pick(r, len(offered), 0))
    server = offered[index]
    url = server.base_url or _until(ask, "its address (base_url): ", init_guide.base_url)
    listed = server.models or ()
    if listed:
        say(f"Which model? {server.family} lists:")
        for number, name in enumerate(listed[:20], start=1):
            say(f"  {number:>2}  {name}")
    default = listed[0] if listed else server.model
    model = _until(
        ask, f"model (a number or a name) [{default}]: ",
        lambda r: init_guide.model_name(r, listed[:20], default),
    )  # fmt: skip
    key = _key(ask, server, environ)
    return ModelChoice(server.provider, url, model, key)


async def _probe_all(servers: list[Server]) -> list[Server]:
    found: list[Server] = list(servers)

    async def one(index: int) -> None:
        found[index] = await _probe(servers[index])

    async with anyio.create_task_group() as group:
        for index in range(len(servers)):
            group.start_soon(one, index)
    return found


async def _probe(server: Server) -> Server:
    """The server, with the models it lists when it answers at its address within PROBE_S."""
    from bxctl import model_probe
    from bxctl.model_verdict import Failure

    config = ModelConfig(provider=server.provider, base_url=server.base_url, timeout_s=PROBE_S)
    reached, listing = await model_probe.reach(config, {})
    if reached.failure is None:
        names = listing.models if listing is not None and listing.models is not None else ()
        return replace(server, models=tuple(names))
    if reached.failure is Failure.KEY:  # it answers, and wants a key to list its models
        return replace(server, models=())
    return server


def _key(ask: Ask, server: Server, environ: Mapping[str, str]) -> str:
    default = server.key_env
    shown = default or "-"
    say("The API key: the name of the environment variable that holds it (never the key).")
    name = _until(
        ask, f"key variable (- for none) [{shown}]: ", lambda r: init_guide.key_env(r, default)
    )
    if name and not environ.get(name, "").strip():
        say(f"  ${name} is not set here: export it where `bxctl up` runs (docs/models.md)")
    elif name:
        say(f"  ${name} is set here")
    return name


def _checked(choice: ModelChoice, environ: Mapping[str, str]) -> bool:
    """`bxctl model check` on the choice, shown as it shows it; whether the box can use it."""
    from bxctl.model_cmds import run_check, show

    config = ModelConfig(choice.provider, choice.base_url, choice.model, choice.api_key_env)
    say("Checking it, as `bxctl model check` does…")
    result = anyio.run(run_check, config, environ)
    show(result)
    return result.usable


# --- the workspace and the rest -----------------------------------------------------------


def _workspace(ask: Ask, home: Home) -> Path:
    def folder(reply: str) -> Path | Retry:
        text = os.path.expanduser(reply.strip())
        if not text:
            return home.workspace
        path = Path(text)
        if not path.is_absolute():
            return Retry("an absolute path (or ~/…)")
        if path.exists() and not path.is_dir():
            return Retry(f"{path} is not a folder")
        return path

    say("The workspace: the folder the agent reads and writes (the first grants name it).")
    return _until(ask, f"workspace [{home.workspace}]: ", folder)


def _question(ask: Ask, question: str, default: bool) -> bool:
    hint = "[Y/n]" if default else "[y/N]"
    return _until(ask, f"{question} {hint} ", lambda r: init_guide.yes(r, default))


def _until(ask: Ask, prompt: str, read: Callable[[str], T | Retry]) -> T:
    """Ask until the reply reads as an answer; `Left` at the end of input."""
    while True:
        reply = ask(prompt)
        if reply is None:
            say("")
            raise Left()
        answer = read(reply)
        if not isinstance(answer, Retry):
            return answer
        say(f"  {answer.why}")
