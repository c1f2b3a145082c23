"""What the model reads back (§10.3, §3.5): denial_message, cap_result, errors."""

from __future__ import annotations

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN
from bxcore.messages import Denied, Done, Failed, Pending
from services.loopd.tools import CAP, cap_result, denial_message, result_text


def test_the_m5b_example_reads_the_detail_before_the_full_stop() -> None:
    detail = "invalid argument shape: unknown field `file`, expected `text`"
    assert denial_message(DenyReason.INVALID_ARGUMENTS, detail) == (
        "Denied: the arguments are not valid for this tool: invalid argument shape: unknown "
        "field `file`, expected `text`."
    )


@pytest.mark.parametrize("reason", list(DenyReason))
def test_without_a_detail_the_model_reads_exactly_the_sentence(reason: DenyReason) -> None:
    from bxcore.deny import denial_text

    assert denial_message(reason, None) == denial_text(reason)


def test_results_are_cut_at_64_kib_of_characters_saying_how_many_more() -> None:
    assert cap_result("é" * CAP) == "é" * CAP
    cut = cap_result("é" * (CAP + 10))
    assert cut == "é" * CAP + "\n[… 10 more characters cut]"


def test_each_outcome_reads_as_the_spec_says() -> None:
    assert result_text(Done(True, "hello", CLEAN)) == "hello"
    assert result_text(Denied(DenyReason.NO_GRANT)) == "Denied: no grant allows this call."
    assert result_text(Failed("sandbox unavailable: bwrap not found")) == (
        "Error: sandbox unavailable: bwrap not found"
    )
    assert result_text(Pending("k3v9qz2m")) is None
