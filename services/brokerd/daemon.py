"""brokerd's shell (SPEC §2.3): opens the ledger, binds its sockets and serves until stopped.

The broker socket takes tool calls from loopd and memoryd; the admin socket (CURVE, the
owner's and gatewayd's keys only) takes the owner's verdicts and questions; broker-events
publishes approvals and the ledger's head after each group commit (the witness, §7).
"""

from __future__ import annotations

import compileall
import contextlib
import dataclasses
import errno
import importlib.util
import logging
import os
import platform
import pwd
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
from zmq.auth.asyncio import AsyncioAuthenticator

from bxcore import __version__, aio, curve
from bxcore.client import Client
from bxcore.clock import now_ms
from bxcore.config.file import SandboxConfig
from bxcore.daemon import Context
from bxcore.events import Publisher
from bxcore.home import disk
from bxcore.home.report import Report
from bxcore.router import Router
from bxcore.wire.messages import LedgerHead, LedgerQuery
from services.brokerd.admin import Admin
from services.brokerd.broker import Broker
from services.brokerd.calls import CallBook
from services.brokerd.core import seccomp
from services.brokerd.core.bwrap import Host
from services.brokerd.core.records import Head
from services.brokerd.courier import Courier
from services.brokerd.desk import Desk
from services.brokerd.driver import Driver
from services.brokerd.grants_folder import GrantsFolder
from services.brokerd.job_folder import JobFolder
from services.brokerd.judge import Judge
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import Ledger, LedgerState, LedgerUnavailable
from services.brokerd.mcp.runner import McpRunner
from services.brokerd.own import own_places
from services.brokerd.sandbox import cgroup, leftovers
from services.brokerd.sandbox.cgroup import Cgroups
from services.brokerd.sandbox.host import discover_host
from services.brokerd.state import StateStore
from services.brokerd.words import WordsBook

log = logging.getLogger("brokerd")

WITNESSES = ("gatewayd", "bxctl")  # the owner's side's witness files brokerd checks at start


#: A test seam: `fsync-after:N` makes every fsync after the first N fail with EIO, so tests
#: can see brokerd fail closed (tests/service/test_brokerd_decisions.py, test_faults.py).
#: Nothing else reads it.
FAULTS = "BX_TEST_FAULTS"


def fsync_with_faults(spec: str | None) -> Callable[[int], None]:
    if not spec or not spec.startswith("fsync-after:"):
        return os.fsync
    allowed = int(spec.split(":", 1)[1])
    count = 0

    def fsync(fd: int) -> None:
        nonlocal count
        count += 1
        if count > allowed:
            raise OSError(errno.EIO, "Input/output error (injected by BX_TEST_FAULTS)")
        os.fsync(fd)

    return fsync


PERSIST_EVERY_S = 0.2  # how often the index is committed and head.json written


async def keep_persisting(ledger: Ledger, committer: Committer, report: Report) -> None:
    """Commit the index and write the confirmed head, off the answer path, until stopped
    (`Ledger.close` does it once more); write again a report that could not be written; and
    reopen a ledger that failed for want of room once its disk has room again (as a call
    would, every `REOPEN_EVERY_S`), so that it says it writes again, call or no call."""
    while True:
        await anyio.sleep(PERSIST_EVERY_S)
        if ledger.lacked_room and not disk.is_full(disk.free_bytes(ledger.path.parent)):
            committer.retry()
        report.retry()
        try:
            await anyio.to_thread.run_sync(ledger.persist)
        except OSError as error:
            log.error("cannot write the ledger's head file: %s", error)


def _toolkit_folder() -> Path:
    """Where the toolkit package is, found without importing it: services never import each
    other (`tests/unit/test_imports.py`)."""
    spec = importlib.util.find_spec("services.toolkit")
    assert spec is not None and spec.origin is not None, "the toolkit is part of this package"
    return Path(spec.origin).parent


