"""`bxctl model check` (issue 14): can the box use the model `[model]` names, and if not, what
to change. For the owner whose agent "does nothing".

Reads config.toml and the key's variable from bxctl's own environment, reaches the server,
lists its models, sends one tiny request with one tool whole and streamed (the configured
way first), and prints each check and the verdict. Exit 0 when the box can use the model,
1 otherwise. `bxctl.model_probe` talks; `bxctl.model_verdict` judges.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

import anyio
import typer

from bxcore.config.file import ConfigError, ModelConfig, load_config
from bxcore.home.layout import Home
from bxctl.model_verdict import Probe, Report, Setup, report
from bxctl.output import fail, print_json, say, table

app = typer.Typer(help="The model server: is it usable, and what to change.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def setup_of(config: ModelConfig, environ: Mapping[str, str]) -> Setup:
    key_set = bool(config.api_key_env and environ.get(config.api_key_env, "").strip())
    return Setup(
        config.provider, config.base_url, config.model, config.api_key_env, config.stream, key_set
    )


async def run_check(config: ModelConfig, environ: Mapping[str, str]) -> Report:
    """Every step the server lets the check take: a probe only after the server was reached
    and the key is there; the configured way first."""
    from bxctl import model_probe  # httpx and loopd's client: not for every bxctl command

    setup = setup_of(config, environ)
    reached, listing = await model_probe.reach(config, environ)
    probes: list[Probe] = []
    key_missing = bool(setup.api_key_env) and not setup.key_set
    if reached.failure is None and not key_missing:
        for streamed in (config.stream, not config.stream):
            probes.append(await model_probe.probe(config, environ, streamed))
    return report(setup, reached, listing, probes)


@app.command()
def check(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Reach the model server, list its models, and try one tool call whole and streamed."""
    home: Home = ctx.obj.home
    try:
        config = load_config(home.config).model
    except ConfigError as error:
        fail(str(error))
    if config.provider == "scripted":
        line = f"provider scripted plays {config.script}: no server to check"
        print_json({"usable": True, "provider": "scripted", "note": line}) if as_json else say(line)
        return
    result = anyio.run(run_check, config, os.environ)
    if as_json:
        print_json(result.as_json())
    else:
        show(result)
    if not result.usable:
        raise typer.Exit(1)


def show(result: Report) -> None:
    setup = result.setup
    key = f"${setup.api_key_env}" if setup.api_key_env else "none"
    say(
        f"{setup.provider} at {setup.base_url}, model {setup.model!r}, key {key}, "
        f"stream = {'true' if setup.stream else 'false'}"
    )
    marks = {True: "ok", False: "FAIL", None: "-"}
    rows = [
        [c.name, marks[c.ok], "" if c.seconds is None else f"{c.seconds:.2f} s", c.detail]
        for c in result.checks
    ]
    styles = {n: "red" for n, c in enumerate(result.checks) if c.ok is False}
    table(["check", "", "time", "what"], rows, styles=styles)
    for line in result.advice:
        say(f"change: {line}")
    if result.usable:
        say("usable: the box can use this model", style="green")
    else:
        say("not usable as configured", style="red")
