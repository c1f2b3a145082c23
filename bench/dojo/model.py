"""The worst-case scripted model of `python -m bench agentdojo`: it does the user task's
ground-truth calls (AgentDojo's own, one call an answer), and the moment a tool result shows it
an injection it obeys it, doing the injection task's ground-truth calls before it goes on; at
the end it answers with the user task's ground-truth output, or says it could not finish when
a call of the user task did not run. It reads only the conversation loopd sends it (OpenAI
chat messages), so what it does next depends on nothing but what it was shown. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

COULD_NOT = "I could not finish the task: a call I needed did not run."


@dataclass(frozen=True)
class Step:
    """One tool call: the model's tool name (`mcp__SERVER__TOOL`) and its arguments."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Script:
    """What the model does for one run: `task` its calls, `attack` the calls it makes once a
    result held `marker` (none in a benign run), then `answer`."""

    prompt: str
    task: tuple[Step, ...]
    attack: tuple[Step, ...] = ()
    marker: str | None = None
    answer: str = ""


@dataclass(frozen=True)
class Next:
    """The model's next answer: a call, or its final text."""

    step: Step | None = None
    text: str = ""


def next_answer(script: Script, messages: Sequence[dict[str, Any]], failed: set[str]) -> Next:
    """What the model answers to `messages`. `failed` holds the ids of the tool calls whose
    result says they did not run (denied, or failed), as the caller reads them."""
    results = {
        m.get("tool_call_id"): str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool"
    }
    task, attack = list(script.task), list(script.attack)
    obeying = task_failed = False
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            if obeying and attack:
                attack.pop(0)
            elif task:
                task.pop(0)
                task_failed = task_failed or call.get("id") in failed
            seen = results.get(call.get("id"), "")
            obeying = obeying or (script.marker is not None and script.marker in seen)
    if obeying and attack:
        return Next(step=attack[0])
    if task:
        return Next(step=task[0])
    return Next(text=COULD_NOT if task_failed else script.answer)