def sandbox_host(config: SandboxConfig) -> Host:
    """What every sandbox is built from; with `problem` set when none can start."""
    toolkit = _toolkit_folder()
    compileall.compile_dir(toolkit, quiet=2)  # a sandbox cannot write .pyc files
    bwrap = shutil.which("bwrap") if config.mode == "bwrap" else None
    base = os.path.realpath(sys.base_prefix)
    stdlib = tuple(  # where `python -I -S` finds the standard library
        entry for entry in sys.path if os.path.realpath(entry).startswith(base + "/")
    )
    host = discover_host(bwrap, sys.executable, sys.base_prefix, str(toolkit), stdlib)
    try:
        drop_to = tool_user(config.user) if os.geteuid() == 0 else None
        filter_ = seccomp.program(platform.machine())
    except (seccomp.Unsupported, ToolUserError) as error:
        return dataclasses.replace(host, problem=str(error))
    if drop_to is not None:
        log.info("brokerd runs as root: tools run as uid %d, gid %d", *drop_to)
    return dataclasses.replace(host, drop_to=drop_to, seccomp=filter_)


def sandbox_cgroups(config: SandboxConfig, host: Host) -> Cgroups | cgroup.Unavailable:
    """Each shell call's cgroup, where one can be had; else why not (also in the log)."""
    if config.mode != "bwrap" or host.bwrap is None or host.problem is not None:
        return cgroup.Unavailable("no sandbox")
    found = cgroup.discover(config.memory_mb)
    if isinstance(found, cgroup.Unavailable):
        log.warning("a shell call's memory is bounded per process only: %s", found.why)
    else:
        log.info("each shell call's memory is bounded as a whole: %s", found.summary)
    return found


def report_sandbox(
    report: Report, config: SandboxConfig, host: Host, cgroups: Cgroups | cgroup.Unavailable
) -> None:
    """How tools are confined, for `bxctl status` (`bxcore.home.report`)."""
    user = host.drop_to or (os.geteuid(), os.getegid())
    report.set(
        "sandbox",
        {
            "mode": config.mode,
            "problem": host.problem,
            "user": f"{user[0]}:{user[1]}",
            "memory": cgroups.summary if isinstance(cgroups, Cgroups) else None,
            "memory_why": cgroups.why if isinstance(cgroups, cgroup.Unavailable) else None,
        },
    )


class ToolUserError(Exception):
    """`[sandbox] user` names no usable user."""


def tool_user(configured: str) -> tuple[int, int]:
    """The uid and gid of `[sandbox] user` (a name, or a uid, which is then its own group
    when it has no name); never root."""
    try:
        entry = pwd.getpwuid(int(configured)) if configured.isdigit() else pwd.getpwnam(configured)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not configured.isdigit():
            raise ToolUserError(f"[sandbox] user: there is no user {configured!r}") from None
        uid = gid = int(configured)
    if uid == 0 or gid == 0:
        raise ToolUserError("[sandbox] user: tools never run as root or in root's group")
    return uid, gid


