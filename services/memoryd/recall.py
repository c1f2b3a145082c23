"""What a recall searches for and what it answers (SPEC §11), pure: the FTS5 expression a query
becomes (only plain words), the notes as the model reads them (`#{id} {text}`, cut at
`MAX_OUTPUT`), and the label the answer carries: the join of every note searched. Also `Answer`,
what every memory action answers. No I/O, no SQL run: the store does that.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bxcore.labels import DataClass, Label

MAX_OUTPUT = 1024 * 1024  # bytes of UTF-8, as the toolkit cuts its output (§8.2)
MAX_QUERY_WORDS = 64  # more words than this in a query are ignored
INDENT = "  "  # a note's second and later lines start with it: only a note starts with `#`

_WORD = re.compile(r"[^\W_]+")  # letters and digits: what FTS5's unicode61 keeps as a token


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model reads (`output`, `ok`) and the label the output carries."""

    ok: bool
    output: str
    label: Label


def match_expression(query: str) -> str | None:
    """An FTS5 expression that finds notes holding any word of `query`, or None when it has
    none. Each word is quoted, so no FTS5 syntax in the query (`"`, `*`, `NEAR(`, `AND`, `:`)
    is ever read as such: it is plain words or nothing."""
    words = list(dict.fromkeys(_WORD.findall(query)))[:MAX_QUERY_WORDS]
    if not words:
        return None
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)


def render_note(note_id: int, text: str) -> str:
    """`#{id} {text}`; a line break inside the text starts a line indented by `INDENT`, so a
    note's text can never pose as another note."""
    lines = text.splitlines() or [""]
    return f"#{note_id} " + "\n".join([lines[0], *(INDENT + line for line in lines[1:])])


def store_label(secret: bool, private: bool, untrusted: bool) -> Label:
    """The join of every note's label, from whether any note is secret, private, untrusted.
    An empty store is public and trusted."""
    class_ = DataClass.SECRET if secret else DataClass.PRIVATE if private else DataClass.PUBLIC
    return Label(class_, untrusted)


def render_recall(notes: Sequence[tuple[int, str, Label]], searched: Label) -> Answer:
    """The answer to a recall of `notes` (id, text, label), best first, among notes whose
    labels join to `searched`. The label is `searched` joined with every note given, shown or
    cut, whatever matched: that nothing matched says something about the notes that did not.
    The output stops at `MAX_OUTPUT` bytes and says so."""
    if not notes:
        return Answer(True, "no notes match", searched)
    label = searched
    for _, _, each in notes:
        label = label.join(each)
    kept: list[str] = []
    room = MAX_OUTPUT
    for shown, (note_id, text, _) in enumerate(notes):
        line = render_note(note_id, text)
        size = len(line.encode("utf-8")) + (1 if kept else 0)
        if size <= room:
            kept.append(line)
            room -= size
            continue
        cut = line.encode("utf-8")[: max(room - 1, 0)].decode("utf-8", "ignore")
        if cut:
            kept.append(cut)
        left = len(notes) - shown - (1 if cut else 0)
        kept.append(f"[output cut at {MAX_OUTPUT} bytes; {left} more notes not shown]")
        break
    return Answer(True, "\n".join(kept), label)
