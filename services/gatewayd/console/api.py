"""The console's JSON API (SPEC §12.3; each route in docs/console.md): every route asks the
service that owns the answer, over the same sockets `bxctl` uses, and says in one line what
went wrong. Access (cookie and key, Host, Origin, JSON for a change) is checked before any route
runs (`services.gatewayd.console.guard`); here, the body and parameters are checked strictly.

Every message built from the page's input is checked by the wire codec itself (encoded and
decoded again) before it is sent, so the console accepts exactly what the wire accepts.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import psutil  # type: ignore[import-untyped, unused-ignore]  # no stubs installed
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bxcore import matrix_report, mcp_state, strict_json
from bxcore.client import AskFailed, Client, WrongAnswer
from bxcore.client import Request as Message
from bxcore.home.layout import Home
from bxcore.ids import parent_of_sub
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Asks,
    AuditRecords,
    AuditReport,
    AuditTail,
    AuditVerify,
    Cancel,
    Error,
    ErrorCode,
    Explain,
    GrantAdd,
    GrantList,
    GrantRemove,
    GrantsReload,
    History,
    HistoryQuery,
    Notes,
    NotesQuery,
    OwnerMessage,
    PendingList,
    PendingQuery,
    SessionList,
    SessionsQuery,
    State,
    StateQuery,
    SupervisorReport,
    SupervisorRestart,
    SupervisorStatus,
    Tokens,
    TokensQuery,
    VerdictRequest,
)
from bxcore.wire.schema import to_json_object
from services.gatewayd.gateway import Gateway
from services.gatewayd.heads import HeadKeeper

MAX_BODY = 1024 * 1024
LEDGER_TAIL = 200
LOG_LINES = 200
LOG_READ = 256 * 1024
SERVICES = ("brokerd", "memoryd", "loopd", "gatewayd")
STATUS = {
    ErrorCode.BAD_MESSAGE: 400,
    ErrorCode.INVALID: 400,
    ErrorCode.WRONG_SOCKET: 400,
    ErrorCode.UNKNOWN_APPROVAL: 404,
    ErrorCode.ALREADY_SETTLED: 409,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 502,
}
BY = "owner (console)"


class Refused(Exception):
    """The request is answered `status` with `{"error": message}`; nothing was changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def fail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def as_json(message: object) -> dict[str, Any]:
    return to_json_object(message)


M = TypeVar("M", bound=Message)
A = TypeVar("A")


def rid() -> str:
    """A fresh id for one request to another service."""
    return f"c-{secrets.token_hex(8)}"


def checked(message: M) -> M:
    """`message` as the wire would take it, or Refused 400 saying which field is wrong."""
    try:
        wire.decode(wire.encode(message))
    except wire.DecodeError as error:
        raise Refused(400, str(error)) from None
    return message


