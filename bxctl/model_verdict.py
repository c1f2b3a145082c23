"""What `bxctl model check` concludes (issue 14): from what the server did, each check's
result, whether the box can use the model, and what to change. Pure: no I/O, no clock.

`bxctl.model_probe` does the talking and hands in `Reach`, `Listing` and `Probe` values;
`bxctl.model_cmds` prints the `Report` made here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bxcore import strict_json

#: The one tool offered by the tiny request, and what the model is asked.
PROBE_TOOL = "get_weather"
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city's name."}},
    "required": ["city"],
}
PROBE_SYSTEM = "You are a test of tool calling. Answer only by calling a tool."
PROBE_ASK = f"What is the weather in Paris? Call the {PROBE_TOOL} tool."
SHOWN_MODELS = 8  # names of offered models in a line; --json gives them all

# How servers write a tool call into the text when their tool-call parsing is off: Hermes and
# Qwen's <tool_call>, Llama 3's <|python_tag|>, Mistral's [TOOL_CALLS], and bare JSON naming
# the function.
_CALL_AS_TEXT = re.compile(
    r"<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\]|<function[=>]|\"(name|function)\"\s*:\s*\""
)


class Failure(enum.StrEnum):
    """Why the server could not be reached or used at all."""

    REFUSED = "refused"  # nothing listens there
    DNS = "dns"  # the host name does not resolve
    TLS = "tls"  # the TLS handshake failed (certificate, protocol)
    TIMEOUT = "timeout"
    KEY = "key"  # 401 or 403
    HTTP = "http"  # another status
    OTHER = "other"


class Outcome(enum.StrEnum):
    """What one tiny request with one tool gave."""

    TOOL_CALL = "tool_call"  # a proper tool call: the tool's name, a JSON object of arguments
    BAD_CALL = "bad_call"  # a tool call, but another name or arguments that are not an object
    CALL_AS_TEXT = "call_as_text"  # the call written into the text: parsing is off
    WORDS = "words"  # an answer in words, no call
    NO_TOOLS = "no_tools"  # the server refused a request with tools
    NEEDS_FLAG = "needs_flag"  # the server takes tools only when started with a flag
    NO_MODEL = "no_model"  # the server has no such model
    FAILED = "failed"  # any other error


@dataclass(frozen=True, slots=True)
class Setup:
    """The `[model]` keys the check reads, and whether the key's variable is set."""

    provider: str
    base_url: str
    model: str
    api_key_env: str
    stream: bool
    key_set: bool


@dataclass(frozen=True, slots=True)
class Reach:
    """The first request (the list of models): answered, or why not."""

    seconds: float
    failure: Failure | None = None
    detail: str = ""  # the reason in a few words, or the server's message
    status: int = 0


@dataclass(frozen=True, slots=True)
class Listing:
    """The models the server offers; `None` when it does not list them."""

    models: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class Probe:
    """One tiny request, whole or streamed."""

    streamed: bool
    outcome: Outcome
    seconds: float
    detail: str = ""  # the error, or what came back instead of a call


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None  # None: not a failure, only worth knowing
    detail: str
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Report:
    setup: Setup
    checks: tuple[Check, ...]
    usable: bool
    advice: tuple[str, ...]
    models: tuple[str, ...] | None = field(default=None)

    def as_json(self) -> dict[str, Any]:
        return {
            "usable": self.usable,
            "provider": self.setup.provider,
            "base_url": self.setup.base_url,
            "model": self.setup.model,
            "api_key_env": self.setup.api_key_env,
            "stream": self.setup.stream,
            "checks": [
                {"name": c.name, "ok": c.ok, "detail": c.detail, "seconds": c.seconds}
                for c in self.checks
            ],
            "models": None if self.models is None else list(self.models),
            "advice": list(self.advice),
        }


# -- reading what came back ---------------------------------------------------------------------