async def serve(ctx: Context) -> None:
    home, config = ctx.home, ctx.config
    owner = curve.load_public(home.keys, "owner")
    gatewayd = curve.load_public(home.keys, "gatewayd")
    own = curve.load_pair(home.keys, "brokerd")
    report = Report(home)

    def ledger_state(state: LedgerState, problem: str | None, seq: int) -> None:
        report.set("ledger", {"state": state.value, "problem": problem, "seq": seq})
        if state is LedgerState.BROKEN:
            log.error(
                "the ledger is broken, so every call is denied audit_unavailable: %s. "
                "`bxctl audit verify` shows it; `bxctl audit accept` takes the ledger as it is",
                problem,
            )
        elif state is LedgerState.FAILED:
            log.error(
                "the ledger cannot be written, so every call is denied audit_unavailable: %s",
                problem,
            )

    ledger = Ledger.unloaded(
        home.ledger,
        now_ms=now_ms,
        fsync=fsync_with_faults(os.environ.get(FAULTS)),
        witness_paths=[home.witness(who) for who in WITNESSES],
        on_state=ledger_state,
    )
    host = dataclasses.replace(sandbox_host(config.sandbox), name=leftovers.mark(home.root))
    if left := leftovers.sweep(leftovers.mark(home.root)):
        log.warning("ended %d sandbox setups a killed brokerd left waiting: %s", len(left), left)
    if config.sandbox.mode == "none":
        log.warning('UNSANDBOXED: [sandbox] mode is "none"; tools run with no confinement')
    elif host.bwrap is None:
        log.error("bwrap is not installed: every tool call will fail (sandbox unavailable)")
    elif host.problem is not None:
        log.error("no sandbox can start, so every tool call will fail: %s", host.problem)
    found = sandbox_cgroups(config.sandbox, host)
    report_sandbox(report, config.sandbox, host, found)
    cgroups = found if isinstance(found, Cgroups) else None
    events = Publisher(ctx.zmq, ctx.endpoint("broker-events"), service="brokerd")

    loop = aio.loop()

    def witness(head: Head) -> None:  # once the batch's answers are out: they are waited for
        loop.call_soon(events.publish, LedgerHead(head.seq, head.hash, ledger.size))

    def committed(head: Head) -> None:  # and the batch's calls into the index then, off their way
        witness(head)
        loop.call_soon(ledger.index_appended)

    def alone() -> bool:  # the one request in the whole daemon: no batch to wait for
        return broker_socket.in_flight + admin_socket.in_flight <= 1

    committer = Committer(ledger, committed, alone=alone)
    memory = ctx.endpoint("memory")

    def memoryd() -> Client:
        return Client(ctx.zmq, memory, socket="memory")

    sandboxed = config.sandbox.mode == "bwrap"
    places = own_places(home, config)
    mcp = McpRunner(
        config.mcp, host, home, sandboxed=sandboxed, own=places, pins=config.sandbox.fetch_pins
    )
    courier = Courier(config.sandbox, host, memoryd, home.run_dir, cgroups, mcp)
    # The shared pieces first, then the handlers that use them: none reaches into another.
    labels = StateStore(home.state_broker)
    book = CallBook(ledger, config.broker.results_kept)
    jobs = JobFolder(home.jobs)
    words = WordsBook(committer, jobs)
    judge = Judge(
        labels,
        GrantsFolder(home.grants),
        places,
        mcp.catalog,
        jobs,
        words=words.words_of,
        seen=book.first_seen,
    )
    driver = Driver(committer, courier, labels, book)
    desk = Desk(
        book=book,
        driver=driver,
        judge=judge,
        publish=events.publish,
        ttl_s=config.broker.approval_ttl_s,
    )
    broker = Broker(
        book=book,
        committer=committer,
        driver=driver,
        judge=judge,
        labels=labels,
        desk=desk,
        words=words,
    )
    admin = Admin(desk=desk, judge=judge, ledger=ledger, memory=memoryd)
    loaded = anyio.Event()  # `ping` is answered at once; the rest once the ledger is read

    auth: AsyncioAuthenticator | None = None
    try:  # a socket that cannot bind still closes what was opened before it
        auth = curve.start_zap(
            ctx.zmq, {"admin": curve.AllowList({owner: "owner", gatewayd: "gatewayd"})}
        )
        broker_socket = Router(
            ctx.zmq,
            ctx.endpoint("broker"),
            broker.routes,
            service="brokerd",
            ready=loaded,
        )
        admin_socket = Router(
            ctx.zmq,
            ctx.endpoint("admin"),
            admin.routes,
            service="brokerd",
            secure=lambda socket: curve.serve_curve(socket, own, "admin"),
            ready=loaded,
            early=(LedgerQuery,),
        )
        log.info("serving: %r, %r, %r", broker_socket, admin_socket, ledger)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(broker_socket.serve)
            tasks.start_soon(admin_socket.serve)
            started = {"pid": os.getpid(), "version": __version__}
            await anyio.to_thread.run_sync(ledger.load, started)
            with contextlib.suppress(LedgerUnavailable):  # its state says why, and the log
                desk.rebuild(ledger.unsettled(), ledger.scoped())
            loaded.set()
            log.info(
                "the ledger is %s at seq %d (%d records read to start; the index held the rest)",
                ledger.state,
                ledger.head.seq,
                ledger.read_at_start,
            )
            tasks.start_soon(desk.run)
            tasks.start_soon(keep_persisting, ledger, committer, report)
            if config.mcp:
                await tasks.start(mcp.serve, report)
            witness(ledger.head)
    finally:
        with anyio.CancelScope(shield=True):
            events.close()
            if auth is not None:
                auth.stop()
            ledger.close()
            if cgroups is not None:
                cgroups.close()
