"""What inside content is a target (SPEC §20, docs/grants.md "Targets, content and code"):
links, payment card numbers and IBANs, each found as written and only when its check holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.brokerd.core.in_content import in_content, links_in
from services.brokerd.core.owner_words import Words


@pytest.mark.parametrize(
    ("text", "links"),
    [
        ("see www.secure-systems-252.com now", ["www.secure-systems-252.com"]),
        ("(https://evil.example/x?a=1), then", ["https://evil.example/x?a=1"]),
        ("at WWW.Evil.example/p.", ["WWW.Evil.example/p"]),
        ("the report.pdf and e.g. this", []),
        ("mail bob@example.com", []),
        ("", []),
    ],
)
def test_links_are_found_in_a_text_as_bare_tokens(text: str, links: list[str]) -> None:
    assert links_in(text) == links


@pytest.mark.parametrize(
    ("text", "found"),
    [
        # AgentDojo's travel: the owner's card number read from a tool, in a mail's body
        ("passport_number: HGK137803, credit_card_number: 4237-4252-7456-2574",
         ["4237-4252-7456-2574"]),
        ("card 4111111111111111.", ["4111111111111111"]),
        ("card 4111 1111 1111 1111 exp 12/29", ["4111 1111 1111 1111"]),
        ("amex 378282246310005 or 3782 822463 10005", ["378282246310005", "3782 822463 10005"]),
        ("4111111111111112", []),  # fails the Luhn check: no card
        ("1700000000007", []),  # a millisecond clock, not a card network's number
        ("x4111111111111111 and 41111111111111110", []),  # pieces of longer words
        ("pay DE89 3704 0044 0532 0130 00 now", ["DE89 3704 0044 0532 0130 00"]),
        ("to GB82WEST12345698765432, thanks", ["GB82WEST12345698765432"]),
        ("DE89 3704 0044 0532 0130 00 THEN", ["DE89 3704 0044 0532 0130 00"]),
        ("GB82WEST12345698765433", []),  # fails mod 97: no account
        ("see www.a.example/x and 4111111111111111",
         ["www.a.example/x", "4111111111111111"]),
        ("the summary: all is well, 42 items on 2026-12-04", []),
    ],
)  # fmt: skip
def test_card_numbers_and_ibans_are_found_only_when_their_check_holds(
    text: str, found: list[str]
) -> None:
    assert in_content(text) == found


def _luhn_completed(body: str) -> str:
    total = 0
    for n, char in enumerate(reversed(body)):
        value = int(char) * (1 if n % 2 else 2)
        total += value - 9 if value > 9 else value
    return body + str(-total % 10)


@given(
    st.integers(2, 6),
    st.text("0123456789", min_size=14, max_size=14),
    st.sampled_from(["", " ", "-"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Nd", "Lu", "Ll")), max_size=12),
)
def test_any_valid_card_number_in_content_is_found_and_is_never_endorsed_by_a_recipient(
    first: int, rest: str, sep: str, around: str
) -> None:
    number = _luhn_completed(f"{first}{rest}")
    written = sep.join(number[i : i + 4] for i in range(0, 16, 4))
    text = f"{around}{written}{around}"
    assert written in in_content(text)
    assert not Words([f"send it to alice@example.com {around}"]).holds(written)
    assert Words([f"send {written} to alice@example.com"]).holds(written)
