"""What the model reads back (§10.3, §3.5): denial_message, cap_result, errors; and whether
the call worked, as a field of the result."""

from __future__ import annotations

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN
from bxcore.wire.messages import Denied, Done, Failed
from services.loopd.tools import (
    CAP,
    CallResult,
    cap_result,
    denial_message,
    result_of,
    too_many_calls,
)


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


@pytest.mark.parametrize(
    ("outcome", "result"),
    [
        (Done(True, "hello", CLEAN), CallResult("hello", ok=True)),
        (Done(False, "[exit status 1]", CLEAN), CallResult("[exit status 1]", ok=False)),
        (
            Done(True, "Error: the file says so", CLEAN),
            CallResult("Error: the file says so", ok=True),
        ),
        (Denied(DenyReason.NO_GRANT), CallResult("Denied: no grant allows this call.", ok=False)),
        (
            Failed("sandbox unavailable: bwrap not found"),
            CallResult("Error: sandbox unavailable: bwrap not found", ok=False),
        ),
    ],
)
def test_each_outcome_reads_as_the_spec_says_and_its_success_is_its_own_field(
    outcome: Done | Denied | Failed, result: CallResult
) -> None:
    assert result_of(outcome) == result


def test_a_call_past_the_cap_reads_an_error_and_did_not_work() -> None:
    assert too_many_calls(2) == CallResult(
        "Error: only the first 2 tool calls of one answer are run; "
        "send the rest again in a later answer.",
        ok=False,
    )
