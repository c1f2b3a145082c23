"""brokerd's answer to `tools_query` (SPEC §18.4): the catalog's tools in name order, each with
its pinned description and its pinned schema as canonical JSON; changed tools never; a list too
large for one message cut, never refused."""

from __future__ import annotations

import json

from bxcore.mcp_tools import Catalog, ToolDef
from bxcore.wire import codec as wire
from bxcore.wire.messages import Error, ErrorCode, OfferedTool, Tools, ToolsQuery
from services.brokerd.admin import REFUSAL
from services.brokerd.broker import offered

SCHEMA = {"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}}


def test_the_pinned_unchanged_tools_are_offered_in_name_order_and_changed_ones_never() -> None:
    catalog = Catalog(
        {
            "mcp__mail__send_email": ToolDef("send_email", "Send one mail.", SCHEMA),
            "mcp__mail__read_inbox": ToolDef("read_inbox", "Read.", {"type": "object"}),
        },
        frozenset({"mcp__rug__list_notes"}),
    )
    tools = offered("r1", catalog)
    assert tools == Tools(
        "r1",
        (
            OfferedTool("mcp__mail__read_inbox", "Read.", '{"type":"object"}'),
            OfferedTool(
                "mcp__mail__send_email",
                "Send one mail.",
                '{"properties":{"to":{"type":"string"}},"required":["to"],"type":"object"}',
            ),
        ),
    )
    assert wire.decode(wire.encode(tools)) == tools


def test_no_tools_is_an_empty_list() -> None:
    assert offered("r1", Catalog({})) == Tools("r1", ())


def test_a_list_too_large_for_one_message_is_cut_and_still_sent() -> None:
    big = {"type": "object", "description": "x" * (wire.MAX_MESSAGE // 3)}
    catalog = Catalog({f"mcp__s__t{n}": ToolDef(f"t{n}", "d", big) for n in range(5)})
    tools = offered("r1", catalog)
    assert 1 <= len(tools.tools) < 5
    assert len(wire.encode(tools)) <= wire.MAX_MESSAGE
    assert json.loads(tools.tools[0].input_schema) == big


def test_the_admin_socket_sends_the_question_to_the_broker_socket() -> None:
    assert REFUSAL.answer(ToolsQuery("r1")) == Error(
        "r1", ErrorCode.WRONG_SOCKET, "this belongs on the broker socket"
    )
