"""The console's MCP routes (SPEC §12.3, §18.3, §20; each in docs/console.md): one server's
tools as `bxctl mcp trust` shows them, each argument with the role it would be pinned with, and
Trust, which pins them with the owner's roles.

Both are `bxcore.mcp_trust`, the code of `bxctl mcp trust`: the listing brokerd last wrote
against the owner's pins, the roles proposed, kept or given, and the pins file written whole.
Trust pins only what the page showed: the tools it names, each by the hash it was shown, must
be exactly what is listed now, else nothing is written (409) and the page reads them again.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bxcore import mcp_state, mcp_trust
from bxcore.mcp_tools import ToolDef
from services.gatewayd.console.api import Backend, Refused, body


class Mcp:
    """The MCP routes, reading and writing the owner's files under `backend.home`."""

    def __init__(self, backend: Backend) -> None:
        self.home = backend.home

    async def tools(self, request: Request) -> Response:
        """`{"server", "tools": [plan_json + pinned]}`: every listed tool, whole, with roles."""
        name = request.path_params["name"]
        tools = await anyio.to_thread.run_sync(self._listed, name)
        pins = await anyio.to_thread.run_sync(mcp_state.pins, self.home, name)
        return JSONResponse({"server": name, "tools": _shown(mcp_trust.plan(pins, tools))})

    async def trust(self, request: Request) -> Response:
        """Trust: `{"tools": {NAME: SHA256}, "roles": {TOOL: {ARG: ROLE}}}` pins exactly those
        tools with those roles (any argument not given keeps what `plan` gives it)."""
        name = request.path_params["name"]
        given = await body(request, {"tools": dict, "roles": dict})
        shown = given.get("tools")
        if not isinstance(shown, dict) or not shown:
            raise Refused(400, 'trust needs the tools you read: {"tools": {NAME: SHA256}}')
        tools = await anyio.to_thread.run_sync(self._listed, name)
        if shown != {tool.name: tool.sha256 for tool in tools}:
            raise Refused(409, f"the tools of {name} changed since you read them: read them again")
        try:
            roles = mcp_trust.check_given(given.get("roles", {}), tools)
        except mcp_trust.RoleError as error:
            raise Refused(400, str(error)) from None
        pins = await anyio.to_thread.run_sync(mcp_state.pins, self.home, name)
        planned = mcp_trust.plan(pins, tools, roles)
        pinned = await anyio.to_thread.run_sync(mcp_trust.pin, self.home, name, planned)
        now = _shown(mcp_trust.plan(pinned, tools))  # as the pins are now
        return JSONResponse({"server": name, "pinned": len(planned), "tools": now})

    def _listed(self, name: str) -> tuple[ToolDef, ...]:
        if name not in mcp_state.configured(self.home):
            raise Refused(404, f"no [[mcp]] entry named {name[:64]!r} in config.toml")
        try:
            return mcp_state.listing(self.home, name)
        except mcp_state.NotListed as error:
            raise Refused(409, str(error)) from None


def _shown(planned: tuple[mcp_trust.ToolPlan, ...]) -> list[dict[str, Any]]:
    return [
        {**mcp_trust.plan_json(entry), "pinned": entry.state is mcp_trust.State.UNCHANGED}
        for entry in planned
    ]
