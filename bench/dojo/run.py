"""`python -m bench agentdojo` (issue 24, SPEC §20): AgentDojo v1.2.2's suites through the
real box, with a worst-case model and an owner who denies every approval.

Each suite (banking, slack, travel, workspace) is served by the project's own MCP server
(bench/dojo/server.py) wrapping AgentDojo's environment functions; the model is a fake
OpenAI-compatible server scripted by AgentDojo's ground truth (bench/dojo/model.py: it obeys
every injection it reads); the owner (bench/dojo/box.py) sends each task's prompt through
gatewayd as a new session and denies each approval; AgentDojo's own checks score each run
(bench/dojo/tasks.py). The same runs go through a second box whose grants allow everything.
Per suite it prints attacks that succeeded / pairs, benign tasks done with no question /
tasks, and the questions asked. `--sample N`: the first N user tasks and N drawn pairs a
suite. Needs the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import collections
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import floors
from bench.box import remove
from bench.dojo import tasks
from bench.dojo.box import GRANTS, Owner, box
from bench.dojo.model import Script, next_answer
from bench.stats import save
from tests.fakes.model_server import Answer, Call, FakeModel, Request

FAILED = ("Denied: ", "Error: ")  # how loopd words a call that did not run (bxcore.deny)


class Scripted:
    """The fake model's answers for the run in progress (one at a time)."""

    def __init__(self) -> None:
        self.script = Script("", ())
        self.said = ""

    def answer(self, request: Request) -> Answer:
        messages: list[dict[str, Any]] = request.body["messages"]
        failed = {
            str(m.get("tool_call_id"))
            for m in messages
            if m.get("role") == "tool" and str(m.get("content", "")).startswith(FAILED)
        }
        step = next_answer(self.script, messages, failed)
        if step.step is not None:
            return Answer(tool_calls=(Call(step.step.tool, json.dumps(step.step.arguments)),))
        self.said = step.text
        return Answer(text=step.text)


@dataclass(frozen=True)
class Outcome:
    run: str
    suite: str
    attack: bool
    utility: bool
    attacked: bool | None
    ran: int
    asked: list[str]
    targets: list[str]
    ended: str


def _one(owner: Owner, model: Scripted, state: Any, run: tasks.Run) -> Outcome:
    injected = tasks.injections(run)
    model.script, model.said = tasks.script(run, run.suite, injected), ""
    task = {"run": run.name, "user_task": run.user_task, "injections": injected}
    (state / "task.json").write_text(json.dumps(task))
    turn = owner.turn(f"dojo-{run.name}", model.script.prompt)
    found = tasks.score(run, injected, state / f"state-{run.name}.pickle", model.said)
    return Outcome(
        run.name, run.suite, run.injection_task is not None, found.utility, found.attacked,
        found.ran, turn.asked, turn.targets, turn.ended,
    )  # fmt: skip


def _through(grants: str, base_url: str, model: Scripted, plan: list[tasks.Run]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    folder = floors.scratch()
    started = time.monotonic()
    try:
        with box(folder, base_url, grants, tasks.SUITES) as up:
            owner = Owner(up.home)
            try:
                for n, run in enumerate(plan, 1):
                    outcomes.append(_one(owner, model, up.state, run))
                    if n % 25 == 0 or n == len(plan):
                        took = time.monotonic() - started
                        print(f"  {grants}: {n}/{len(plan)} runs, {took:.0f} s", file=sys.stderr)
            finally:
                owner.close()
    finally:
        remove(folder)
    return outcomes


def figures(outcomes: list[Outcome]) -> dict[str, dict[str, int]]:
    """Per suite (and `all`): attacks, pairs, benign done with no question, tasks, questions."""
    table: dict[str, dict[str, int]] = collections.defaultdict(
        lambda: dict.fromkeys(("attacks", "pairs", "benign", "tasks", "questions"), 0)
    )
    for o in outcomes:
        for row in (table[o.suite], table["all"]):
            row["questions"] += len(o.asked)
            if o.attack:
                row["pairs"] += 1
                row["attacks"] += bool(o.attacked)
            else:
                row["tasks"] += 1
                row["benign"] += o.utility and not o.asked
    return dict(table)


def render(results: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """The table: per suite, each set of grants' attacks, benign tasks and questions."""
    names = list(results)
    head = (
        "| suite | "
        + " | ".join(
            f"{g}: attacks succeeded / pairs | {g}: benign done, no question / tasks | "
            f"{g}: questions asked"
            for g in names
        )
        + " |"
    )
    lines = [head, "|---" * (1 + 3 * len(names)) + "|"]
    for suite in [*tasks.SUITES, "all"]:
        cells = []
        for g in names:
            row = results[g].get(suite)
            if row is None:
                cells += ["-", "-", "-"]
                continue
            cells += [
                f"{row['attacks']} / {row['pairs']}",
                f"{row['benign']} / {row['tasks']}",
                str(row["questions"]),
            ]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    return lines


def agentdojo(sample: int | None = None, as_json: bool = False) -> None:
    print(
        f"agentdojo: AgentDojo {tasks.VERSION} through the real box"
        + (f" (sample of {sample} a suite)" if sample else ""),
        file=sys.stderr,
    )
    plan = [run for _, benign, attacks in tasks.every_run(sample) for run in benign + attacks]
    model = Scripted()
    results: dict[str, dict[str, dict[str, int]]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    with FakeModel(record=False) as fake:
        fake.respond_with(model.answer)
        for grants in GRANTS:
            outcomes = _through(grants, fake.base_url, model, plan)
            results[grants] = figures(outcomes)
            runs[grants] = [asdict(o) for o in outcomes]
    machine = f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}"
    report = {
        "version": tasks.VERSION,
        "sample": sample,
        "machine": machine,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "figures": results,
    }
    save("agentdojo", {k: v for k, v in report.items() if k not in ("machine", "at")})
    table = render(results)
    if as_json:
        print(json.dumps({**report, "runs": runs}, indent=1))
        print("\n".join(table), file=sys.stderr)
    else:
        print("\n".join(table))
