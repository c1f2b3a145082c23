"""An MCP server of one AgentDojo suite (`python server.py SUITE FOLDER`), run by brokerd
in its sandbox for `python -m bench agentdojo` (bench/dojo/).

It offers the suite's own tools, each with AgentDojo's description and the JSON schema of its
arguments (the bench writes them to FOLDER/SUITE.tools.json from AgentDojo's suite: importing
AgentDojo takes seconds, more than brokerd's start allows, so it is imported at the first
call), and runs every call with AgentDojo's own functions on the suite's environment. The
bench says which task runs in FOLDER/task.json (`run`, `user_task`, `injections`); the first
call of a new `run` loads the suite's default environment with those injections (as AgentDojo's
`run_task_with_pipeline` does), and after each call the environment and the calls run so far
are written to FOLDER/state-<run>.pickle, from which the bench scores the run with AgentDojo's
checks. One server process serves every session of the box (`per_session = false`): the bench
runs one task at a time.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

if TYPE_CHECKING:
    from agentdojo.functions_runtime import FunctionsRuntime, TaskEnvironment
    from agentdojo.task_suite.task_suite import TaskSuite

VERSION = "v1.2.2"


class Dojo:
    """One suite's environment for the run the bench named, and the calls it ran."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.folder = folder
        self._suite: tuple[TaskSuite[Any], FunctionsRuntime] | None = None
        self.run: str | None = None
        self.env: TaskEnvironment | None = None
        self.calls: list[dict[str, Any]] = []

    def tools(self) -> list[types.Tool]:
        listed = json.loads((self.folder / f"{self.name}.tools.json").read_text())
        return [types.Tool(**tool) for tool in listed]

    def suite(self) -> tuple[TaskSuite[Any], FunctionsRuntime]:
        if self._suite is None:
            from agentdojo.functions_runtime import FunctionsRuntime
            from agentdojo.task_suite.load_suites import get_suites

            suite = get_suites(VERSION)[self.name]
            self._suite = suite, FunctionsRuntime(suite.tools)
        return self._suite

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The call's text for the model, and whether it failed."""
        from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

        suite, runtime = self.suite()
        env = self._environment(suite)
        result, error = runtime.run_function(env, name, arguments, raise_on_error=False)
        self.calls.append({"function": name, "args": arguments})
        self._save(env)
        if error is not None:
            return error, True
        return tool_result_to_str(result), False

    def _environment(self, suite: TaskSuite[Any]) -> TaskEnvironment:
        task = json.loads((self.folder / "task.json").read_text())
        if task["run"] != self.run or self.env is None:
            env = suite.load_and_inject_default_environment(task["injections"])
            user_task = suite.get_user_task_by_id(task["user_task"])
            self.env = user_task.init_environment(env)
            self.run, self.calls = task["run"], []
        return self.env

    def _save(self, env: TaskEnvironment) -> None:
        state = {"env": env, "calls": self.calls}  # pickled: AgentDojo's environments do not
        path = self.folder / f"state-{self.run}.pickle"  # survive a JSON round trip
        partial = path.with_suffix(".part")
        partial.write_bytes(pickle.dumps(state))
        os.replace(partial, path)


def server(dojo: Dojo) -> Server[Any]:
    async def list_tools(
        _ctx: object, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=dojo.tools())

    async def call_tool(_ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, failed = dojo.call(params.name, dict(params.arguments or {}))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    return Server(f"agentdojo-{dojo.name}", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(dojo: Dojo) -> None:
    lowlevel = server(dojo)
    async with stdio_server() as (read, write):
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def main() -> None:
    name, folder = sys.argv[1], Path(sys.argv[2])
    anyio.run(serve, Dojo(name, folder))


if __name__ == "__main__":
    main()