def judge_reply(text: str, calls: Sequence[tuple[str, str]]) -> tuple[Outcome, str]:
    """The outcome of an answer with `text` and tool `calls` (name, arguments)."""
    if calls:
        name, arguments = calls[0]
        if name != PROBE_TOOL:
            return Outcome.BAD_CALL, f"it called {name!r}, not {PROBE_TOOL!r}"
        try:
            value = strict_json.loads(arguments)
        except strict_json.StrictJsonError:
            value = None
        if not isinstance(value, dict):
            return Outcome.BAD_CALL, f"its arguments are not a JSON object: {_cut(arguments)}"
        return Outcome.TOOL_CALL, f"{name}({_cut(arguments)})"
    if _CALL_AS_TEXT.search(text) or (PROBE_TOOL in text and "{" in text):
        return Outcome.CALL_AS_TEXT, _cut(text)
    return Outcome.WORDS, _cut(text) or "(an empty answer)"


def judge_error(message: str) -> Outcome:
    """The outcome of a request the client failed with `message` (loopd's one line)."""
    lowered = message.lower()
    if "--jinja" in lowered or "--enable-auto-tool-choice" in lowered:
        return Outcome.NEEDS_FLAG  # llama.cpp's 500, vLLM's 400
    if "tool" in lowered and re.search(r"not support|unsupported|does not take", lowered):
        return Outcome.NO_TOOLS
    if "no such model" in lowered or re.search(r"model\S* .*not (found|exist)", lowered):
        return Outcome.NO_MODEL
    return Outcome.FAILED


# -- the report ---------------------------------------------------------------------------------


def report(setup: Setup, reach: Reach, listing: Listing | None, probes: Sequence[Probe]) -> Report:
    """Every check's line, whether the box can use the model as configured, what to change."""
    checks = [_reach_check(setup, reach)]
    advice: list[str] = []
    if reach.failure is not None:
        advice.append(_reach_advice(setup, reach))
    elif not setup.key_set and setup.api_key_env:
        checks.append(Check("key", False, f"${setup.api_key_env} is not set"))
        advice.append(_key_missing(setup))
    if listing is not None:
        checks.append(_listing_check(setup, listing))
    for probe in probes:
        configured = probe.streamed == setup.stream
        checks.append(_probe_check(probe, configured))
    configured_probe = next((p for p in probes if p.streamed == setup.stream), None)
    other = next((p for p in probes if p.streamed != setup.stream), None)
    usable = configured_probe is not None and configured_probe.outcome is Outcome.TOOL_CALL
    if configured_probe is not None and not usable:
        if other is not None and other.outcome is Outcome.TOOL_CALL:
            advice.append(
                f"set [model] stream = {'true' if other.streamed else 'false'}: tool calls come "
                f"back {'streamed' if other.streamed else 'whole'}, not "
                f"{'streamed' if setup.stream else 'whole'}"
            )
        advice += _probe_advice(setup, configured_probe, listing)
    known = listing.models if listing is not None else None
    if not usable and known and not offered(known, setup.model):
        advice.append(f"set [model] model to one the server offers: {_names(known)}")
    return Report(setup, tuple(checks), usable, tuple(dict.fromkeys(advice)),
                  None if listing is None else listing.models)  # fmt: skip


def _reach_check(setup: Setup, reach: Reach) -> Check:
    if reach.failure is None:
        return Check("reach", True, f"{setup.base_url} answered", reach.seconds)
    return Check("reach", False, reach_line(setup, reach), reach.seconds)


def reach_line(setup: Setup, reach: Reach) -> str:
    """One clear line for a server that could not be used at all."""
    where = setup.base_url
    failure = reach.failure
    if failure is Failure.REFUSED:
        return f"nothing answers at {where}: the connection was refused ({reach.detail})"
    if failure is Failure.DNS:
        return f"the host of {where} cannot be found: {reach.detail}"
    if failure is Failure.TLS:
        return f"TLS with {where} failed: {reach.detail}"
    if failure is Failure.TIMEOUT:
        return f"{where} did not answer within {reach.detail}"
    if failure is Failure.KEY:
        if setup.api_key_env:
            sent = "was sent" if setup.key_set else "is not set, so none was sent"
            return (
                f"{where} refused the key ({reach.status}): the key read from "
                f"${setup.api_key_env} {sent}: {reach.detail}"
            )
        return (
            f"{where} wants a key ({reach.status}), and none is sent: "
            f"[model] api_key_env is empty: {reach.detail}"
        )
    if failure is Failure.HTTP:
        return f"{where} answered {reach.status}: {reach.detail}"
    return f"{where} cannot be reached: {reach.detail}"


