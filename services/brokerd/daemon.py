"""brokerd's shell (SPEC §2.3): opens the ledger, binds its sockets and serves until stopped.

The broker socket takes tool calls from loopd and memoryd; the admin socket (CURVE, the
owner's and gatewayd's keys only) takes the owner's verdicts and questions; broker-events
publishes approvals and the ledger's head after each group commit (the witness, §7).
"""

from __future__ import annotations

import asyncio
import compileall
import errno
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

import services.toolkit
from bxcore import __version__, curve
from bxcore.client import Client
from bxcore.clock import now_ms
from bxcore.daemon import Context
from bxcore.events import Publisher
from bxcore.messages import LedgerHead
from bxcore.router import Router
from services.brokerd.admin import Admin
from services.brokerd.broker import Broker
from services.brokerd.calls import Calls
from services.brokerd.commit import Committer
from services.brokerd.courier import Courier
from services.brokerd.desk import Desk
from services.brokerd.grants import GrantsFolder
from services.brokerd.ledger import Ledger, LedgerState
from services.brokerd.records import Head
from services.brokerd.sandbox import Host
from services.brokerd.state import StateStore

log = logging.getLogger("brokerd")

#: A test seam: `fsync-after:N` makes every fsync after the first N fail with EIO, so tests
#: can see brokerd fail closed. Nothing else reads it; see docs/testing.md.
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


def sandbox_host(mode: str) -> Host:
    toolkit = Path(services.toolkit.__file__).parent
    compileall.compile_dir(toolkit, quiet=2)  # a sandbox cannot write .pyc files
    bwrap = shutil.which("bwrap") if mode == "bwrap" else None
    return Host.discover(bwrap, sys.executable, sys.base_prefix, str(toolkit))


async def serve(ctx: Context) -> None:
    home, config = ctx.home, ctx.config
    owner = curve.load_public(home.keys, "owner")
    gatewayd = curve.load_public(home.keys, "gatewayd")
    own = curve.load_pair(home.keys, "brokerd")
    ledger = Ledger.open(
        home.ledger,
        now_ms=now_ms,
        fsync=fsync_with_faults(os.environ.get(FAULTS)),
        started={"pid": os.getpid(), "version": __version__},
    )
    if ledger.state is not LedgerState.OK:
        log.error(
            "the ledger cannot be written (%s): every call is denied audit_unavailable; "
            "run `bxctl audit verify`",
            ledger.problem,
        )
    host = sandbox_host(config.sandbox.mode)
    if config.sandbox.mode == "none":
        log.warning('UNSANDBOXED: [sandbox] mode is "none"; tools run with no confinement')
    elif host.bwrap is None:
        log.error("bwrap is not installed: every tool call will fail (sandbox unavailable)")
    events = Publisher(ctx.zmq, ctx.endpoint("broker-events"), service="brokerd")

    loop = asyncio.get_running_loop()

    def witness(head: Head) -> None:  # once the batch's answers are out: they are waited for
        loop.call_soon(events.publish, LedgerHead(head.seq, head.hash))

    def alone() -> bool:  # the one request in the whole daemon: no batch to wait for
        return broker_socket.in_flight + admin_socket.in_flight <= 1

    committer = Committer(ledger, witness, alone=alone)
    memory = ctx.endpoint("memory")
    broker = Broker(
        ledger=ledger,
        committer=committer,
        state=StateStore(home.state_broker),
        grants=GrantsFolder(home.grants),
        courier=Courier(
            config.sandbox,
            host,
            lambda: Client(ctx.zmq, memory, name="memoryd", timeout=5.0, tries=2),
            home.run_dir,
        ),
        calls=Calls(config.broker.results_kept),
    )
    desk = Desk(broker, events.publish, config.broker.approval_ttl_s)
    desk.rebuild(ledger.calls())
    admin = Admin(broker, desk)
    auth = curve.start_zap(
        ctx.zmq, {"admin": curve.AllowList({owner: "owner", gatewayd: "gatewayd"})}
    )
    broker_socket = Router(ctx.zmq, ctx.endpoint("broker"), broker.handle, service="brokerd")
    admin_socket = Router(
        ctx.zmq,
        ctx.endpoint("admin"),
        admin.handle,
        service="brokerd",
        secure=lambda socket: curve.serve_curve(socket, own, "admin"),
    )
    log.info("serving: %r, %r, %r", broker_socket, admin_socket, ledger)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(desk.run)
            tasks.start_soon(broker_socket.serve)
            tasks.start_soon(admin_socket.serve)
            witness(ledger.head)
    finally:
        with anyio.CancelScope(shield=True):
            events.close()
            auth.stop()
            ledger.close()
