"""Reading back what `bxcore.shown_arguments` drew: the JSON text of the value the owner was
shown, from the card's text (a test's proof that the card loses nothing and that what runs is
exactly what was shown). Inside strings the card's escapes are JSON's own (`\\"`, `\\\\`, `\\n`,
`\\t`, `\\uHHHH`) or the rule's (`\\xHH`, `\\UHHHHHHHH`), and a marker (`⟨400 spaces⟩`) stands for
its run; outside strings the text is JSON as it is.
"""

from __future__ import annotations

import json
import re

MARKER = re.compile(r"⟨(\d+) (?:(spaces)|(tabs)|× U\+([0-9A-F]{4,6}))⟩")


def as_json(shown: str) -> str:
    """The JSON text of what `shown` (a card's arguments, drawn as JSON) shows."""
    out: list[str] = []
    index, inside = 0, False
    while index < len(shown):
        char = shown[index]
        if not inside:
            inside = char == '"'
            out.append(char)
            index += 1
        elif char == '"':
            inside = False
            out.append(char)
            index += 1
        elif char == "\\":
            index = _escape(shown, index, out)
        elif (found := MARKER.match(shown, index)) is not None:
            out.append(json.dumps(_run(found) * int(found.group(1)))[1:-1])
            index = found.end()
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _escape(shown: str, index: int, out: list[str]) -> int:
    code = shown[index + 1]
    if code in '"\\nt':
        out.append(shown[index : index + 2])
        return index + 2
    if code == "x":
        out.append("\\u00" + shown[index + 2 : index + 4])
        return index + 4
    if code == "u":
        out.append(shown[index : index + 6])
        return index + 6
    if code == "U":
        out.append(json.dumps(chr(int(shown[index + 2 : index + 10], 16)))[1:-1])
        return index + 10
    raise ValueError(f"not an escape the card draws: {shown[index : index + 2]!r}")


def _run(found: re.Match[str]) -> str:
    if found.group(2):
        return " "
    if found.group(3):
        return "\t"
    return chr(int(found.group(4), 16))


def unescaped(shown: str) -> str:
    """Plain text as `bxcore.visible` showed it, read back (it must hold no backslash of its
    own: there a literal `\\u202e` and an escaped one read the same)."""
    return re.sub(
        r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})|\\U([0-9a-f]{8})",
        lambda m: chr(int(m.group(1) or m.group(2) or m.group(3), 16)),
        shown,
    )
