"""`bxctl backup FILE` and `bxctl restore FILE` (docs/backup.md): the home into one archive while
the box runs, and that archive, checked whole, into a new home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bxcore.errors import one_line
from bxcore.home.layout import Home, HomeError
from bxctl.backup import BackupFailed, make_backup
from bxctl.backup_archive import LEDGER, ArchiveRefused, Manifest
from bxctl.output import fail, invocation, print_json, say
from bxctl.restore import restore_backup
from services.brokerd.core.args import inside
from services.brokerd.face import read_folder

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
ArchiveArgument = Annotated[Path, typer.Argument(metavar="FILE", help="The archive (.tar.gz).")]


def register(app: typer.Typer) -> None:
    app.command()(backup)
    app.command()(restore)


def backup(
    ctx: typer.Context,
    archive: ArchiveArgument,
    with_secrets: Annotated[
        bool,
        typer.Option(
            "--with-secrets",
            help="Also take keys/: the CURVE key pairs and the console's owner token.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Back the home up into FILE (a new file), consistent while the box runs: config, grants,
    jobs, MCP pins, notes, the ledger to its confirmed head with the witness, histories and
    labels. Never the keys or the console token unless --with-secrets."""
    home: Home = ctx.obj.home
    try:
        made = make_backup(home, archive.absolute(), secrets=with_secrets)
    except BackupFailed as error:
        fail(str(error))
    manifest = made.manifest
    if as_json:
        print_json({**_summary(manifest), "archive": str(made.path), "notes": made.notes})
        return
    say(f"backed up {home.root} into {made.path}", style="green")
    say(f"  {_contents(manifest)}, {_counted(made.notes, 'note')}")
    say(f"  {_head(manifest)}")
    if not with_secrets:
        say("  keys and console token left out (--with-secrets takes them)")


def restore(ctx: typer.Context, archive: ArchiveArgument, as_json: JsonOption = False) -> None:
    """Restore FILE, made by `bxctl backup`, into the home (new or empty): the whole archive is
    checked first (every file against its manifest, the ledger's chain against its head), and
    a damaged or tampered archive is refused with nothing written."""
    home: Home = ctx.obj.home
    if not archive.is_file():
        fail(f"no archive {archive}", 2)
    try:
        restored = restore_backup(archive, home)
    except (ArchiveRefused, HomeError) as error:
        fail(f"refused: {error}")
    except OSError as error:
        fail(f"cannot restore into {home.root}: {one_line(error)}")
    manifest = restored.manifest
    if as_json:
        print_json({**_summary(manifest), "home": str(home.root), "made": restored.made})
        return
    say(f"restored {archive} into {home.root}", style="green")
    say(f"  {_contents(manifest)}")
    say(f"  {_head(manifest)}, the chain checked to it")
    if not manifest.secrets:
        say("  new keys and console token made: the archive holds none")
    old = _old_home_grants(home, manifest)
    if old:
        say(
            f"  grants naming the home it was made of ({manifest.home}), kept as they were: "
            f"{', '.join(old)}; this home's workspace is {home.workspace}",
            style="yellow",
        )
    bxctl = f"{invocation()} --home {home.root}"
    say(f"next: `{bxctl} audit verify`, then `{bxctl} up`")


def _old_home_grants(home: Home, manifest: Manifest) -> list[str]:
    """The restored grants whose path lies in the home the archive was made of, when that is
    not this one (a restore elsewhere keeps every grant as it was)."""
    if manifest.home == str(home.root):
        return []
    grants = read_folder(home.grants).valid
    return sorted(g.id for g in grants if g.path is not None and inside(manifest.home, g.path))


def _summary(manifest: Manifest) -> dict[str, object]:
    return {
        "made_at": manifest.made,
        "head": {"seq": manifest.head.head.seq, "hash": manifest.head.head.hash},
        "secrets": manifest.secrets,
        "files": sorted(manifest.files),
    }


def _contents(manifest: Manifest) -> str:
    def count(folder: str) -> int:
        return sum(1 for name in manifest.files if name.startswith(f"{folder}/"))

    sessions = sum(1 for n in manifest.files if n.endswith(".jsonl") and n != LEDGER)
    return (
        f"{_counted(count('grants'), 'grant')}, {_counted(count('jobs'), 'job')}, "
        f"{_counted(sessions, 'session')}, the pins of {_counted(count('mcp'), 'MCP server')}"
    )


def _counted(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _head(manifest: Manifest) -> str:
    head = manifest.head.head
    if head.seq == 0:
        return "no ledger records yet"
    return f"the ledger to seq {head.seq}, head {head.hash}"
