"""`bxctl chat --session sub-…` (issue 9): the owner may not name a session like a sub-agent,
or a later spawn could be handed that session. loopd refuses the message with one line, which
reaches the owner through gatewayd, and nothing is written.
"""

from __future__ import annotations

from services.loopd.daemon import SUB_SESSION_REFUSED
from tests.support.owner import running_box


def test_chat_in_a_session_named_like_a_sub_agent_is_refused_with_one_line() -> None:
    with running_box() as box:
        result = box.bxctl("chat", "--session", "sub-x-1", "hello")
        assert result.returncode == 1
        assert result.stderr == f"bxctl: gatewayd: {SUB_SESSION_REFUSED} (bad_message)\n"
        assert not (box.home / "sessions" / "sub-x-1.jsonl").exists()
        assert box.model.requests_for("hello") == []  # no turn ran
