"""The console's twin of the rule (issue 23): `js/visible.js` and `js/shown.js`, run in real
Chromium (imported by the logged-in page), give exactly what `bxcore.visible` and
`bxcore.shown_arguments` give, over a table of hostile strings; and over every code point,
they differ only where the browser's newer Unicode knows a character Python's does not
(bxcore/visible.py's docstring says why that is the safe way round).

Strings travel to the page as lists of code points, so that a lone surrogate arrives whole.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from playwright.sync_api import Page

from bxcore.shown_arguments import shown_arguments, shown_text
from bxcore.visible import kind, reasons, visible

pytestmark = pytest.mark.browser

HOSTILE = [
    "ls . \u202e\u2066; rm -rf victim \u2069 \u2066#\u2069\u202c",  # the red team's
    *(f"bidi {chr(code)}x" for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]),
    *(f"zero {chr(code)}width" for code in range(0x200B, 0x2010)),
    "word\u2060joiner \ufeffbom soft\u00adhyphen line\u2028sep para\u2029sep",
    "\x1b[2J\x1b]0;t\x07 \r\x7f \x85\x9b \x00",
    "a\nb\tc",
    "\U000e0049\U000e0047\U000e004e\U000e0001\U000e007f",  # tags: ASCII smuggling
    ";\u0338 #\u20e0 '\u0335' \u0301start",  # marks disguising punctuation
    "cafe\u0301 e\u0301\u0302\u0303\u0304\u0305\u0306 1\u20e3 #\u20e3 1\ufe0f\u20e3",
    "\u26a0\ufe0f \u26a0\ufe0f\ufe0f \u845b\U000e0100 a\ufe0f \ufe0f \u202e\ufe0f",
    "\u115f\u1160\u3164\uffa0 \u034f \u17b4\u17b5 \u180b\u180c\u180d\u180e\u180f \u2800",
    "\u200d\u200c \U0001f468\u200d\U0001f469 \u061c \u2061\u2062\u2063\u2064 \u206a\u206f",
    "\ue000 \U000f0000 \u0378 \uffff \ufffe \U0001bca0 \U0001d173",
    "\ud800 \udfff \ud83d",  # lone surrogates
    "\u05e9\u05c1\u05b8\u0591 \u0915\u093f\u0928\u094d \u00e9\u0301",
    "echo cleaning-cache" + " " * 400 + "; echo x > padded.txt",
    "a" + "\u00a0" * 20 + "b\u3000" + "\t" * 20 + "c",
    "⟨400 spaces⟩ is not a marker",
    'quote " backslash \\ literal \\u202e',
]

RUN_TWIN = """async ([texts]) => {
  const rule = await import("/static/js/visible.js");
  const card = await import("/static/js/shown.js");
  return texts.map((points) => {
    const text = String.fromCodePoint(...points);
    const chars = Array.from(text);
    const why = rule.reasons(text);
    const args = card.shownArguments(JSON.stringify({ s: text }));
    const plain = card.shownText(text);
    return {
      line: rule.visible(text),
      lines: rule.visible(text, true),
      kinds: chars.flatMap((c, i) => (why[i] === null ? [] : [rule.kind(c, why[i])])),
      args: args.pieces.map((p) => p.text).join(""),
      words: card.warnings(args),
      plain: plain.pieces.map((p) => p.text).join(""),
      plainWords: card.warnings(plain, "The difference holds"),
    };
  });
}"""


def in_python(text: str) -> dict[str, Any]:
    args = shown_arguments(json.dumps({"s": text}, ensure_ascii=False))
    plain = shown_text(text)
    return {
        "line": visible(text),
        "lines": visible(text, newlines=True),
        "kinds": [kind(c, r) for c, r in zip(text, reasons(text), strict=True) if r is not None],
        "args": args.text,
        "words": args.warnings(),
        "plain": plain.text,
        "plainWords": plain.warnings("The difference holds"),
    }


def test_the_twin_gives_exactly_what_bxcore_gives_for_each_hostile_string(page: Page) -> None:
    found = page.evaluate(RUN_TWIN, [[[ord(c) for c in text] for text in HOSTILE]])
    for text, twin in zip(HOSTILE, found, strict=True):
        assert twin == in_python(text), ascii(text)


# --- every code point -----------------------------------------------------------------------

#: Characters whose category changed after Unicode 14.0 (Python 3.11's) in a way the rule sees.
CHANGED = {0x1171E: "AHOM CONSONANT SIGN MEDIAL RA: Mn in 14.0, Mc from 15.0"}
CONTEXTS = ["", "a", "\u00e9"]  # at the start (or after an escape), after ASCII, after non-ASCII
SWEPT = [
    *range(0x20000),  # planes 0 and 1: every script, symbol, emoji and format character
    *range(0x20000, 0x40000, 7),  # planes 2 and 3: ideographs only, a sample
    *range(0xE0000, 0xE1000),  # tags, selectors
    *range(0xF0000, 0xF0100),  # private use
    *range(0x10FF00, 0x110000),
]

SWEEP = """async ([context, first, count, more]) => {
  const rule = await import("/static/js/visible.js");
  const points = [];
  for (let cp = first; cp < first + count; cp++) points.push(cp);
  points.push(...more);
  const n = Array.from(context).length;
  const parts = points.map((cp) => context + String.fromCodePoint(cp) + "\\x00");
  const why = rule.reasons(parts.join(""), true);
  return points.map((cp, i) => why[i * (n + 2) + n]);
}"""


@pytest.mark.parametrize("context", CONTEXTS, ids=["start", "after-ascii", "after-non-ascii"])
def test_the_twin_and_bxcore_differ_only_where_the_browsers_unicode_is_newer(
    page: Page, context: str
) -> None:
    # A NUL after each one: escaped, so the next starts afresh, as at the start.
    twin = page.evaluate(SWEEP, [context, 0, 0x20000, SWEPT[0x20000:]])
    text = "".join(context + chr(code) + "\x00" for code in SWEPT)
    here = reasons(text, newlines=True)[len(context) :: len(context) + 2]
    stricter_here = []
    for code, ours, theirs in zip(SWEPT, here, twin, strict=True):
        ours_value = None if ours is None else ours.value
        if ours_value == theirs:
            continue
        assigned = unicodedata.category(chr(code)) != "Cn"
        assert not (assigned and code not in CHANGED), (hex(code), ours_value, theirs)
        assert ours is not None, f"{code:#x}: the browser escapes what bxctl would not"
        stricter_here.append(code)
    # Unicode 15 and 16 added thousands of characters; a browser that knows none is suspect.
    assert len(stricter_here) > 1000
