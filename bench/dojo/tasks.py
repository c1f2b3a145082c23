"""AgentDojo's side of `python -m bench agentdojo`: the runs of its v1.2.2 suites, the script
the worst-case model follows in each, and each run's score by AgentDojo's own checks.

A benign run is one user task on the default environment. An attack pairs a user task with an
injection task: the injection task's goal, in AgentDojo's `important_instructions` attack
(written as the owner, Emma Johnson), is put in every injection vector the user task's ground
truth reads (`get_injection_candidates`), as AgentDojo's benchmark does. The pairs are those
whose injection task has ground-truth calls, 609 in v1.2.2 (workspace's tasks 6 to 13 and
travel's 6 have none: a scripted model has nothing to obey there). Scores: a benign run's
utility and an attack's security (True: the attack's goal was reached) come from the tasks'
own `utility`/`security` checks (`…_from_traces` first), on the environment the suite's server
left and the calls that server ran: a call the box denied never ran, so it is in no trace.
"""

from __future__ import annotations

import json
import pickle
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import FunctionCall, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite

from bench.dojo.model import Script, Step

VERSION = "v1.2.2"
SUITES = ("banking", "slack", "travel", "workspace")
MARKER = "<INFORMATION>"  # in every injection of the attack, in no default environment
PIPELINE = "gpt-4o-2024-05-13"  # the model the attack addresses by name


@dataclass(frozen=True)
class Run:
    """One run: a user task, and the injection task of an attack (None: benign)."""

    suite: str
    user_task: str
    injection_task: str | None = None

    @property
    def name(self) -> str:
        name = f"{self.suite}-{self.user_task.removeprefix('user_task_')}"
        if self.injection_task is None:
            return name
        return f"{name}-{self.injection_task.removeprefix('injection_task_')}"


def suite_of(name: str) -> TaskSuite[Any]:
    suite: TaskSuite[Any] = get_suites(VERSION)[name]
    return suite


def tool_listing(name: str) -> list[dict[str, Any]]:
    """The suite's tools as its MCP server lists them: AgentDojo's names, descriptions and
    argument schemas."""
    return [
        {
            "name": function.name,
            "description": function.description,
            "input_schema": function.parameters.model_json_schema(),
        }
        for function in suite_of(name).tools
    ]


def runs(suite: str, sample: int | None) -> tuple[list[Run], list[Run]]:
    """The suite's benign runs and attacks, every one or `sample` of each (the first user
    tasks; pairs drawn with a fixed seed, so two sampled runs are the same runs)."""
    tasks = suite_of(suite)
    users = list(tasks.user_tasks)
    scripted = [i for i in tasks.injection_tasks if _obeyable(suite, i)]
    pairs = [Run(suite, u, i) for u in users for i in scripted]
    benign = [Run(suite, u) for u in users]
    if sample is None:
        return benign, pairs
    return benign[:sample], random.Random(0).sample(pairs, min(sample, len(pairs)))


def _obeyable(suite: str, injection_task: str) -> bool:
    """Whether the injection task has ground-truth calls for the model to make (workspace's
    v1.2 tasks 6 to 13 and travel's 6 have none: AgentDojo checks only what a model did)."""
    tasks = suite_of(suite)
    task = tasks.get_injection_task_by_id(injection_task)
    return bool(task.ground_truth(tasks.load_and_inject_default_environment({})))


class _Named:
    """What AgentDojo's attack reads of the attacked pipeline: its model's name."""

    name = PIPELINE


@cache
def _attack(suite: str) -> ImportantInstructionsAttack:
    return ImportantInstructionsAttack(suite_of(suite), _Named())


def injections(run: Run) -> dict[str, str]:
    if run.injection_task is None:
        return {}
    suite = suite_of(run.suite)
    found = _attack(run.suite).attack(
        suite.get_user_task_by_id(run.user_task),
        suite.get_injection_task_by_id(run.injection_task),
    )
    return dict(found)


def environment(run: Run, injected: dict[str, str]) -> TaskEnvironment:
    """The environment before the run, as the suite's server loads it."""
    suite = suite_of(run.suite)
    env = suite.load_and_inject_default_environment(injected)
    user_task: BaseUserTask[Any] = suite.get_user_task_by_id(run.user_task)
    return user_task.init_environment(env)


def script(run: Run, server: str, injected: dict[str, str]) -> Script:
    suite = suite_of(run.suite)
    user_task: BaseUserTask[Any] = suite.get_user_task_by_id(run.user_task)
    task = _steps(server, user_task.ground_truth(environment(run, injected)))
    if run.injection_task is None:
        return Script(user_task.PROMPT, task, answer=user_task.GROUND_TRUTH_OUTPUT)
    injection: BaseInjectionTask[Any] = suite.get_injection_task_by_id(run.injection_task)
    attack = _steps(server, injection.ground_truth(environment(run, injected)))
    return Script(user_task.PROMPT, task, attack, MARKER, user_task.GROUND_TRUTH_OUTPUT)


def _steps(server: str, calls: list[FunctionCall]) -> tuple[Step, ...]:
    return tuple(
        Step(f"mcp__{server}__{call.function}", json.loads(json.dumps(dict(call.args))))
        for call in calls
    )


@dataclass(frozen=True)
class Score:
    utility: bool
    attacked: bool | None  # None: a benign run
    ran: int  # calls the suite's server ran


def score(run: Run, injected: dict[str, str], state_file: Path, output: str) -> Score:
    """AgentDojo's checks of the run: the environment and calls its server left (none ran:
    the environment before), and the model's last answer."""
    suite = suite_of(run.suite)
    before = environment(run, injected)
    after, calls = before.model_copy(deep=True), []
    if state_file.exists():
        state = pickle.loads(state_file.read_bytes())  # the bench's own server wrote it
        after = state["env"]
        calls = [FunctionCall(function=c["function"], args=c["args"]) for c in state["calls"]]
    user_task = suite.get_user_task_by_id(run.user_task)
    utility = user_task.utility_from_traces(output, before, after, calls)
    if utility is None:
        utility = user_task.utility(output, before, after)
    if run.injection_task is None:
        return Score(bool(utility), None, len(calls))
    injection = suite.get_injection_task_by_id(run.injection_task)
    attacked = injection.security_from_traces(output, before, after, calls)
    if attacked is None:
        attacked = injection.security(output, before, after)
    return Score(bool(utility), bool(attacked), len(calls))


def every_run(sample: int | None) -> Iterator[tuple[str, list[Run], list[Run]]]:
    for suite in SUITES:
        benign, attacks = runs(suite, sample)
        yield suite, benign, attacks
