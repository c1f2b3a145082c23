"""The tools, described once as data (SPEC §4.5).

`services.brokerd.core.args` parses by these descriptions, `policy` matches and labels by them, the
courier confines by them, and loopd builds the model's JSON Schemas from them. Nothing here
assumes there are exactly five tools. Pure: no I/O.
"""

from __future__ import annotations

import enum

from bxcore.frozen import frozen
from bxcore.roles import Role


class ToolName(enum.StrEnum):
    """The tools brokerd decides. Any other name is `unknown_tool` (§4.1)."""

    READ_FILE = "read_file"
    WRITE_FILE = "write_file"
    SHELL = "shell"
    HTTP_FETCH = "http_fetch"
    MEMORY = "memory"


class Kind(enum.StrEnum):
    """What an argument field holds, and so how it is checked (§4.2)."""

    TEXT = "text"  # never inspected
    PATH = "path"  # must pass valid_path
    URL = "url"  # must give a host from url_host
    INT = "int"  # a JSON integer that fits in 64 signed bits


class Match(enum.StrEnum):
    """What a grant of this tool is matched against (§5.3)."""

    PATH = "path"  # inside(grant.path, args.path)
    CWD = "cwd"  # inside(grant.path, args.cwd or "/")
    HOST = "host"  # host_matches(grant.host, args.host)
    ALWAYS = "always"


class Result(enum.StrEnum):
    """Which label a result carries (§5.5)."""

    WINNER = "winner"  # the winning grant's class and untrusted flag
    FETCHED = "fetched"  # public, untrusted unless the winner says untrusted = false
    CLEAN = "clean"  # public and trusted: nothing is read
    RUNNER = "runner"  # the runner reports it (memory recall: the notes' join)


class Runner(enum.StrEnum):
    SANDBOX = "sandbox"
    MEMORYD = "memoryd"
    LOOPD = "loopd"


class Mount(enum.StrEnum):
    """What of the host a sandboxed tool sees (§8.2)."""

    NONE = "none"
    READ_ONLY = "read_only"  # the winner's path, read-only
    READ_WRITE = "read_write"  # the winner's path, read-write
    WORKDIR = "workdir"  # the winner's path, read-write, the working folder's root
    PROXY = "proxy"  # only the fetch proxy's socket


@frozen
class Field:
    name: str
    kind: Kind
    description: str
    optional: bool = False
    role: Role = Role.TARGET  # what it is to a consequential call (§20); unset: a target


@frozen
class Variant:
    """One value of a tagged tool's tag field, with the fields that value takes."""

    name: str
    fields: tuple[Field, ...]
    description: str
    # changes what the owner keeps without being a sink (no flow check): from an untrusted
    # session the owner approves it, as a sink's call (I5; memory `forget`, issue 14)
    consequential: bool = False


@frozen
class ToolSpec:
    name: str
    description: str  # one line that tells the model how to succeed
    fields: tuple[Field, ...] = ()
    tag: str | None = None  # the tag field of a tool whose arguments are variants
    variants: tuple[Variant, ...] = ()
    sink: bool = False  # writes or sends: the flow check (I4) and untrusted check (I5) apply
    match: Match = Match.ALWAYS
    result: Result = Result.CLEAN
    runner: Runner = Runner.SANDBOX
    mount: Mount = Mount.NONE

    def consequential(self, variant: str | None) -> bool:
        """Whether an untrusted session needs the owner for this call (I5, §5.2 step 7): every
        call of a sink, and a call of a variant that changes what the owner keeps."""
        return self.sink or any(v.name == variant and v.consequential for v in self.variants)

    @property
    def grant_key(self) -> str | None:
        """The key a grant of this tool must name: `path`, `host`, or none."""
        if self.match in (Match.PATH, Match.CWD):
            return "path"
        if self.match is Match.HOST:
            return "host"
        return None


_PATH_HELP = "An absolute path, like /home/me/notes/a.md: no `.`, `..`, `//` or trailing `/`."

BROKERED: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name=ToolName.READ_FILE,
            description="Read a UTF-8 text file of at most 1 MiB; give its absolute path.",
            fields=(Field("path", Kind.PATH, _PATH_HELP),),
            match=Match.PATH,
            result=Result.WINNER,
            mount=Mount.READ_ONLY,
        ),
        ToolSpec(
            name=ToolName.WRITE_FILE,
            description=(
                "Write text to a file, replacing it; give its absolute path in a folder that "
                "exists."
            ),
            fields=(
                Field("path", Kind.PATH, _PATH_HELP),
                Field(
                    "content", Kind.TEXT, "The whole new content of the file.", role=Role.CONTENT
                ),
            ),
            sink=True,
            match=Match.PATH,
            result=Result.CLEAN,
            mount=Mount.READ_WRITE,
        ),
        ToolSpec(
            name=ToolName.SHELL,
            description=(
                "Run a /bin/sh command without network; set cwd to the absolute folder to work in."
            ),
            fields=(
                Field("command", Kind.TEXT, "The command line for /bin/sh -c.", role=Role.CODE),
                Field("cwd", Kind.PATH, "The absolute folder to run in. " + _PATH_HELP, True),
            ),
            sink=True,
            match=Match.CWD,
            result=Result.WINNER,
            mount=Mount.WORKDIR,
        ),
        ToolSpec(
            name=ToolName.HTTP_FETCH,
            description=(
                "GET one web page by an https:// URL naming its host; redirects are reported, "
                "not followed."
            ),
            fields=(Field("url", Kind.URL, "Like https://en.wikipedia.org/wiki/Bee: https only."),),
            sink=True,
            match=Match.HOST,
            result=Result.FETCHED,
            mount=Mount.PROXY,
        ),
        ToolSpec(
            name=ToolName.MEMORY,
            description=(
                "Keep notes across conversations: note a text, recall by words, forget by id."
            ),
            tag="action",
            variants=(
                Variant(
                    "note",
                    (Field("text", Kind.TEXT, "What to remember.", role=Role.CONTENT),),
                    "Keep a note.",
                ),
                Variant(
                    "recall",
                    (
                        Field(
                            "query", Kind.TEXT, "Words to search the notes for.", role=Role.CONTENT
                        ),
                    ),
                    "Find up to 10 notes.",
                ),
                Variant(
                    "forget",
                    (Field("id", Kind.INT, "The number of the note, as recall shows it."),),
                    "Delete one note.",
                    consequential=True,
                ),
            ),
            result=Result.RUNNER,
            runner=Runner.MEMORYD,
        ),
    )
}

#: Sub-agents: run by loopd alone; brokerd never sees this tool (§10.5).
SPAWN = ToolSpec(
    name="spawn",
    description="Hand a self-contained task to a sub-agent; its final answer is the result.",
    fields=(Field("task", Kind.TEXT, "Everything the sub-agent needs to know to do the task."),),
    runner=Runner.LOOPD,
)
