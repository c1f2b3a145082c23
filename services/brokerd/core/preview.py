"""What a `write_file` would change (SPEC §12.2): a unified diff between the file as it is and
the content that would replace it, for the owner's approval card (`ApprovalInfo.preview`).

Pure: no I/O. The shell (`services.brokerd.preview_file`) reads the old file, at most
`MAX_OLD + 1` bytes of it, without following a link; this module only compares. A preview is
text: a view shows it through `bxcore.visible`, never as markup.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator

from bxcore.wire.messages import MAX_PREVIEW

MAX_OLD = 1024 * 1024  # bytes of the old file compared; a larger one is only described
NO_NEWLINE = "\\ No newline at end of file\n"


def write_preview(path: str, old: bytes | None, new: str, limit: int = MAX_PREVIEW) -> str:
    """The difference between `old` (the file's bytes now; None: there is no file) and `new`
    (what `write_file` would write, replacing it), at most `limit` bytes of UTF-8: a diff cut
    short ends with a line saying how much was cut. Old content of more than `MAX_OLD` bytes,
    or that is not UTF-8 text, is described in a line instead of compared."""
    name = path.lstrip("/")
    size = len(new.encode("utf-8", "replace"))
    if old is not None and len(old) > MAX_OLD:
        return (
            f"{path} holds more than {MAX_OLD:,} bytes now: no difference is shown; "
            f"it would be replaced by {size:,} bytes\n"
        )
    note = ""
    before = ""
    if old is not None:
        try:
            before = old.decode("utf-8")
        except UnicodeDecodeError:
            note = (
                f"{path} holds {len(old):,} bytes now that are not UTF-8 text: "
                "all of them would be replaced\n"
            )
    if old is None and not new:
        return f"{path} does not exist: it would be made, empty\n"
    if old is not None and not note and before == new:
        return f"{path} already holds exactly this content ({size:,} bytes): nothing changes\n"
    diff = difflib.unified_diff(
        lines_of(before),
        lines_of(new),
        "/dev/null" if old is None else f"a/{name}",
        f"b/{name}",
    )
    return _cut([note] if note else [], _marked(diff), limit)


def lines_of(text: str) -> list[str]:
    """`text` in lines, each with its `\\n` but the last when the text has none at its end.
    Only `\\n` ends a line, as in the file (`str.splitlines` would also split at `\\r`,
    `\\x0c` and others)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _marked(diff: Iterable[str]) -> Iterator[str]:
    """The diff's lines, each ending in `\\n`; a line that had none is followed by git's
    `\\ No newline at end of file`."""
    for line in diff:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n"
            yield NO_NEWLINE


def _cut(head: list[str], diff: Iterable[str], limit: int) -> str:
    """`head` and the diff's lines joined, at most `limit` bytes of UTF-8: what fits, cut on a
    character's edge, then a line saying how many bytes were left out (room is kept for it)."""
    text = "".join([*head, *diff]).encode("utf-8", "replace")
    if len(text) <= limit:
        return text.decode("utf-8")
    room = max(0, limit - len(_cut_line(len(text)).encode()))  # the cut line is never longer
    kept = text[:room].decode("utf-8", "ignore")
    if kept and not kept.endswith("\n"):
        kept = kept[:-1]  # room for the newline that ends the cut line's line
        return f"{kept}\n{_cut_line(len(text) - len(kept.encode()))}"
    return kept + _cut_line(len(text) - len(kept.encode()))


def _cut_line(left: int) -> str:
    return f"[… the difference is cut here: {left:,} more bytes are not shown]\n"
