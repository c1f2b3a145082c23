"""The one way to show a string that came from the model, a tool or a file (SPEC §9.1, §12.2,
§13): every character that changes or hides how text is drawn is shown as an escape (`\\x1b`,
`\\u202e`, `\\U000e0041`), so the text cannot move a cursor, clear a screen, set a title, hide
itself or reorder what the owner reads. `bxctl`, the console and the phone channel show foreign
text through this rule and nothing else.

Pure: no I/O. It does not escape markup (`[bold]`, `<b>`): every view shows its result as
text, never as markup (bxctl's `output` through rich `Text`, the console as DOM text).

What is escaped, in this order (`reasons` says which rule caught each character):
1. the categories `HIDDEN`: controls, format characters (bidi controls and isolates, zero-width
   characters, soft hyphen, tags), surrogates, private use, unassigned code points, and the
   line and paragraph separators; newline and tab only where `newlines` is false;
2. every Default_Ignorable_Code_Point (`IGNORABLE`: Hangul fillers, the combining grapheme
   joiner, Mongolian free variation selectors, ...), and U+2800, which draws nothing either —
   except one variation selector right after a non-ASCII base kept as it is (the emoji
   presentation of "⚠️", an ideographic variant): a second one in a row is escaped;
3. a combining mark (Mn, Me) without a proper base: at the start, right after an ASCII
   character that is not a letter or digit (it can disguise `;`, `#`, a quote), right after a
   character this rule escaped (it would draw on the escape), or past `MARKS` on one base.

The console's twin is `services/gatewayd/console/static/js/visible.js`, the only JavaScript
copy of this rule. The two read Unicode from different places: `unicodedata` (Unicode 14.0 on
Python 3.11) and the browser's ICU (newer), and stay in step this way. Unassigned code points
are escaped here, so a character newer than this side's Unicode is escaped by bxctl (stricter)
while the page draws it as its newer Unicode says. Python has no Default_Ignorable_Code_Point:
`IGNORABLE` is written out from DerivedCoreProperties-14.0.0; the twin reads
`\\p{Default_Ignorable_Code_Point}`. tests/browser/test_visible_twin.py runs the twin in
Chromium over a table of hostile strings (the two must agree exactly) and over every code point
(they must agree on every one assigned in this side's Unicode).
"""

from __future__ import annotations

import unicodedata
from enum import Enum

#: Unicode categories shown as escapes: controls (ESC, CR, BEL, DEL, C1), format characters
#: (bidi overrides and isolates, zero-width spaces and joiners, soft hyphen, tags), surrogates,
#: private use, unassigned code points, and the line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

#: Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties-14.0.0 (the Unicode of
#: Python 3.11's `unicodedata`), adjacent ranges merged. Characters that render as nothing.
IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # arabic letter mark
    (0x115F, 0x1160),  # hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # khmer inherent vowels
    (0x180B, 0x180F),  # mongolian free variation selectors, vowel separator
    (0x200B, 0x200F),  # zero width space, joiners, left-to-right and right-to-left marks
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero width no-break space
    (0xFFA0, 0xFFA0),  # halfwidth hangul filler
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE0FFF),  # tags, variation selectors 17-256, reserved
)

BLANK = frozenset({0x2800})  # braille pattern blank: a "letter" that draws nothing
MARKS = 4  # combining marks kept on one base: Hebrew cantillation fits, "Zalgo" text does not


class Reason(Enum):
    """Why a character is escaped."""

    HIDDEN = "hidden"  # its category, Default_Ignorable_Code_Point, or BLANK
    UNBASED = "unbased"  # a combining mark without a letter, digit or non-ASCII base
    STACKED = "stacked"  # a combining mark past MARKS on one base


def ignorable(code: int) -> bool:
    return any(low <= code <= high for low, high in IGNORABLE)


def variation_selector(code: int) -> bool:
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def reasons(text: str, *, newlines: bool = False) -> list[Reason | None]:
    """For each character of `text`, why it is escaped, or None when it is kept as it is."""
    found: list[Reason | None] = []
    base: str | None = None  # the character before, when it was kept (None: start, escape)
    marks = 0  # combining marks kept on the last base
    for char in text:
        reason = _reason(char, base, marks, newlines)
        found.append(reason)
        if reason is not None:
            base, marks = None, 0
        elif unicodedata.category(char) in ("Mn", "Me"):
            base, marks = char, marks + 1
        else:
            base, marks = char, 0
    return found


