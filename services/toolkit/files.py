"""`read_file` and `write_file` (SPEC §8.3): every exit, worded for the model.

They never create a folder and never read more than 1 MiB + 1 bytes. `read_file` is the hot
path: it uses only built-in `open` (not even `os`), so that it starts as fast as Python can.
"""

from .outcome import Outcome

MAX_READ = 1024 * 1024


def read_file(path: str) -> Outcome:
    """The file's text exactly, or `read_file: {path}: {why}` (exit 1)."""
    try:
        # Built-in `open` fails on a folder (it checks with fstat), on a missing file and on
        # every other metadata error with the same errno that `stat` would give.
        with open(path, "rb") as file:
            data = file.read(MAX_READ + 1)
    except FileNotFoundError:
        return _read_failed(path, "no such file")
    except IsADirectoryError:
        return _read_failed(path, "is a directory")
    except OSError as error:
        return _read_failed(path, _why(error))
    except ValueError as error:  # an embedded NUL: the broker never sends one
        return _read_failed(path, str(error))
    if len(data) > MAX_READ:
        return _read_failed(path, f"larger than {MAX_READ} bytes")
    try:
        return Outcome.done(data.decode("utf-8"))
    except UnicodeDecodeError:
        return _read_failed(path, "not UTF-8 text")


def write_file(path: str, content: str) -> Outcome:
    """Replace the file with `content`: `wrote {n} bytes to {path}`, or
    `write_file: {path}: {why}` (exit 1). The parent must already be a folder."""
    import os.path

    data = content.encode("utf-8")
    parent = os.path.dirname(path) or "."
    try:
        if not os.path.isdir(parent):
            return _write_failed(path, "the directory does not exist")
        if os.path.isdir(path):
            return _write_failed(path, "is a directory")
        with open(path, "wb") as file:
            file.write(data)
    except IsADirectoryError:
        return _write_failed(path, "is a directory")
    except OSError as error:
        return _write_failed(path, _why(error))
    except ValueError as error:  # an embedded NUL: the broker never sends one
        return _write_failed(path, str(error))
    return Outcome.done(f"wrote {len(data)} bytes to {path}")


def _why(error: OSError) -> str:
    return error.strerror or str(error)


def _read_failed(path: str, why: str) -> Outcome:
    return Outcome.tool_error(f"read_file: {path}: {why}")


def _write_failed(path: str, why: str) -> Outcome:
    return Outcome.tool_error(f"write_file: {path}: {why}")
