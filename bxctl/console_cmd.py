"""`bxctl console [--open]` (SPEC §12.1, §13): the console's link with the owner token in its
fragment, printed (or opened in the owner's browser). `bxctl up` prints the same line once.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bxcore.config import ConfigError, load_config
from bxcore.console_link import TokenError, console_link, ensure_token, read_token
from bxcore.home import Home
from bxctl.output import fail, print_json, say


def link(home: Home) -> str:
    """The console's link for this home; CommandError-style `fail` when it cannot be had."""
    try:
        config = load_config(home.config).console
        if not config.enabled:
            fail("the console is off ([console] enabled = false in config.toml)")
        ensure_token(home.console_token)
        return console_link(config.host, config.port, read_token(home.console_token))
    except (ConfigError, TokenError) as error:
        fail(str(error))


def console(
    ctx: typer.Context,
    open_: Annotated[
        bool, typer.Option("--open", help="Open the link in your web browser.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """The console's link, with the owner token (keep it to yourself)."""
    home: Home = ctx.obj.home
    url = link(home)
    if as_json:
        print_json({"url": url})
    else:
        say(url)
    if open_:
        import webbrowser

        if not webbrowser.open(url):
            fail("no web browser could be opened here; open the link above yourself")


def console_line(home: Home, address: str) -> str:
    """What `bxctl up` prints once the box has started: the address with the token, so one
    click logs in; the bare address (and how to get the link) when the token is unreadable."""
    try:
        return f"{address}#token={read_token(home.console_token)}"
    except TokenError as error:
        return f"{address}  ({error})"


def console_hint(address: str) -> str:
    """What `bxctl status` prints: the address, and where the link with the token is."""
    return f"{address}  (`bxctl console` gives the link that logs you in)"