def _reason(char: str, before: str | None, marks: int, newlines: bool) -> Reason | None:
    if newlines and char in "\n\t":
        return None
    code = ord(char)
    category = unicodedata.category(char)
    if category in HIDDEN or code in BLANK:
        return Reason.HIDDEN
    if ignorable(code):
        right_after_a_base = before is not None and ord(before) >= 0x80 and marks == 0
        if variation_selector(code) and right_after_a_base:
            return None
        return Reason.HIDDEN
    if category in ("Mn", "Me"):
        if before is None or (ord(before) < 0x80 and not before.isalnum()):
            return Reason.UNBASED
        if marks >= MARKS:
            return Reason.STACKED
    return None


def escape(char: str) -> str:
    """`\\x1b`, `\\u202e` or `\\U000e0041`: the character's code, in ASCII."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str, *, newlines: bool = False) -> str:
    """`text` with every character the rule catches shown as an escape; newline and tab are
    kept only where `newlines` says, so by default the result is one line."""
    return "".join(
        char if reason is None else escape(char)
        for char, reason in zip(text, reasons(text, newlines=newlines), strict=True)
    )


# --- what the owner is told -----------------------------------------------------------------

#: The names the owner reads for the characters most used to hide or reorder text; the rest
#: are named by their kind (`kind`). The console's twin holds the same table.
NAMES: dict[int, str] = {
    0x00: "null",
    0x07: "bell",
    0x08: "backspace",
    0x09: "tab",
    0x0A: "line feed",
    0x0D: "carriage return",
    0x1B: "escape",
    0x7F: "delete",
    0x85: "next line",
    0x9B: "control sequence introducer",
    0xAD: "soft hyphen",
    0x034F: "combining grapheme joiner",
    0x061C: "arabic letter mark",
    0x115F: "hangul choseong filler",
    0x1160: "hangul jungseong filler",
    0x17B4: "khmer vowel inherent aq",
    0x17B5: "khmer vowel inherent aa",
    0x180B: "mongolian free variation selector one",
    0x180C: "mongolian free variation selector two",
    0x180D: "mongolian free variation selector three",
    0x180E: "mongolian vowel separator",
    0x180F: "mongolian free variation selector four",
    0x200B: "zero width space",
    0x200C: "zero width non-joiner",
    0x200D: "zero width joiner",
    0x200E: "left-to-right mark",
    0x200F: "right-to-left mark",
    0x2028: "line separator",
    0x2029: "paragraph separator",
    0x202A: "left-to-right embedding",
    0x202B: "right-to-left embedding",
    0x202C: "pop directional formatting",
    0x202D: "left-to-right override",
    0x202E: "right-to-left override",
    0x2060: "word joiner",
    0x2061: "function application",
    0x2062: "invisible times",
    0x2063: "invisible separator",
    0x2064: "invisible plus",
    0x2066: "left-to-right isolate",
    0x2067: "right-to-left isolate",
    0x2068: "first strong isolate",
    0x2069: "pop directional isolate",
    0x3164: "hangul filler",
    0xFEFF: "zero width no-break space",
    0xFFA0: "halfwidth hangul filler",
    0x2800: "braille pattern blank",
    0xE0001: "language tag",
    0xE007F: "cancel tag",
}

KINDS = {
    "Cc": "control character",
    "Cf": "format character",
    "Cs": "surrogate",
    "Co": "private-use character",
    "Cn": "unassigned code point",
}


def kind(char: str, reason: Reason) -> str:
    """What the owner is told of one escaped character: `right-to-left override (U+202E)`."""
    return f"{name(char, reason)} ({code_point(ord(char))})"


def code_point(code: int) -> str:
    return f"U+{code:04X}"


def name(char: str, reason: Reason) -> str:
    """The name of one escaped character: `right-to-left override`, `tag character`."""
    code = ord(char)
    category = unicodedata.category(char)
    if reason is Reason.UNBASED:
        return "combining mark without a base"
    if reason is Reason.STACKED:
        return f"combining mark past {MARKS} on one character"
    if code in NAMES:
        return NAMES[code]
    if 0xFE00 <= code <= 0xFE0F:
        return f"variation selector-{code - 0xFE00 + 1}"
    if 0xE0100 <= code <= 0xE01EF:
        return f"variation selector-{code - 0xE0100 + 17}"
    if 0xE0020 <= code <= 0xE007E:
        return "tag character"
    return KINDS.get(category, "invisible character")
