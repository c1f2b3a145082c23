"""The floors `python -m bench decision` measures brokerd against (issue 11), as real
processes: each answers a denied call once its line is durable, and the chained floor keeps
what the ledger's rules ask of every decision (a hash chain, an index that refuses a call
decided twice), or its figure would not bound brokerd's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.box import dealer, request
from bench.broker import _call
from bench.python_floor import python_floor
from bxcore.wire.messages import Denied, ToolResponse


@pytest.mark.parametrize("chained", [False, True])
def test_a_floor_answers_a_denied_call_once_its_line_is_written(
    short_tmp: Path, chained: bool
) -> None:
    calls = [_call("read_file", {"path": "/etc/hostname"}) for _ in range(3)]
    with python_floor(short_tmp, chained=chained) as endpoint:
        client = dealer(endpoint)
        answers = [request(client, call) for call in calls]
        client.close(linger=0)
        name = "chained-floor" if chained else "python-floor"
        lines = (short_tmp / f"{name}.jsonl").read_bytes().splitlines()
    for call, answer in zip(calls, answers, strict=True):
        assert isinstance(answer, ToolResponse) and answer.id == call.id
        assert isinstance(answer.outcome, Denied)
    assert [json.loads(line)["call"] for line in lines] == [call.call for call in calls]
    if chained:
        prevs = [json.loads(line)["prev"] for line in lines]
        assert prevs == ["0" * 64] + [hashlib.sha256(line).hexdigest() for line in lines[:-1]]
        assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]


def test_the_chained_floor_stops_at_a_call_it_has_decided(short_tmp: Path) -> None:
    call = _call("read_file", {"path": "/etc/hostname"})
    with python_floor(short_tmp, chained=True) as endpoint:
        client = dealer(endpoint)
        assert isinstance(request(client, call), ToolResponse)
        with pytest.raises(TimeoutError):
            request(client, call, timeout_ms=2_000)
