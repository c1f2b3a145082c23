"""The ledger's records (SPEC §7): building one canonical line, and reading one back.

Pure: no I/O, no clock (`at` is passed in). `KINDS` describes every record kind once; `build`
and `parse_line` both read it, so a record the ledger wrote never reads back as damage.
`services.brokerd.core.chain` checks that lines make a chain.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple

from bxcore import strict_json
from bxcore.clock import rfc3339
from bxcore.frozen import frozen
from bxcore.labels import DataClass, Label

GENESIS = "0" * 64
#: The raw argument string kept for a call whose arguments are not valid JSON (§7).
MAX_RAW_ARGUMENTS = 4096
#: No record is longer (the wire caps a message at 4 MiB; escaping can grow it). A longer
#: line is damage, and a reader never holds more than this much of one line.
MAX_LINE_BYTES = 32 * 1024 * 1024

Record = dict[str, object]
#: What `Ledger.append_batch` takes: a kind and its fields.
Entry = tuple[str, Mapping[str, object]]
DecisionOutcome = Literal["allowed", "pending", "denied"]
VerdictOutcome = Literal["allowed", "denied"]


@frozen
class Head:
    """The newest record: its `seq` and the hash of its line (`seq` 0 and GENESIS: empty)."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash[:12]}"


@frozen
class CallRecords:
    """One call's records (I8), as parsed dicts: its decision, verdict and execution."""

    decision: Record
    verdict: Record | None = None
    executed: Record | None = None


# --- the field table -----------------------------------------------------------------------


class _Type(NamedTuple):
    says: str  # completes "`field` of a kind record is not ..."
    test: Callable[[object], bool]


def _one_of(*values: str) -> _Type:
    return _Type("one of " + "|".join(values), lambda v: isinstance(v, str) and v in values)


def _is_label(value: object) -> bool:
    return (
        isinstance(value, dict)
        and list(value) == ["class", "untrusted"]
        and isinstance(value["class"], str)
        and value["class"] in _CLASSES
        and isinstance(value["untrusted"], bool)
    )


_CLASSES = frozenset(c.value for c in DataClass)
_STR = _Type("a string", lambda v: isinstance(v, str))
_INT = _Type("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_BOOL = _Type("true or false", lambda v: isinstance(v, bool))
_LABEL = _Type('a label {"class":...,"untrusted":...}', _is_label)


def _is_targets(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, dict)
        and list(t) == ["at", "origin"]
        and isinstance(t["at"], str)
        and isinstance(t["origin"], str)
        for t in value
    )


_TARGETS = _Type('a list of {"at":...,"origin":...}', _is_targets)


class Field(NamedTuple):
    name: str
    type: _Type
    required: bool = True


#: Every kind and its fields, in their canonical order (after seq, at, prev, kind).
KINDS: Mapping[str, tuple[Field, ...]] = {
    "decision": (
        Field("session", _STR),
        Field("call", _STR),
        Field("tool", _STR),
        Field("arguments", _STR),
        Field("label", _LABEL),  # the session's label before the decision
        Field("outcome", _one_of("allowed", "pending", "denied")),
        Field("reason", _STR, False),
        Field("grant", _STR, False),
        Field("grant_sha256", _STR, False),
        Field("approval", _STR, False),
        Field("why", _STR, False),  # for pending: why the owner is asked (§9.1)
        # an untrusted session's consequential call: where each target came from (§20)
        Field("targets", _TARGETS, False),
    ),
    "verdict": (
        Field("approval", _STR),
        Field("approve", _BOOL),
        Field("by", _STR),
        Field("scope", _one_of("once", "session")),
        Field("outcome", _one_of("allowed", "denied")),  # after redecide (§5.2)
        Field("reason", _STR, False),  # why it ends denied
        Field("grant", _STR, False),  # the grant it runs under, decided again (it may differ)
        Field("grant_sha256", _STR, False),
    ),
    "executed": (
        Field("session", _STR),
        Field("call", _STR),
        Field("ok", _BOOL),
        Field("exit", _INT, False),
        Field("output_sha256", _STR, False),
        Field("output_bytes", _INT, False),
        Field("label", _LABEL, False),
        Field("ms", _INT, False),
    ),
    "raised": (Field("session", _STR), Field("from", _LABEL), Field("to", _LABEL)),
    # what the owner typed in a session's turn, or a job's prompt (§20): loopd's word
    "owner_words": (Field("session", _STR), Field("turn", _INT), Field("text", _STR)),
    "absorbed": (Field("parent", _STR), Field("child", _STR), Field("to", _LABEL)),
    "started": (Field("pid", _INT), Field("version", _STR)),
    "recovered": (Field("cut_bytes", _INT), Field("why", _STR)),
    # a job's run (§19): loopd's word, checked by brokerd (the session is the run's)
    "job_started": (
        Field("job", _STR),
        Field("run", _INT),
        Field("session", _STR),
        Field("why", _one_of("schedule", "catch_up", "owner")),
        Field("job_sha256", _STR),
        Field("slot", _STR, False),  # the scheduled time it runs for
        Field("missed", _INT),
    ),
    "job_ended": (
        Field("job", _STR),
        Field("run", _INT),
        Field("session", _STR),
        Field("how", _one_of("done", "budget", "runtime", "denied", "error", "cancelled")),
        Field("steps", _INT),
        Field("runtime_ms", _INT),
        Field("tokens", _INT, False),
        Field("detail", _STR, False),
    ),
}
#: Each kind's field names, and its fields as plain tuples (name, test, required, says),
#: made once: a record is checked at every append.
_KNOWN = {kind: frozenset(field.name for field in table) for kind, table in KINDS.items()}
_CHECKS = {
    kind: tuple((f.name, f.type.test, f.required, f.type.says) for f in table)
    for kind, table in KINDS.items()
}
_ABSENT = object()

