"""A tool call's arguments as the owner reads them on a card (SPEC §9.1, §12.2, §13, §21.3):
the parsed JSON drawn again by our own walker, keys and structure as pretty JSON, every key and
string value through `bxcore.visible`, a long run of one white-space character as a marker with
its length (`⟨400 spaces⟩`), and the words that name what was escaped or marked. `bxctl pending`
and `bxctl chat` print it; the console's `js/shown.js` is its twin (the page also cuts a very
long value behind "Show all"); the phone channel is to reuse it.

Pure: no I/O. Nothing is lost: inside a string, `\\"`, `\\\\`, `\\n` and `\\t` are JSON's own
escapes, the rule's are `\\xHH`, `\\uHHHH` and `\\UHHHHHHHH`, a literal `⟨` is escaped so that
no value can draw a marker of its own, and numbers are shown as written. Reading those back
gives exactly the value (tests/support/shown.py).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import NamedTuple

from bxcore import strict_json
from bxcore.strict_json import Number, Pairs
from bxcore.visible import code_point, escape, name, reasons

RUN = 16  # identical white-space characters in a row shown as one marker
MOST_DEPTH = 64  # deeper JSON is shown as the text it is
MOST_NAMED = 8  # code points (or markers) listed under one name; the rest counted
BRACKET = "\u27e8"  # ⟨, which opens a marker
BRACKET_WHY = "markers begin with it"
QUOTED = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}


class Piece(NamedTuple):
    text: str
    what: str  # "text", "escape" (the rule's, or the bracket's) or "marker"


@dataclass(frozen=True, slots=True)
class Shown:
    """What the owner reads, in pieces (a view may style escapes and markers), and what was
    found: each escaped character's kind and each marker, once, in the order first seen."""

    pieces: tuple[Piece, ...]
    escaped: tuple[tuple[str, int], ...] = ()  # e.g. ("right-to-left override", 0x202E)
    markers: tuple[str, ...] = ()  # e.g. "⟨400 spaces⟩"
    bracket: bool = False  # a literal ⟨ was escaped

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)

    def lines(self) -> list[str]:
        return self.text.split("\n")

    def warnings(self, subject: str = "These arguments hold") -> list[str]:
        """The words a card says before its buttons, one sentence for each thing found."""
        said = []
        if self.escaped:
            said.append(
                f"{subject} characters that change or hide how text is drawn, shown escaped: "
                f"{_named(self.escaped)}."
            )
        if self.markers:
            said.append(
                f"{subject} long runs of white space, each shown as a marker with its length: "
                f"{_listed(list(self.markers))}."
            )
        if self.bracket:
            said.append(f"{subject} the character ⟨ (U+27E8), shown escaped: {BRACKET_WHY}.")
        return said


def _listed(names: list[str]) -> str:
    more = len(names) - MOST_NAMED
    return ", ".join(names[:MOST_NAMED]) + (f", and {more} more" if more > 0 else "")


def _named(escaped: tuple[tuple[str, int], ...]) -> str:
    """Every kind by its name, each with its code points: `tag character (U+E0041, U+E0042)`."""
    codes: dict[str, list[str]] = {}
    for named, code in escaped:
        codes.setdefault(named, []).append(code_point(code))
    return ", ".join(f"{named} ({_listed(points)})" for named, points in codes.items())


def marker(char: str, count: int) -> str:
    """`⟨400 spaces⟩`, `⟨20 tabs⟩`, `⟨16 × U+00A0⟩`."""
    if char == " ":
        return f"⟨{count} spaces⟩"
    if char == "\t":
        return f"⟨{count} tabs⟩"
    return f"⟨{count} × U+{ord(char):04X}⟩"


def shown_arguments(arguments: str, *, indent: int | None = 2) -> Shown:
    """`arguments` (a JSON text) drawn as pretty JSON (`indent`; None: on one line), or as
    plain text when it is not JSON (a model's broken arguments)."""
    value = _parse(arguments)
    if value is _NOT_JSON:
        return shown_text(arguments)
    drawing = _Drawing()
    drawing.value(value, indent, 0)
    return drawing.shown()


def shown_text(text: str) -> Shown:
    """Plain text (a diff, arguments that are not JSON) under the same rules, newlines kept."""
    drawing = _Drawing()
    drawing.string(text, quoted=False)
    return drawing.shown()


# --- parsing, keeping what JSON's own loader forgets ------------------------------------------


_NOT_JSON = object()
_DECODER = strict_json.Decoder(pairs=True, as_written=True, max_depth=MOST_DEPTH)


def _parse(text: str) -> object:
    try:
        return _DECODER.loads(text)
    except strict_json.StrictJsonError:
        return _NOT_JSON


# --- drawing --------------------------------------------------------------------------------


@dataclass
class _Drawing:
    pieces: list[Piece] = field(default_factory=list)
    escaped: dict[tuple[str, int], None] = field(default_factory=dict)
    markers: dict[str, None] = field(default_factory=dict)
    bracket: bool = False

    def shown(self) -> Shown:
        return Shown(tuple(self.pieces), tuple(self.escaped), tuple(self.markers), self.bracket)

    def add(self, text: str, what: str = "text") -> None:
        if what == "text" and self.pieces and self.pieces[-1].what == "text":
            self.pieces[-1] = Piece(self.pieces[-1].text + text, "text")
        elif text:
            self.pieces.append(Piece(text, what))

    def value(self, value: object, indent: int | None, level: int) -> None:
        if isinstance(value, Pairs):
            self.members([(key, item) for key, item in value], "{", "}", indent, level)
        elif isinstance(value, list):
            self.members([(None, item) for item in value], "[", "]", indent, level)
        elif isinstance(value, str) and not isinstance(value, Number):
            self.string(value, quoted=True)
        elif value is None:
            self.add("null")
        elif isinstance(value, bool):
            self.add("true" if value else "false")
        else:
            self.add(str(value))

    def members(
        self,
        items: list[tuple[str | None, object]],
        opening: str,
        closing: str,
        indent: int | None,
        level: int,
    ) -> None:
        self.add(opening)
        for index, (key, item) in enumerate(items):
            if indent is None:
                self.add(", " if index else "")
            else:
                self.add(("," if index else "") + "\n" + " " * (indent * (level + 1)))
            if key is not None:
                self.string(key, quoted=True)
                self.add(": ")
            self.value(item, indent, level + 1)
        if items and indent is not None:
            self.add("\n" + " " * (indent * level))
        self.add(closing)

    def string(self, text: str, *, quoted: bool) -> None:
        """`text` through the rule: quoted, a JSON string's body; else plain text."""
        if quoted:
            self.add('"')
        why = reasons(text, newlines=True)
        index = 0
        while index < len(text):
            char, reason = text[index], why[index]
            if reason is not None:
                self.escaped[name(char, reason), ord(char)] = None
                self.add(escape(char), "escape")
            elif char == BRACKET:
                self.bracket = True
                self.add(escape(char), "escape")
            elif unicodedata.category(char) == "Zs" or (char == "\t" and not quoted):
                end = index
                while end < len(text) and text[end] == char:
                    end += 1
                if end - index >= RUN:
                    shown = marker(char, end - index)
                    self.markers[shown] = None
                    self.add(shown, "marker")
                else:
                    self.add(char * (end - index))
                index = end
                continue
            else:
                self.add(QUOTED.get(char, char) if quoted else char)
            index += 1
        if quoted:
            self.add('"')