async def body(request: Request, allowed: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The request's JSON object, with only `allowed` keys, each of its types."""
    data = await request.body()
    if len(data) > MAX_BODY:
        raise Refused(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        parsed = strict_json.loads(data)
    except strict_json.StrictJsonError:
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(parsed, dict):
        raise Refused(400, "the body must be a JSON object")
    for key, value in parsed.items():
        if key not in allowed:
            raise Refused(400, f"unknown field {key!r}")
        if not isinstance(value, allowed[key]):  # a bool is no str, and 1 is no bool
            raise Refused(400, f"{key!r} has the wrong type")
    return parsed


def number(request: Request, name: str, default: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 16 or int(raw) > high:
        raise Refused(400, f"{name} must be a whole number from 0 to {high}")
    return int(raw)


@dataclass
class Backend:
    """What the routes ask: gatewayd's own state and its clients of the other services."""

    home: Home
    gateway: Gateway
    heads: HeadKeeper
    loop: Client
    admin: Client
    supervisor: Client

    async def ask(self, client: Client, message: Asks[A]) -> A:
        """The answer to `message`; an `error` answer, or none, refuses the route."""
        try:
            answer = await client.ask(checked(message))
        except AskFailed as error:  # no answer is 503; a wrong one, 502
            status = 502 if isinstance(error, WrongAnswer) else 503
            raise Refused(status, f"{client.name}: {error}") from None
        return self.answer(answer)

    @staticmethod
    def answer(answer: A | Error) -> A:
        if isinstance(answer, Error):
            raise Refused(STATUS.get(answer.code, 502), answer.message or answer.code.value)
        return answer

    # --- sessions -------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        found: SessionList = await self.ask(self.loop, SessionsQuery(rid()))
        rows = []
        for info in sorted(found.sessions, key=lambda s: s.updated, reverse=True)[:500]:
            try:
                state: State = await self.ask(self.admin, StateQuery(rid(), info.session))
                label: dict[str, Any] | None = as_json(state.label)
            except Refused:
                label = None
            row = as_json(info)
            row["label"] = label
            row["parent"] = parent_of_sub(info.session)
            rows.append(row)
        return JSONResponse({"sessions": rows})

    async def tokens(self, request: Request) -> Response:
        """The box's tokens today and `[loop] max_tokens_per_day` (§19), as loopd counts them."""
        found: Tokens = await self.ask(self.loop, TokensQuery(rid()))
        return JSONResponse(
            {"day": found.day, "tokens": found.tokens, "max_per_day": found.max_per_day}
        )

    async def history(self, request: Request) -> Response:
        session = request.path_params["session"]
        after = number(request, "after", 0, 2**53)
        page: History = await self.ask(self.loop, HistoryQuery(rid(), session, after))
        events = [as_json(event) for event in page.events]
        return JSONResponse({"session": session, "events": events, "more": page.more})

    async def message(self, request: Request) -> Response:
        session = request.path_params["session"]
        text = (await body(request, {"text": str})).get("text")
        if not isinstance(text, str) or not text.strip():
            raise Refused(400, "say something: the text is empty")
        answer = await self.gateway.owner_message(checked(OwnerMessage(rid(), session, text)))
        return JSONResponse(as_json(self.answer(answer)), 202)

    async def cancel(self, request: Request) -> Response:
        session = request.path_params["session"]
        await body(request, {})
        answer = await self.gateway.cancel(checked(Cancel(rid(), session)))
        return JSONResponse(as_json(self.answer(answer)))

    # --- approvals --------------------------------------------------------------------------

    async def pending(self, request: Request) -> Response:
        answer = await self.gateway.pending_query(PendingQuery(rid()))
        found: PendingList = self.answer(answer)
        return JSONResponse({"approvals": [as_json(a) for a in found.approvals]})

    async def verdict(self, request: Request) -> Response:
        given = await body(request, {"approve": bool, "scope": str})
        if not isinstance(given.get("approve"), bool):
            raise Refused(400, "approve must be true or false")
        scope = given.get("scope", "once")
        if scope not in ("once", "session"):
            raise Refused(400, 'scope must be "once" or "session"')
        message = VerdictRequest(rid(), request.path_params["approval"], given["approve"],
                                 scope, BY)  # fmt: skip
        answer = await self.gateway.verdict(checked(message))
        return JSONResponse(as_json(self.answer(answer)))

    # --- the ledger ---------------------------------------------------------------------------

    async def ledger(self, request: Request) -> Response:
        after = number(request, "after", 0, 2**53)
        session = request.query_params.get("session") or None
        kind = request.query_params.get("kind") or None
        found: AuditRecords = await self.ask(self.admin, AuditTail(rid(), LEDGER_TAIL, session))
        records = []
        for line in found.records:
            record = json.loads(line)
            if record.get("seq", 0) > after and (kind is None or record.get("kind") == kind):
                records.append(record)
        return JSONResponse({"records": records})

    async def verify(self, request: Request) -> Response:
        await body(request, {})
        report: AuditReport = await self.ask(self.admin, AuditVerify(rid()))
        seen = self.heads.newest
        witnessed = None if seen is None else {"seq": seen.seq, "hash": seen.hash}
        return JSONResponse({**as_json(report), "witnessed": witnessed})

    # --- grants -------------------------------------------------------------------------------

    async def grants(self, request: Request) -> Response:
        found: GrantList = await self.ask(self.admin, GrantsReload(rid()))
        return JSONResponse({"grants": [as_json(g) for g in found.grants]})

    async def add_grant(self, request: Request) -> Response:
        text = (str, type(None))
        flag = (bool, type(None))
        given = await body(
            request,
            {"id": str, "tool": str, "mode": str, "path": text, "host": text, "class": str,
             "untrusted": flag, "note": text, "write": flag, "kind": text,
             "match": (list, type(None))},
        )  # fmt: skip
        if not given.get("id") or not given.get("tool"):
            raise Refused(400, "a grant needs an id and a tool")
        match = given.get("match") or []
        if not all(isinstance(item, str) for item in match):
            raise Refused(400, "'match' must be a list of NAME=VALUE strings")
        message = GrantAdd(
            rid(),
            given["id"],
            given["tool"],
            given.get("mode") or "allow",
            given.get("class") or "private",
            given.get("path") or None,
            given.get("host") or None,
            given.get("untrusted"),
            given.get("note") or None,
            given.get("write"),
            given.get("kind") or None,
            tuple(match) or None,
        )
        found: GrantList = await self.ask(self.admin, message)
        return JSONResponse({"grants": [as_json(g) for g in found.grants]}, 201)

    async def remove_grant(self, request: Request) -> Response:
        message = GrantRemove(rid(), request.path_params["grant"])
        found: GrantList = await self.ask(self.admin, message)
        return JSONResponse({"grants": [as_json(g) for g in found.grants]})

    async def explain(self, request: Request) -> Response:
        given = await body(request, {"session": str, "tool": str, "arguments": (str, dict)})
        arguments = given.get("arguments", "{}")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not given.get("session") or not given.get("tool"):
            raise Refused(400, "explain needs a session and a tool")
        message = Explain(rid(), given["session"], given["tool"], arguments)
        return JSONResponse(as_json(await self.ask(self.admin, message)))

    # --- memory and services ----------------------------------------------------------------

    async def memory(self, request: Request) -> Response:
        query = request.query_params.get("q") or None
        found: Notes = await self.ask(self.admin, NotesQuery(rid(), query))
        return JSONResponse(as_json(found))

    async def services(self, request: Request) -> Response:
        report: SupervisorReport = await self.ask(self.supervisor, SupervisorStatus(rid()))
        rows = []
        for info in report.services:
            row = as_json(info)
            row.update(usage(info.pid))
            rows.append(row)
        mcp = await anyio.to_thread.run_sync(mcp_servers, self.home)
        matrix = matrix_report.read_line(self.home)  # the phone channel (§21.1), if any
        return JSONResponse(
            {
                "sandbox": report.sandbox,
                "services": rows,
                "mcp": mcp,
                "matrix": None if matrix is None else {"line": matrix[0], "style": matrix[1]},
            }
        )

    async def restart(self, request: Request) -> Response:
        name = service_name(request)
        await body(request, {})
        message = SupervisorRestart(rid(), name)
        report = await self.ask(self.supervisor, message)
        return JSONResponse({"restarted": name, "services": [as_json(s) for s in report.services]})

    async def logs(self, request: Request) -> Response:
        name = service_name(request)
        n = number(request, "n", 50, LOG_LINES)
        return JSONResponse({"service": name, "lines": tail(self.home.logs / f"{name}.log", n)})


def mcp_servers(home: Home) -> list[dict[str, Any]]:
    """The MCP servers as `bxctl mcp list` shows them (§18.3): read from the same files."""
    return mcp_state.server_rows(home, mcp_state.configured(home))


def service_name(request: Request) -> str:
    name: str = request.path_params["name"]
    if name not in SERVICES:
        raise Refused(404, f"no service {name[:40]!r}: the services are {', '.join(SERVICES)}")
    return name


def usage(pid: int | None) -> dict[str, Any]:
    """A process's resident memory (bytes) and CPU time (seconds), as `bxctl status` shows."""
    if pid is None:
        return {"rss": None, "cpu_s": None}
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            return {"rss": process.memory_info().rss, "cpu_s": round(times.user + times.system, 2)}
    except psutil.Error:
        return {"rss": None, "cpu_s": None}


def tail(path: Any, n: int) -> list[str]:
    """The last `n` lines of a log, read from at most its last 256 KiB."""
    try:
        with open(path, "rb") as file:
            file.seek(0, 2)
            size = file.tell()
            file.seek(max(0, size - LOG_READ))
            data = file.read(LOG_READ)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > LOG_READ and lines:
        lines = lines[1:]  # the first may be cut
    return lines[-n:] if n else []