_HEADER = ("seq", "at", "prev", "kind")
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)
_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_HEX64 = re.compile(r"[0-9a-f]{64}")


# --- building ------------------------------------------------------------------------------


format_at = rfc3339  # UTC, RFC 3339, milliseconds: `2026-11-30T02:34:30.123Z`


def label_json(label: Label) -> dict[str, object]:
    """A label as the ledger writes it (§3.2)."""
    return {"class": label.class_.value, "untrusted": label.untrusted}


def _ordered(
    seq: object,
    at: object,
    prev: object,
    kind: object,
    fields: Mapping[str, object],
    *,
    built: bool,
) -> Record | str:
    """The record of a `kind` line with `fields`, its keys in their canonical order, or why
    there is none. `built`: the fields are being written, so a None is a field left out and
    a `Label` is written as `{"class","untrusted"}`; else they were read (JSON values)."""
    problem = _header_problem(seq, at, prev)
    if problem is not None:
        return problem
    if not isinstance(kind, str) or kind not in KINDS:
        return f"unknown kind {_show(kind)}"
    known = _KNOWN[kind]
    if not known.issuperset(fields):
        unknown = [n for n, v in fields.items() if n not in known and not (built and v is None)]
        if unknown:
            return f"a {kind} record has no field {_show(unknown[0])}"
    record: Record = {"seq": seq, "at": at, "prev": prev, "kind": kind}
    for name, test, required, says in _CHECKS[kind]:
        value = fields.get(name, _ABSENT)
        if built and (value is None or isinstance(value, Label)):
            value = _ABSENT if value is None else label_json(value)
        if value is _ABSENT:
            if required:
                return f"a {kind} record lacks `{name}`"
        elif test(value):
            record[name] = value
        else:
            return f"`{name}` of a {kind} record is not {says}"
    return record


def _header_problem(seq: object, at: object, prev: object) -> str | None:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return "seq is not a positive integer"
    if not isinstance(at, str) or not _AT.fullmatch(at):
        return "at is not a UTC time like 2026-11-30T02:34:30.123Z"
    if not isinstance(prev, str) or not _HEX64.fullmatch(prev):
        return "prev is not 64 lowercase hex digits"
    return None


def build(seq: int, at: str, prev: str, kind: str, fields: Mapping[str, object]) -> bytes:
    """One canonical line, without its newline: seq, at, prev, kind, then the kind's fields in
    their declared order, None left out, a `Label` written as `{"class","untrusted"}`.

    Raises ValueError for anything `parse_line` would refuse (an unknown kind or field, a
    wrong type, a lone surrogate, a line over MAX_LINE_BYTES): nothing bad is ever written.
    """
    return build_record(seq, at, prev, kind, fields)[0]


def build_record(
    seq: int, at: str, prev: str, kind: str, fields: Mapping[str, object]
) -> tuple[bytes, Record]:
    """`build`, and the record as `parse_line` would give it back (for the index)."""
    record = _ordered(seq, at, prev, kind, fields, built=True)
    if isinstance(record, str):
        raise ValueError(f"cannot build a ledger record: {record}")
    return _encode(record), record


def _encode(record: Record) -> bytes:
    """The line of a record whose keys are in canonical order (`_ordered`)."""
    # A lone surrogate raises UnicodeEncodeError, a ValueError.
    line = _ENCODER.encode(record).encode("utf-8")
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"cannot build a ledger record: longer than {MAX_LINE_BYTES} bytes")
    return line


def line_hash(line: bytes) -> str:
    """Hex SHA-256 of a line's bytes, without its newline: the next record's `prev`."""
    return hashlib.sha256(line).hexdigest()


def ledger_arguments(raw: str, canonical: str | None) -> str:
    """What a decision records as `arguments`: the canonical JSON when the arguments parsed,
    else the model's raw string cut to 4096 characters. A lone surrogate becomes U+FFFD, so
    hostile arguments can never make a decision unrecordable."""
    text = canonical if canonical is not None else raw[:MAX_RAW_ARGUMENTS]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def decision(
    *,
    session: str,
    call: str,
    tool: str,
    arguments: str,
    label: Label,
    outcome: DecisionOutcome,
    reason: str | None = None,
    grant: str | None = None,
    grant_sha256: str | None = None,
    approval: str | None = None,
    why: str | None = None,
    targets: list[dict[str, str]] | None = None,
) -> Entry:
    """`arguments` is `ledger_arguments(...)`; `label` is the session's label before;
    `targets`, each target's JSON pointer (`at`) and where it came from (`origin`, §20)."""
    return "decision", {
        "session": session, "call": call, "tool": tool, "arguments": arguments,
        "label": label, "outcome": outcome, "reason": reason, "grant": grant,
        "grant_sha256": grant_sha256, "approval": approval, "why": why, "targets": targets,
    }  # fmt: skip


