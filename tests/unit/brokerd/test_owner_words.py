"""The owner's words (SPEC §20, docs/grants.md "Values the owner gave"): a target value is the
owner's only when it occurs in what the owner typed as whole tokens, case by case."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from services.brokerd.core.owner_words import (
    MONTHS,
    NO_WORDS,
    Words,
    bare,
    folded,
    number_of,
)

SAID = (
    "Read #general and send Alice a summary at alice@Example.com, cc Bob Smith.",
    "Pay 42.50 to DE89370400440532013000 and fetch https://Docs.Example.org/Page?id=7 too",
    'Save it as "/home/kyle/notes/week 3.md" (not elsewhere)',
)


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        ("Alice", True),  # a whole token
        ("alice", False),  # a name keeps its case
        ("#general", True),
        ("general", False),  # a piece of the token `#general`
        ("alice@Example.com", True),
        ("ALICE@example.COM", True),  # an address, ASCII case folded
        ("alice@example.com.evil.io", False),  # never a longer token
        ("Bob Smith", True),  # a phrase
        ("Smith", True),
        ("Bob  Smith", True),  # white space runs are one space
        ("Bob\nSmith", True),
        (" Bob Smith", False),  # white space around it: typed by no one
        ("Smith Pay", False),  # a phrase never runs from one message into the next
        ("Bob Smith Pay", False),
        ("DE89370400440532013000", True),
        ("DE8937040044053201300", False),  # one digit short: a substring
        ("https://docs.example.org/Page?id=7", True),  # scheme and host folded, the rest not
        ("https://docs.example.org/page?id=7", False),
        ("https://docs.example.org/Page?id=8", False),
        ("https://docs.example.org/Page", False),
        ('"/home/kyle/notes/week', True),  # the raw token, as typed
        ("/home/kyle/notes/week", True),
        ("/home/kyle/notes/week 3.md", True),
        ("/home/kyle/notes", False),
        ("", False),
        ("   ", False),
        ("summary", True),
        ("Smith.", True),  # the raw token too
        ("summary.", False),
        ("аlice@example.com", False),  # a Cyrillic а: looks the same, is not
        ("Alice\u200b", False),  # a zero-width space after it
        ("/home/kyle/notes/week\u00a03.md", False),  # a no-break space: another name
        ("/home/kyle/notes/week\r3.md", False),
        ("/home/kyle/notes/week\x1c3.md", False),  # a control str.split takes for a space
        ("Bob\u3000Smith", False),  # an ideographic space
        ("Bob\u2028Smith", False),
        ("Bob\tSmith", True),
    ],
)
def test_a_string_is_the_owners_only_as_whole_tokens(value: str, holds: bool) -> None:
    assert Words(SAID).holds(value) is holds


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        (42.5, True),  # "42.50": numbers as numbers
        (42.50, True),
        (42, False),
        (7, False),  # inside the URL's query: a piece of a token
        (True, False),
        (None, False),
        (float("nan"), False),
        ("42.50", True),  # a string is its text
        ("42.5", False),
    ],
)
def test_a_number_is_the_owners_as_a_number(value: object, holds: bool) -> None:
    assert Words(SAID).holds(value) is holds


@pytest.mark.parametrize(
    ("token", "number"),
    [("42", "42"), ("-3.50", "-3.50"), ("€12", "12"), ("12$", "12"), ("1,000", None),
     ("12e3", None), ("٣", None), ("0x10", None), ("$", None)],
)  # fmt: skip
def test_number_tokens_are_plain_decimals_with_at_most_a_currency_sign(
    token: str, number: str | None
) -> None:
    found = number_of(token)
    assert (None if found is None else str(found)) == number


def test_folding_is_ascii_only_so_no_two_different_hosts_are_one() -> None:
    assert folded("EXAMPLE.org") == "example.org"
    assert folded("Straße.de") == "Straße.de"  # not an ASCII host: compared as it is
    assert folded("strasse.de") != folded("Straße.de")
    assert folded("Bob") == "Bob"
    assert bare('("Bob!")') == "Bob"


def test_no_words_hold_nothing_and_the_newest_words_are_kept_within_the_bound() -> None:
    assert not NO_WORDS.holds("anything")
    old, new = "target-old " + "x " * 140_000, "target-new"
    words = Words([old, new])
    assert words.holds("target-new")
    assert not words.holds("target-old")  # past the bound, the oldest words go first


TOKEN = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1
)


@given(said=st.lists(TOKEN, min_size=1, max_size=6), more=TOKEN, at_end=st.booleans())
def test_a_target_made_of_an_owners_token_and_anything_else_is_never_the_owners(
    said: list[str], more: str, at_end: bool
) -> None:
    words = Words([" ".join(said)])
    owner = said[0]
    value = owner + more if at_end else more + owner
    assume(all(value not in {t, bare(t), folded(t), folded(bare(t))} for t in said))
    assume(folded(value) not in {folded(t) for t in said} | {folded(bare(t)) for t in said})
    assert not words.holds(value)


@given(said=st.lists(TOKEN, min_size=1, max_size=6))
def test_every_token_the_owner_typed_is_the_owners(said: list[str]) -> None:
    words = Words([" ".join(said)])
    for n, token in enumerate(said):
        near = said[max(n - 1, 0) : n] + said[n + 1 : n + 2]
        if number_of(bare(token)) is not None and any(bare(t).lower() in MONTHS for t in near):
            continue  # a date's day: below
        assert words.holds(token)


@pytest.mark.parametrize(
    ("said", "value", "holds"),
    [
        ("What do we do on June 13 in Hawaii?", "13", False),
        ("What do we do on June 13 in Hawaii?", 13, False),
        ("meet on 13 June", "13", False),
        ("meet on 13 jun.", 13, False),
        ("What do we do on June 13 in Hawaii?", "June 13", True),  # the phrase stays
        ("delete file 13 please", "13", True),
        ("pay 13 on June 1", 13, True),
        ("May I pay 20?", 20, True),  # "May" is the word before "I", not before 20
    ],
)
def test_a_dates_day_is_never_a_number_the_owner_chose(
    said: str, value: object, holds: bool
) -> None:
    """AgentDojo's workspace: "what do we do on June 13" endorsed the injected "delete the
    file with ID '13'" (issue 24)."""
    assert Words([said]).holds(value) is holds
