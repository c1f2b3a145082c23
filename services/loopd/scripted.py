"""The `scripted` provider: answers played in order from a JSON file (SPEC §10.2), for demos.

The file is read once, when the model is made, and never again: edit it, then restart loopd.
A file that cannot be used does not stop loopd: every `complete` fails with the reason. The
system prompt and the tools are ignored; nothing is sent anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bxcore import strict_json
from services.loopd.model import (
    Message,
    ModelError,
    Offer,
    Reply,
    ToolResult,
    User,
)
from services.loopd.replies import tool_calls

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
_ANSWER_KEYS = frozenset({"text", "tool_calls", "match"})
_CALL_KEYS = frozenset({"name", "arguments", "id"})


@dataclass(frozen=True, slots=True)
class Answer:
    """One scripted answer. `match`, when set, is a substring the last message (the owner's or
    a tool result) must hold for this answer to be played; answers passed over are dropped."""

    text: str
    calls: tuple[tuple[str | None, str, str], ...] = ()  # (id or None, name, arguments)
    match: str | None = None


def parse_script(data: bytes, source: str) -> tuple[Answer, ...]:
    """The answers of a script file, or one ModelError line naming the file and the answer.

    The file: `[{"text": "...", "tool_calls": [{"name": "read_file", "arguments":
    "{\\"path\\":\\"/a\\"}", "id": "optional"}], "match": "optional"}, ...]`; `arguments` may
    also be written as a JSON object."""

    def bad(why: str) -> ModelError:
        return ModelError(f"the scripted model's file {source}: {why}; fix [model] script")

    try:
        document = strict_json.loads(data)
    except strict_json.StrictJsonError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(document, list):
        raise bad("expected a list of answers")
    return tuple(_answer(item, f"answer {n}", bad) for n, item in enumerate(document, 1))


def _answer(item: object, where: str, bad: Callable[[str], ModelError]) -> Answer:
    if not isinstance(item, dict):
        raise bad(f"{where}: expected an object")
    unknown = sorted(set(item) - _ANSWER_KEYS)
    if unknown:
        raise bad(f"{where}: unknown key {unknown[0]!r} (expected text, tool_calls, match)")
    text, match, calls = item.get("text", ""), item.get("match"), item.get("tool_calls", [])
    if not isinstance(text, str):
        raise bad(f"{where}: text: expected a string")
    if match is not None and not isinstance(match, str):
        raise bad(f"{where}: match: expected a string")
    if not isinstance(calls, list):
        raise bad(f"{where}: tool_calls: expected a list")
    made = []
    for k, call in enumerate(calls, 1):
        at = f"{where}: tool call {k}"
        if not isinstance(call, dict):
            raise bad(f"{at}: expected an object")
        unknown = sorted(set(call) - _CALL_KEYS)
        if unknown:
            raise bad(f"{at}: unknown key {unknown[0]!r} (expected name, arguments, id)")
        name, arguments, id_ = call.get("name"), call.get("arguments", "{}"), call.get("id")
        if not isinstance(name, str):
            raise bad(f"{at}: name: expected a string")
        if id_ is not None and not isinstance(id_, str):
            raise bad(f"{at}: id: expected a string")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        made.append((id_, name, arguments))
    return Answer(text, tuple(made), match)


def last_text(messages: Sequence[Message]) -> str:
    """What `match` looks in: the last message's text, if it is the owner's or a tool's."""
    if not messages:
        return ""
    last = messages[-1]
    if isinstance(last, User):
        return last.text
    if isinstance(last, ToolResult):
        return last.content
    return ""


class ScriptedModel:
    """Plays `answers` in order, one per `complete`; `problem` is why the file was unusable."""

    def __init__(self, source: str, answers: Sequence[Answer], problem: str | None = None):
        self.source = source
        self.answers = tuple(answers)
        self.problem = problem
        self.next = 0  # the first answer not yet played or passed over

    @classmethod
    def load(cls, path: str) -> ScriptedModel:
        try:
            with open(path, "rb") as stream:
                data = stream.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            why = exc.strerror or str(exc)
            problem = f"the scripted model's file {path} cannot be read ({why}); set [model] script"
            return cls(path, (), problem)
        if len(data) > MAX_SCRIPT_BYTES:
            problem = f"the scripted model's file {path} is larger than {MAX_SCRIPT_BYTES} bytes"
            return cls(path, (), problem)
        try:
            return cls(path, parse_script(data, path))
        except ModelError as exc:
            return cls(path, (), str(exc))

    def __repr__(self) -> str:
        if self.problem is not None:
            return f"<ScriptedModel {self.source} unusable>"
        return f"<ScriptedModel {self.source} at answer {self.next + 1} of {len(self.answers)}>"

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        *,
        max_tokens: int | None = None,
    ) -> Reply:
        if self.problem is not None:
            raise ModelError(self.problem)
        if self.next >= len(self.answers):
            raise ModelError(
                "the scripted model has no more answers (it plays its script once; "
                "`bxctl restart loopd` plays it again)"
            )
        said = last_text(messages)
        for n in range(self.next, len(self.answers)):
            answer = self.answers[n]
            if answer.match is None or answer.match in said:
                self.next = n + 1
                return Reply(answer.text, tool_calls(answer.calls, messages))
        raise ModelError(
            f"the scripted model has no answer left whose match is in the last message "
            f"(answers {self.next + 1} to {len(self.answers)} of {self.source})"
        )

    async def aclose(self) -> None:
        return None