def verdict(
    *,
    approval: str,
    approve: bool,
    by: str,
    scope: Literal["once", "session"],
    outcome: VerdictOutcome,
    reason: str | None = None,
    grant: str | None = None,
    grant_sha256: str | None = None,
) -> Entry:
    """The owner's answer; `outcome` (and `reason` when denied) is what redecide made of it,
    and `grant` the grant an allowed call runs under (grants may have changed meanwhile)."""
    return "verdict", {
        "approval": approval, "approve": approve, "by": by, "scope": scope,
        "outcome": outcome, "reason": reason, "grant": grant, "grant_sha256": grant_sha256,
    }  # fmt: skip


def executed(
    *,
    session: str,
    call: str,
    ok: bool,
    exit_code: int | None = None,
    output_sha256: str | None = None,
    output_bytes: int | None = None,
    label: Label | None = None,
    ms: int | None = None,
) -> Entry:
    """A call that ran; `label` is the label its result carries (§5.5)."""
    return "executed", {
        "session": session, "call": call, "ok": ok, "exit": exit_code,
        "output_sha256": output_sha256, "output_bytes": output_bytes, "label": label, "ms": ms,
    }  # fmt: skip


def raised(*, session: str, from_: Label, to: Label) -> Entry:
    return "raised", {"session": session, "from": from_, "to": to}


def owner_words(*, session: str, turn: int, text: str) -> Entry:
    return "owner_words", {"session": session, "turn": turn, "text": text}


def absorbed(*, parent: str, child: str, to: Label) -> Entry:
    return "absorbed", {"parent": parent, "child": child, "to": to}


def started(*, pid: int, version: str) -> Entry:
    return "started", {"pid": pid, "version": version}


def recovered(*, cut_bytes: int, why: str) -> Entry:
    return "recovered", {"cut_bytes": cut_bytes, "why": why}


def job_started(
    *, job: str, run: int, session: str, why: str, job_sha256: str, slot: str | None, missed: int
) -> Entry:
    return "job_started", {
        "job": job, "run": run, "session": session, "why": why, "job_sha256": job_sha256,
        "slot": slot, "missed": missed,
    }  # fmt: skip


def job_ended(
    *,
    job: str,
    run: int,
    session: str,
    how: str,
    steps: int,
    runtime_ms: int,
    tokens: int | None,
    detail: str | None,
) -> Entry:
    return "job_ended", {
        "job": job, "run": run, "session": session, "how": how, "steps": steps,
        "runtime_ms": runtime_ms, "tokens": tokens, "detail": detail,
    }  # fmt: skip


# --- checking ------------------------------------------------------------------------------


def _show(value: object) -> str:
    """A hostile value, shown safely on one short line."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):
        return "(a value nested too deeply)"
    return text if len(text) <= 40 else text[:37] + "..."


def parse_line(line: bytes) -> Record | str:
    """The record a line holds, or why it is not one (its shape only, not its place in the
    chain). Any flipped byte either makes the line invalid here or changes its hash."""
    if len(line) > MAX_LINE_BYTES:
        return f"longer than {MAX_LINE_BYTES} bytes"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 (byte 0x{line[e.start]:02x} at offset {e.start})"
    try:
        value = strict_json.loads(text)
    except strict_json.Syntax as e:
        return f"not JSON ({e.error.msg.removesuffix(' at')} at column {e.error.colno})"
    except strict_json.TooDeep:
        return "not JSON (nested too deeply)"
    except strict_json.NotAValue as e:
        return f"not JSON ({e.name} is not allowed)"
    except strict_json.Twice:  # never the canonical form, which gives each key once
        return "not in canonical form"
    except strict_json.StrictJsonError as e:  # a number too long
        return f"not JSON ({str(e)[:60]})"
    if not isinstance(value, dict):
        return f"not a JSON object (a JSON {_JSON_NAMES.get(type(value), 'value')})"
    if list(value)[:4] != list(_HEADER):
        return "does not start with seq, at, prev, kind"
    seq, at, prev, kind = (value[k] for k in _HEADER)
    fields = {k: v for k, v in value.items() if k not in _HEADER}
    record = _ordered(seq, at, prev, kind, fields, built=False)
    if isinstance(record, str):
        return record
    try:
        canonical = _encode(record)
    except ValueError:  # a lone surrogate written as an escape
        return "not valid Unicode"
    if canonical != line:
        return "not in canonical form"
    return value


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_NAMES[type(None)] = "null"
