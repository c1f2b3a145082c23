"""What a tool run ends with: an exit code, what the model reads, and what the broker reads.

0 done, 1 the tool failed for a reason the model should read, 2 misuse (stdout stays empty,
one line on stderr). Every tool function returns an `Outcome`; only `__main__` prints it.
Imported on every run: standard library only, nothing heavy (no dataclasses, no typing).
"""

DONE = 0
TOOL_ERROR = 1
MISUSE = 2


class Outcome:
    """The result of one tool run; compare with `==` in tests."""

    __slots__ = ("exit", "stderr", "stdout")

    def __init__(self, exit: int, stdout: str, stderr: str) -> None:
        self.exit = exit
        self.stdout = stdout
        self.stderr = stderr

    @classmethod
    def done(cls, stdout: str) -> "Outcome":
        return cls(DONE, stdout, "")

    @classmethod
    def tool_error(cls, stdout: str) -> "Outcome":
        return cls(TOOL_ERROR, stdout, "")

    @classmethod
    def misuse(cls, stderr: str) -> "Outcome":
        """Run wrongly: the model sees nothing, the broker reads `stderr` (one line)."""
        return cls(MISUSE, "", stderr)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outcome):
            return NotImplemented
        return (self.exit, self.stdout, self.stderr) == (other.exit, other.stdout, other.stderr)

    def __hash__(self) -> int:
        return hash((self.exit, self.stdout, self.stderr))

    def __repr__(self) -> str:
        return f"Outcome(exit={self.exit}, stdout={self.stdout!r:.200}, stderr={self.stderr!r})"
