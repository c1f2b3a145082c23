"""What inside content is a target (SPEC §20, docs/grants.md "Targets, content and code"):
links, payment card numbers and IBANs, each found as its reader sees it and only when its
check holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.brokerd.core.in_content import MOST_TRIED, in_content, links_in, plain
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


@pytest.mark.parametrize(
    ("text", "found"),
    [
        # other separators than one space or hyphen, as people print card numbers
        ("4111.1111.1111.1111", ["4111.1111.1111.1111"]),
        ("4111/1111/1111/1111 and 4111_1111_1111_1111",
         ["4111/1111/1111/1111", "4111_1111_1111_1111"]),
        ("4111  1111  1111  1111", ["4111  1111  1111  1111"]),
        ("4111 - 1111 - 1111 - 1111", ["4111 - 1111 - 1111 - 1111"]),
        ("4111\n1111\n1111\n1111", ["4111\n1111\n1111\n1111"]),
        ("4111\u00a01111\u00a01111\u00a01111", ["4111 1111 1111 1111"]),  # no-break spaces
        ("4111\u20131111\u20131111\u20131111", ["4111-1111-1111-1111"]),  # en dashes
        # what draws nothing between its digits, or digits of another form
        ("4111\u200b1111\u200b1111\u200b1111", ["4111111111111111"]),
        ("41\u00ad11\u20601111\ufeff1111\u200d1111", ["4111111111111111"]),
        ("4\u0331111111111111111", ["4111111111111111"]),  # a combining mark on a digit
        ("\uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11"
         "\uff11\uff11\uff11", ["4111111111111111"]),  # full-width
        ("\u0664\u0661\u0661\u0661 1111 1111 1111", ["4111 1111 1111 1111"]),  # Arabic-Indic
        # numbers beside it are no piece of it
        ("4111 1111 1111 1111 123", ["4111 1111 1111 1111"]),  # its CVV after it
        ("card 4111 1111 1111 1111 12/29", ["4111 1111 1111 1111"]),
        ("ref 2024 4111 1111 1111 1111", ["4111 1111 1111 1111"]),
        ("diners 3056 930902 5904", ["3056 930902 5904"]),
        ("19 digits 6011 0000 0000 0000019", ["6011 0000 0000 0000019"]),
        ("on 2026-12-04, 2026-12-05 and 2026-12-06 at 10.30", []),
        ("rooms 2345 6789 and 3456", []),
        # IBANs: small letters, other separators, full-width
        ("pay gb82 west 1234 5698 7654 32", ["gb82 west 1234 5698 7654 32"]),
        ("pay GB82-WEST-1234-5698-7654-32.", ["GB82-WEST-1234-5698-7654-32"]),
        ("\uff27\uff22\uff18\uff12\uff37\uff25\uff33\uff34\uff11\uff12\uff13\uff14"
         "\uff15\uff16\uff19\uff18\uff17\uff16\uff15\uff14\uff13\uff12",
         ["GB82WEST12345698765432"]),
        ("GB82\u200bWEST\u200b1234\u200b5698\u200b7654\u200b32", ["GB82WEST12345698765432"]),
        ("AB12 GB82 WEST 1234 5698 7654 32 THEN", ["GB82 WEST 1234 5698 7654 32"]),
        ("Gb82 West 1234 5698 7654 32", []),  # words in title case, not an account
        # links the reader sees whole
        ("www.ev\u200bil.example/x", ["www.evil.example/x"]),
        ("\uff57\uff57\uff57\uff0eevil\u3002example", ["www.evil.example"]),
    ],
)  # fmt: skip
def test_accounts_and_links_are_found_as_their_reader_sees_them(
    text: str, found: list[str]
) -> None:
    """A card number with dots or no-break spaces, with zero-width characters or soft hyphens
    between its digits, in full-width or Arabic-Indic digits, or with its CVV after it, is
    still the number its reader reads and spends with; so is an IBAN in small letters."""
    assert in_content(text) == found


def test_a_text_with_more_places_than_are_tried_is_asked_about() -> None:
    """A flood of numbers shaped like cards is never let through unchecked: past
    `MOST_TRIED` places, the next is given as a target as it is."""
    flood = " ".join(["4111 1111 1111 1112"] * MOST_TRIED) + " 4111 1111 1111 1111"
    found = in_content(flood)
    assert found and found[-1] == "4111"
    assert in_content(" ".join(["4111 1111 1111 1112"] * (MOST_TRIED // 4))) == []


INVISIBLE = st.sampled_from(["", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad",
                             "\u200e", "\u202c", "\u034f", "\x07"])  # fmt: skip


@given(
    st.integers(2, 6),
    st.text("0123456789", min_size=14, max_size=14),
    st.sampled_from([" ", "-", ".", "/", "_", "  ", "\n", "\t", " - ", "\u00a0", "\u2009",
                     "\u3000", "\u2013", "\u2212"]),
    st.lists(INVISIBLE, min_size=16, max_size=16),
    st.booleans(),
)  # fmt: skip
def test_a_card_number_is_found_whatever_splits_it_and_in_whatever_digits(
    first: int, rest: str, sep: str, hidden: list[str], wide: bool
) -> None:
    """Any separator between its groups, anything that draws nothing after any digit, ASCII or
    full-width digits: the one number found is the card's, an expiry after it no piece of it."""
    number = _luhn_completed(f"{first}{rest}")
    digits = [(chr(0xFF10 + int(d)) if wide else d) + hidden[n] for n, d in enumerate(number)]
    written = sep.join("".join(digits[i : i + 4]) for i in range(0, 16, 4))
    found = in_content(f"card: {written} exp 12/29")
    assert len(found) == 1 and "".join(c for c in found[0] if c.isdigit()) == number
    assert found[0] == plain(written)
