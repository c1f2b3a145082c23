"""What inside content is a target (SPEC §20, issue 24): links, payment card numbers, IBANs.

Content (a message's body, a file's text) is what is said, and the rule never endorses it
word by word. But some things in it are where something goes: a link sends its reader there,
an IBAN tells them where to pay, and a payment card's number lets whoever reads it spend from
that account. Each of those is a target, so content carrying one runs unasked only when the
owner typed it (AgentDojo's travel: the owner's card number, read from a tool, mailed to the
wife's address the owner gave). `in_content(text)` finds them, each as it is written there.

A card number is 13 to 19 digits starting with 2 to 6 (the card networks' first digits: a
millisecond clock's 13 digits start with 1), together or in groups of four (and Amex's
4-6-5) split by a space or a hyphen, that pass the Luhn check; an IBAN is two capital
letters, two digits and 11 to 30 capitals or digits, together or in groups of four split by a
space, whose mod-97 check holds (ISO 13616). A number that fails its check is no account.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re

from services.brokerd.core.owner_words import bare

#: A link in a text: a URL with its scheme, or a host that starts `www.` (with a path or not).
_LINK = re.compile(r"(?:https?://\S+|www\.(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*(?:[/?#]\S*)?)", re.I)
_APART = r"(?<![0-9A-Za-z]){}(?![0-9A-Za-z])"  # never a piece of a longer word or number
_CARD = re.compile(
    _APART.format(
        r"(?:[2-6][0-9]{3}(?:[ -][0-9]{4}){3}(?:[ -]?[0-9]{3})?|3[0-9]{3}[ -][0-9]{6}[ -][0-9]{5}"
        r"|[2-6][0-9]{12,18})"
    ),
    re.ASCII,
)
_IBAN = re.compile(
    _APART.format(r"(?:[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}|[A-Z]{2}[0-9]{2}(?: [A-Z0-9]{4}){2,7}"
                  r"(?: [A-Z0-9]{1,4})?)"),
    re.ASCII,
)  # fmt: skip


def in_content(text: str) -> list[str]:
    """The targets inside a content value, in the order they are written: its links (each a
    bare token), then its card numbers and IBANs (each as written, separators and all)."""
    return [*links_in(text), *_cards(text), *_ibans(text)]


def links_in(text: str) -> list[str]:
    """The links a text holds (`https://…`, `www.host…`), each as a bare token, in order."""
    found = []
    for raw in text.split():
        token = bare(raw)
        link = _LINK.search(token)
        if link is not None:
            found.append(bare(link.group(0)))
    return found


def _cards(text: str) -> list[str]:
    return [m.group(0) for m in _CARD.finditer(text) if _luhn(_digits(m.group(0)))]


def _ibans(text: str) -> list[str]:
    found = []
    for match in _IBAN.finditer(text):
        written = match.group(0)
        while written and not _mod97(written.replace(" ", "")):
            written = written.rpartition(" ")[0]  # a word after it may have joined its groups
        if written:
            found.append(written)
    return found


def _digits(written: str) -> str:
    return written.replace(" ", "").replace("-", "")


def _luhn(digits: str) -> bool:
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for n, char in enumerate(reversed(digits)):
        value = int(char) * (2 if n % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _mod97(compact: str) -> bool:
    if not 15 <= len(compact) <= 34 or not compact[2:4].isdigit():
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in moved)) % 97 == 1
