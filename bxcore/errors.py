"""Foreign exceptions as the one line an owner reads (SPEC §1 I7: every refusal says why)."""

from __future__ import annotations


def one_line(error: BaseException) -> str:
    """`error` as one line: an OSError names its file and cause; anything else its text."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        text = f"{where}{error.strerror}"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())
