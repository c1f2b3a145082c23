"""Why a call is refused (SPEC §3.5), and the sentence the model reads for each reason.

Pure. The owner's views show the reason's sentence (`denial_clause`); only the model also
reads a detail (§4.3).
"""

from __future__ import annotations

import enum


class DenyReason(enum.StrEnum):
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    NO_GRANT = "no_grant"
    DENIED_BY_GRANT = "denied_by_grant"
    FLOW_VIOLATION = "flow_violation"
    OWNER_DENIED = "owner_denied"
    APPROVAL_EXPIRED = "approval_expired"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    PROTECTED = "protected"  # boxmaker's own files (issue 9): no grant reaches them


_TEXT = {
    DenyReason.UNKNOWN_TOOL: "Denied: there is no such tool.",
    DenyReason.INVALID_ARGUMENTS: "Denied: the arguments are not valid for this tool.",
    DenyReason.NO_GRANT: "Denied: no grant allows this call.",
    DenyReason.DENIED_BY_GRANT: "Denied: a grant forbids this call.",
    DenyReason.FLOW_VIOLATION: (
        "Denied: this session holds data that may not flow to this destination."
    ),
    DenyReason.OWNER_DENIED: "Denied: the owner refused this call.",
    DenyReason.APPROVAL_EXPIRED: "Denied: the owner did not answer in time.",
    DenyReason.AUDIT_UNAVAILABLE: "Denied: the audit log cannot be written, so nothing can run.",
    DenyReason.PROTECTED: "Denied: this path holds boxmaker's own files, which no tool may touch.",
}


def denial_text(reason: DenyReason) -> str:
    """The one sentence the model reads for `reason`."""
    return _TEXT[DenyReason(reason)]


def denial_clause(reason: DenyReason) -> str:
    """What the owner's views say of a denial after the tool's name (`read_file denied: no
    grant allows this call`): the sentence without `Denied: ` and its full stop."""
    return denial_text(reason).removeprefix("Denied: ").removesuffix(".")
