"""The one way to show a string that came from the model, a tool or a file (SPEC §9.1, §12.2,
§13): every control and format character made visible as an escape, so the text cannot move a
cursor, clear a screen, set a title, hide itself or reorder what the owner reads.

Pure: no I/O. It does not escape markup (`[bold]`, `<b>`): every view shows its result as
text, never as markup (bxctl's `output` through rich `Text`, the console as DOM text).
"""

from __future__ import annotations

import unicodedata

#: Unicode categories shown as escapes: controls (ESC, CR, BEL, DEL, C1), format characters
#: (bidi overrides and isolates, zero-width spaces and joiners), surrogates, private use, and
#: the line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def visible(text: str, *, newlines: bool = False) -> str:
    """`text` with every control and format character shown as an escape (`\\x1b`,
    `\\u202e`); newline and tab are kept only where `newlines` says, so by default the result
    is one line."""
    out: list[str] = []
    for char in text:
        if newlines and char in "\n\t":
            out.append(char)
        elif unicodedata.category(char) in HIDDEN:
            code = ord(char)
            out.append(
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
        else:
            out.append(char)
    return "".join(out)
