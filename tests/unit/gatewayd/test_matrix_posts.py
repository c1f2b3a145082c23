"""What the phone channel shows (SPEC §21.2, §21.3): a turn's lines as `bxctl` prints them, the
card through the one visible rule, and the outbox that loses nothing while the homeserver is
away and turns many edits into one."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    ApprovalInfo,
    AskWhy,
    AssistantText,
    ToolCalled,
    ToolDone,
    TurnEvent,
)
from services.gatewayd.matrix.intake import Card
from services.gatewayd.matrix.memo import Memo, TurnMark
from services.gatewayd.matrix.outbox import Outbox, Post, Refused, SendFailed
from services.gatewayd.matrix.posts import MOST_TEXT, TurnText, card_text

pytestmark = pytest.mark.anyio


def info(arguments: str, why: AskWhy = AskWhy.GRANT_ASKS) -> ApprovalInfo:
    label = Label(DataClass.PRIVATE, False)
    return ApprovalInfo("abcd2345", "mx-1", "1-1-1", "shell", arguments, "workspace-shell",
                        label, why, "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")  # fmt: skip


def test_a_turn_is_the_lines_bxctl_shows_each_event_taken_once() -> None:
    turn = TurnText("mx-1", 1)
    assert turn.take(TurnEvent("mx-1", 1, 2, ToolCalled("shell", '{"command":"ls"}'))) == [0]
    assert turn.take(TurnEvent("mx-1", 1, 3, ToolDone("shell", True, 17))) == [0]
    assert turn.take(TurnEvent("mx-1", 1, 3, ToolDone("shell", True, 17))) == []  # seen
    assert turn.take(TurnEvent("mx-1", 1, 4, AssistantText("done\u202e!"))) == [0]
    assert turn.text(0) == '→ shell {"command": "ls"}\n✓ shell: done, 17 bytes\ndone\\u202e!'


def test_a_turn_too_long_for_one_message_goes_on_in_the_next() -> None:
    turn = TurnText("mx-1", 1)
    turn.take(TurnEvent("mx-1", 1, 2, AssistantText("a" * (MOST_TEXT - 10))))
    assert turn.take(TurnEvent("mx-1", 1, 3, AssistantText("b" * 100))) == [1]
    assert all(len(turn.text(part)) <= MOST_TEXT for part in (0, 1))


def test_the_card_shows_every_argument_through_the_visible_rule() -> None:
    text = card_text(info('{"command":"echo safe\u202e; rm -rf /"}'), 0)
    assert "echo safe\\u202e; rm -rf /" in text
    assert "right-to-left override (U+202E)" in text
    assert "🔁 approve for the session" in text


def test_a_card_that_asks_because_of_untrusted_content_offers_no_session_scope() -> None:
    text = card_text(info('{"command":"ls"}', AskWhy.UNTRUSTED), 0)
    assert "🔁 cannot cover this call" in text


def test_a_card_too_long_for_one_message_says_it_is_cut() -> None:
    text = card_text(info('{"command":"' + "x" * (2 * MOST_TEXT) + '"}'), 0)
    assert "(cut: the card is" in text and "`bxctl pending`" in text


async def test_the_outbox_loses_nothing_and_sends_the_newest_text_once_back() -> None:
    sent: list[tuple[str | None, str]] = []
    away = True
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        await anyio.sleep(0)

    async def send(post: Post) -> str:
        if away:
            raise SendFailed("away")
        sent.append((post.event_id, post.text))
        return "$e1"

    outbox = Outbox(sleep=pause)
    got: list[str] = []
    outbox.want("turn", "one", thread="$root", on_sent=got.append)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(outbox.run, send)
        await anyio.sleep(0.01)
        outbox.want("turn", "one two")
        outbox.want("turn", "one two three")
        away = False
        with anyio.fail_after(5):
            while outbox.waiting():
                await anyio.sleep(0.001)
        tasks.cancel_scope.cancel()
    assert sent == [(None, "one two three")]  # sent once, the newest, as a new message
    assert got == ["$e1"]
    assert pauses[:3] == [0.5, 1.0, 2.0]  # the backoff while away


async def test_a_post_the_homeserver_refuses_holds_up_none_behind_it() -> None:
    sent: list[str] = []

    async def send(post: Post) -> str:
        if post.text == "too large":
            raise Refused("M_TOO_LARGE")
        sent.append(post.text)
        return f"$e{len(sent)}"

    outbox = Outbox(sleep=lambda _s: anyio.sleep(0))
    outbox.want("a", "too large")
    outbox.want("b", "fine")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(outbox.run, send)
        with anyio.fail_after(5):
            while outbox.waiting():
                await anyio.sleep(0.001)
        tasks.cancel_scope.cancel()
    assert sent == ["fine"]


def test_the_memo_keeps_threads_cards_and_what_was_acted_on(tmp_path: Path) -> None:
    memo = Memo(tmp_path)
    assert memo.new_session("$root") == "mx-1"
    memo.cards.put("$card", Card("abcd2345", "$root", "t", session_scope=False))
    memo.acted.put("$ev", None)
    memo.turns.put("mx-1", TurnMark(3, 17, ("$t1", "$t2")))
    memo.save()
    again = Memo(tmp_path)
    assert again.threads == {"$root": "mx-1"} and again.new_session("$r2") == "mx-2"
    assert again.cards.get("$card") == Card("abcd2345", "$root", "t", session_scope=False)
    assert "$ev" in again.acted and again.card_of("abcd2345") == "$card"
    assert again.turns.get("mx-1") == TurnMark(3, 17, ("$t1", "$t2"))
    assert again.since_ms == memo.since_ms  # when the box first listened, kept


def test_a_memo_that_cannot_be_read_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / "channel.json").write_text("{not json")
    memo = Memo(tmp_path)
    assert memo.threads == {} and (tmp_path / "channel.json.bad").exists()
