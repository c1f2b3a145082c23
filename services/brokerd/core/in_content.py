"""What inside content is a target (SPEC §20, issue 24): links, payment card numbers, IBANs.

Content (a message's body, a file's text) is what is said, and the rule never endorses it
word by word. But some things in it are where something goes: a link sends its reader there,
an IBAN tells them where to pay, and a payment card's number lets whoever reads it spend from
that account. Each of those is a target, so content carrying one runs unasked only when the
owner typed it (AgentDojo's travel: the owner's card number, read from a tool, mailed to the
wife's address the owner gave). `in_content(text)` finds them.

They are looked for in the text as its reader sees it (`plain`): what draws nothing (zero-width
spaces and joiners, soft hyphens, bidi marks, combining marks, controls) is taken out, any
script's digits (`４`, `٤`, `𝟒`) and the full-width forms (`ＧＢ`, `．`) read as ASCII, any space
as a space and any dash as `-`. Each is given as it reads there.

A card number is 13 to 19 digits starting with 2 to 6 (the card networks' first digits: a
millisecond clock's 13 digits start with 1), together or in the groups cards are printed in
(fours with a last group of one to seven digits, Amex's 4-6-5, Diners' 4-6-4), split by
white space or by a hyphen, dot, slash or underscore, that pass the Luhn check; an IBAN is
two letters (both capitals or both small), two digits and 11 to 30 letters or digits,
together or in groups of four with a shorter last one, split the same way, whose mod-97
check holds (ISO 13616). A number that fails its check is no account. Numbers beside one
(an expiry, a CVV, a reference) are never taken for a piece of it: a number is tried from
each place one may start, with the fewest groups after it that pass the check. A text with
more than `MOST_TRIED` such places is not checked past them: its next place is a target as
it is, so a flood of numbers asks.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from bxcore.frozen import frozen
from bxcore.visible import BLANK, ignorable
from services.brokerd.core.owner_words import bare

#: A link in a text: a URL with its scheme, or a host that starts `www.` (with a path or not).
_LINK = re.compile(r"(?:https?://\S+|www\.(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*(?:[/?#]\S*)?)", re.I)
_SEP = r"(?:\s*[-./_]\s*|\s+)"  # between a number's groups
_APART = r"(?<![0-9A-Za-z]){}(?![0-9A-Za-z])"  # never a piece of a longer word or number
#: Where a card number may start: 13 to 19 digits together, or a group of four followed by
#: more; and an IBAN: its country and check digits, with the rest together or in groups.
_CARD = re.compile(
    rf"(?<![0-9A-Za-z])(?:[2-6][0-9]{{12,18}}(?![0-9A-Za-z])|[2-6][0-9]{{3}}(?={_SEP}[0-9]))",
    re.ASCII,
)
_COUNTRY = r"[A-Za-z]{2}[0-9]{2}"
_IBAN = re.compile(
    rf"(?<![0-9A-Za-z]){_COUNTRY}(?:[0-9A-Za-z]{{11,30}}(?![0-9A-Za-z])|(?={_SEP}[0-9A-Za-z]))",
    re.ASCII,
)
#: The next group of a number written in groups (captured): digits, or letters and digits.
_NEXT_DIGITS = re.compile(_SEP + _APART.format("([0-9]{1,7})"), re.ASCII)
_NEXT_ALNUM = re.compile(_SEP + _APART.format("([0-9A-Za-z]{1,4})"), re.ASCII)
#: How many places a number may start at in one text before the rest is not checked: a text
#: with more is asked about (its next such place is given as a target), never let through.
MOST_TRIED = 4096
#: What full stops IDNA reads as `.` besides the full-width one NFKC folds (`。`, `｡`), and
#: what reads as a hyphen though it is no dash (the minus sign, the hyphen bullet).
_STOPS = frozenset({0x3002, 0xFF61})
_HYPHENS = frozenset({0x2212, 0x2043})
_KEPT = 1 << 16  # code points whose plain form `_Plain` keeps once made


def in_content(text: str) -> list[str]:
    """The targets inside a content value, in this order: its links (each a bare token), its
    card numbers and its IBANs, each as `plain` reads it (its separators kept)."""
    seen = plain(text)
    return [*links_in(seen), *_found(seen, _CARDS), *_found(seen, _IBANS)]


def links_in(text: str) -> list[str]:
    """The links a text holds (`https://…`, `www.host…`), each as a bare token, in order."""
    found = []
    for raw in text.split():
        token = bare(raw)
        link = _LINK.search(token)
        if link is not None:
            found.append(bare(link.group(0)))
    return found


class _Plain(dict[int, str | None]):
    """`str.translate`'s table for `plain`, each code point's entry made when first met."""

    def __missing__(self, code: int) -> str | None:
        made = _plain_of(code)
        if len(self) < _KEPT:
            self[code] = made
        return made


def _plain_of(code: int) -> str | None:
    char = chr(code)
    kind = unicodedata.category(char)
    if char.isspace():
        return " " if kind == "Zs" else char
    if kind in ("Cc", "Cf", "Mn", "Me") or ignorable(code) or code in BLANK:
        return None  # it draws nothing, or nothing of its own
    if kind == "Nd":
        return str(unicodedata.decimal(char))
    if kind == "Pd" or code in _HYPHENS:
        return "-"
    if code in _STOPS:
        return "."
    if 0xFF01 <= code <= 0xFF5E:  # the full-width forms of ASCII
        return unicodedata.normalize("NFKC", char)
    return char


_TABLE = _Plain()


def plain(text: str) -> str:
    """`text` as a reader sees its letters, digits and separators (the module's docstring)."""
    return text.translate(_TABLE)


@frozen
class _Kind:
    """A number that may be written in groups: where one may start (`starts`: the whole
    number together, or its first group of four followed by a separator), its next group
    (`after`), the lengths a group before the last may have (`middle`), its longest whole
    (`most`) and its check (`holds`, on the groups joined)."""

    starts: re.Pattern[str]
    after: re.Pattern[str]
    middle: tuple[int, ...]
    most: int
    holds: Callable[[str], bool]


def _found(text: str, kind: _Kind) -> list[str]:
    """Each number of `kind` in `text`, as written, tried from each place one may start: the
    number together, or its first group with the fewest groups after it that make one; the
    next tried after its end. Past `MOST_TRIED` places, the next place is given unchecked."""
    found: list[str] = []
    done = 0  # where the last number found ends
    for tried, start in enumerate(kind.starts.finditer(text)):
        if start.start() < done:
            continue
        if tried == MOST_TRIED:
            found.append(start.group())
            break
        end = _grouped(text, start, kind)
        if end is not None:
            found.append(text[start.start() : end])
            done = end
    return found


def _grouped(text: str, start: re.Match[str], kind: _Kind) -> int | None:
    """Where the number that starts at `start` ends, or None when none does."""
    whole = start.group()
    if len(whole) > 4:  # written together
        return start.end() if kind.holds(whole) else None
    end = start.end()
    while len(whole) < kind.most:
        group = kind.after.match(text, end)
        if group is None:
            return None
        whole, end = whole + group.group(1), group.end()
        if kind.holds(whole):
            return end
        if len(group.group(1)) not in kind.middle:
            return None  # a group not as cards and IBANs are printed: the number ended
    return None


def _is_card(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _is_iban(compact: str) -> bool:
    if not 15 <= len(compact) <= 34:
        return False
    letters = "".join(char for char in compact if char.isalpha())
    if letters != letters.upper() and letters != letters.lower():
        return False  # `De89…`: words, not an account number written in one case
    return _mod97(compact)


_CARDS = _Kind(_CARD, _NEXT_DIGITS, (4, 6), 19, _is_card)
_IBANS = _Kind(_IBAN, _NEXT_ALNUM, (4,), 34, _is_iban)


def _luhn(digits: str) -> bool:
    total = 0
    for n, char in enumerate(reversed(digits)):
        value = int(char) * (2 if n % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _mod97(compact: str) -> bool:
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in moved)) % 97 == 1