def _reach_advice(setup: Setup, reach: Reach) -> str:
    failure = reach.failure
    if failure is Failure.REFUSED:
        return "start the model server, or set [model] base_url to where it listens"
    if failure is Failure.DNS:
        return "check the host name in [model] base_url"
    if failure is Failure.TLS:
        return (
            "check the scheme in [model] base_url (http:// for a local server) and the "
            "server's certificate"
        )
    if failure is Failure.TIMEOUT:
        return "check that the server is up and not busy; raise [model] timeout_s if it is slow"
    if failure is Failure.KEY:
        if setup.api_key_env:
            return f"put a valid key in ${setup.api_key_env}, in the environment `bxctl up` runs in"
        return (
            "set [model] api_key_env to the variable that holds the key (the key itself never "
            "goes in config.toml)"
        )
    return "check [model] base_url and provider in config.toml"


def _key_missing(setup: Setup) -> str:
    return (
        f"set ${setup.api_key_env} (named by [model] api_key_env) in the environment `bxctl up` "
        'runs in, or set api_key_env = "" if the server needs no key'
    )


def _listing_check(setup: Setup, listing: Listing) -> Check:
    models = listing.models
    if models is None:
        return Check("models", None, "the server does not list its models")
    if not models:
        return Check("models", False, "the server offers no model")
    if offered(models, setup.model):
        return Check("models", True, f"{len(models)} offered; {setup.model!r} is among them")
    names = _names(models)
    return Check("models", None, f"{len(models)} offered; {setup.model!r} is not: {names}")


def offered(models: Sequence[str], name: str) -> bool:
    """Whether `name` is among `models`; Gemini lists its models as `models/<name>`."""
    return name in models or f"models/{name}" in models


def _probe_check(probe: Probe, configured: bool) -> Check:
    mode = "streamed" if probe.streamed else "whole"
    name = f"{mode} (configured)" if configured else mode
    words = {
        Outcome.TOOL_CALL: "a proper tool call",
        Outcome.BAD_CALL: "a tool call, but not a proper one",
        Outcome.CALL_AS_TEXT: "the tool call came back as text, not as a tool call",
        Outcome.WORDS: "an answer in words, no tool call",
        Outcome.NO_TOOLS: "the server refused a request with tools",
        Outcome.NEEDS_FLAG: "the server takes tools only when started with a flag",
        Outcome.NO_MODEL: "the server has no such model",
        Outcome.FAILED: "the request failed",
    }[probe.outcome]
    detail = f"{words}: {probe.detail}" if probe.detail else words
    ok = probe.outcome is Outcome.TOOL_CALL
    return Check(name, ok if configured else (True if ok else None), detail, probe.seconds)


def _probe_advice(setup: Setup, probe: Probe, listing: Listing | None) -> list[str]:
    outcome = probe.outcome
    if outcome is Outcome.CALL_AS_TEXT:
        return [
            "the server does not parse the model's tool calls: start llama.cpp's llama-server "
            "with --jinja; vLLM with --enable-auto-tool-choice --tool-call-parser NAME; on "
            "Ollama or LM Studio pick a model whose template supports tools"
        ]
    if outcome is Outcome.NEEDS_FLAG:
        return [
            "restart the server with the flag it names: llama.cpp's llama-server with --jinja; "
            "vLLM with --enable-auto-tool-choice --tool-call-parser NAME"
        ]
    if outcome is Outcome.NO_TOOLS:
        return ["set [model] model to a model that supports tool calls (docs/models.md)"]
    if outcome is Outcome.NO_MODEL:
        listed = listing is not None and bool(listing.models)
        return [] if listed else ["set [model] model to a model the server has"]
    if outcome in (Outcome.WORDS, Outcome.BAD_CALL):
        return [
            f"the model {setup.model!r} does not call tools reliably: use one trained for tool "
            "calls (docs/models.md)"
        ]
    return ["read the error above; docs/models.md lists what each server needs"]


def _names(models: Sequence[str]) -> str:
    shown = ", ".join(models[:SHOWN_MODELS])
    more = len(models) - SHOWN_MODELS
    return f"{shown} and {more} more" if more > 0 else shown


def _cut(text: str, limit: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"
