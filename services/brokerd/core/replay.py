"""A call decided before (I8): answered from its records in the ledger, never decided or run
again, also after a restart. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from bxcore.deny import DenyReason
from bxcore.mcp_tools import NO_TOOLS, Catalog, split_name
from bxcore.wire.messages import Denied, Failed, Outcome, Pending
from services.brokerd.core import args as argsmod
from services.brokerd.core import mcp_args
from services.brokerd.core.records import CallRecords

ALREADY_RAN = "this call already ran; its output is no longer held"
UNKNOWN = "the outcome of this call is unknown after a restart"


def replay(found: CallRecords, mcp: Catalog = NO_TOOLS) -> Outcome:
    """The recorded answer of a call decided earlier whose answer is no longer kept. The
    detail of invalid arguments is not recorded (§7): it is found again from the arguments,
    for an MCP tool against its pinned schema in `mcp` (none when it is no longer pinned)."""
    decision = found.decision
    if decision["outcome"] == "denied":
        reason = DenyReason(str(decision["reason"]))
        detail = _detail(decision, mcp) if reason is DenyReason.INVALID_ARGUMENTS else None
        return Denied(reason, detail)
    verdict = found.verdict
    if decision["outcome"] == "pending":
        if verdict is None:
            return Pending(str(decision["approval"]))
        if verdict["outcome"] == "denied":
            return Denied(DenyReason(str(verdict["reason"])))
    return Failed(ALREADY_RAN if found.executed is not None else UNKNOWN)


def _detail(decision: Mapping[str, object], mcp: Catalog) -> str | None:
    """The detail of an invalid call, found again from the arguments the ledger kept."""
    tool, arguments = str(decision["tool"]), str(decision["arguments"])
    try:
        if split_name(tool) is None:
            argsmod.parse(tool, arguments)
        elif (pinned := mcp.tools.get(tool)) is not None:
            mcp_args.parse(pinned, tool, arguments)
    except argsmod.ArgsError as error:
        return error.detail()
    except ValueError:
        return None
    return None
