"""The owner's words of a session, and whether a value is one the owner gave (SPEC §20).

`Words` is built from what the owner typed in a session (each turn's message, or a job's
prompt), and `holds(value)` says whether a target value occurs in it: a string as a whole
token or a run of whole tokens (a phrase), e-mail addresses, host names and URLs' hosts with
ASCII case folded; a number as a number, unless it is a date's day beside a month's name
("June 13": never the value 13 alone). Never a piece of a longer token, never across two
messages. The rule, case by case, is docs/grants.md's "Values the owner gave"; what inside
content is a target is `in_content`'s.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation

#: Taken off a token's start and end (repeatedly) to give its bare form: quotes, brackets and
#: the punctuation that ends a clause. Never `@ / - _ # $ % + = * & ~`: those belong to what
#: people name (addresses, paths, handles, amounts).
OPENING = "\"'`([{<“‘«„"
CLOSING = "\"'`)]}>.,;:!?”’»"
#: The white space a value's phrase may have between its tokens. Any other (a no-break or
#: ideographic space, a line separator, a carriage return, `\x1c`) splits a string as well,
#: but the value is then another string than the one the owner typed, though it looks alike.
TYPED_SPACE = " \t\n"
_OTHER_SPACE = re.compile(r"[^\S \t\n]")  # white space (as str.split sees it) but those
#: How much of the owner's words a session keeps for matching: the newest messages win.
MAX_WORDS = 256 * 1024  # characters

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}\.)+[a-z][a-z0-9-]*", re.ASCII)
_EMAIL = re.compile(rf"[^@\s]+@(?:{_LABEL}\.)+[a-z][a-z0-9-]*", re.ASCII)
_URL = re.compile(r"(https?://)([^/?#\s]+)(.*)", re.ASCII | re.DOTALL)
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?", re.ASCII)
#: Month names (English, whole and short): a number beside one is part of a date the owner
#: wrote ("June 13", "13 June"), not a value they chose.
MONTHS = frozenset(
    {
        "january", "february", "march", "april", "may", "june", "july", "august",
        "september", "october", "november", "december", "jan", "feb", "mar", "apr", "jun",
        "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    }
)  # fmt: skip


def _lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def folded(token: str) -> str:
    """A token as it is compared: an e-mail address or a host name with its ASCII letters
    lower-cased, a URL with its scheme and host lower-cased; any other token as it is. Only
    ASCII is folded: `ß` never becomes `ss`, nor `К` `к`."""
    lower = _lower(token)
    if _EMAIL.fullmatch(lower) or _HOST.fullmatch(lower):
        return lower
    url = _URL.fullmatch(token)
    if url is not None:
        return _lower(url.group(1)) + _lower(url.group(2)) + url.group(3)
    return token


def bare(token: str) -> str:
    """A token without the quotes, brackets and clause punctuation around it."""
    start, end = 0, len(token)
    while start < end and token[start] in OPENING:
        start += 1
    while end > start and token[end - 1] in CLOSING:
        end -= 1
    return token[start:end]


def number_of(token: str) -> Decimal | None:
    """The number a bare token writes (`42`, `-3.50`, `€12`, `12$`), or None."""
    if token and unicodedata.category(token[0]) == "Sc":
        token = token[1:]
    elif token and unicodedata.category(token[-1]) == "Sc":
        token = token[:-1]
    if not _NUMBER.fullmatch(token):
        return None
    try:
        return Decimal(token)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        return None


class Words:
    """What the owner said in a session, indexed for `holds`. Immutable once built."""

    def __init__(self, texts: Sequence[str] = ()) -> None:
        kept = _newest(texts, MAX_WORDS)
        self.texts: tuple[str, ...] = tuple(kept)
        self._forms: list[frozenset[str]] = []  # each token's forms, in order; a gap: frozenset()
        self._where: dict[str, list[int]] = {}
        self._numbers: set[Decimal] = set()
        for text in self.texts:
            tokens = text.split()
            for n, raw in enumerate(tokens):
                stripped = bare(raw)
                forms = {f for f in (raw, stripped) if f}
                forms |= {folded(f) for f in forms}
                number = number_of(stripped)
                in_date = number is not None and _beside_a_month(tokens, n)
                if number is not None and not in_date:
                    self._numbers.add(number)
                if not in_date:  # a date's day is a piece of its phrase, never a value alone
                    for form in forms:
                        self._where.setdefault(form, []).append(len(self._forms))
                self._forms.append(frozenset(forms))
            self._forms.append(frozenset())  # a phrase never runs from one message into the next

    def __repr__(self) -> str:
        return f"Words({len(self.texts)} messages, {len(self._where)} forms)"

    def __bool__(self) -> bool:
        return bool(self._where)

    def holds(self, value: object) -> bool:
        """Whether `value` (a target value: a string or a number) is one the owner gave."""
        if isinstance(value, bool) or value is None:
            return False  # true, false and null are never words anyone typed as a value
        if isinstance(value, int | float):
            try:
                return Decimal(repr(value)) in self._numbers
            except InvalidOperation:  # inf, nan: not JSON, never the owner's
                return False
        if isinstance(value, str):
            return self._holds_text(value)
        return False

    def _holds_text(self, value: str) -> bool:
        pieces = value.split()
        if not pieces or value != value.strip():
            return False  # empty, or white space around it: no token anyone typed
        if _OTHER_SPACE.search(value):
            return False  # `week\u00a03.md`, `week\r3.md`: another name than `week 3.md`
        rest = _Folded(pieces[1:])  # folded as far as a match gets: a value is up to 2 MiB
        for start in self._where.get(folded(pieces[0]), ()):
            end = start + len(pieces) - 1
            if end < len(self._forms) and all(
                rest[i] in self._forms[start + 1 + i] for i in range(len(pieces) - 1)
            ):
                return True
        return False


class _Folded:
    """The `folded` forms of `pieces`, each made the first time it is asked for."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self._pieces = pieces
        self._made: list[str] = []

    def __getitem__(self, at: int) -> str:
        while len(self._made) <= at:
            self._made.append(folded(self._pieces[len(self._made)]))
        return self._made[at]


def _beside_a_month(tokens: Sequence[str], n: int) -> bool:
    """Whether the token before or after `tokens[n]` is a month's name."""
    near = [*tokens[max(n - 1, 0) : n], *tokens[n + 1 : n + 2]]
    return any(_lower(bare(token)) in MONTHS for token in near)


def _newest(texts: Iterable[str], budget: int) -> list[str]:
    """The newest texts that fit `budget` characters in all, oldest first; the newest alone
    too long keeps its start."""
    kept: list[str] = []
    for text in reversed(list(texts)):
        if len(text) > budget:
            if not kept:
                kept.append(text[:budget])
            break
        kept.append(text)
        budget -= len(text)
    kept.reverse()
    return kept


NO_WORDS = Words()
