"""CURVE keys and the ZAP allow-list that guard the admin and gateway sockets (SPEC §3.6).

`bxctl init` generates one key pair a party into `{home}/keys/`: `<name>.key` holds the public
key, `<name>.key_secret` the pair (mode 0600). Nothing here ever overwrites a key. A server
socket accepts exactly the public keys it is given, through one ZAP handler a process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from bxcore.errors import SetupError
from bxcore.frozen import frozen

#: The parties that hold key pairs: the owner (bxctl), gatewayd, and brokerd's admin socket.
PARTIES = ("owner", "gatewayd", "brokerd")


class KeyFileError(Exception):
    """A key file is missing or unreadable; the text says which and what to run."""


@frozen
class KeyPair:
    public: bytes  # z85
    secret: bytes  # z85

    def __repr__(self) -> str:  # never print a secret key
        return f"KeyPair(public={self.public.decode()})"


def generate(keys: Path, name: str) -> bool:
    """Create `name`'s key pair in `keys` unless it exists; True when one was made."""
    public, secret = keys / f"{name}.key", keys / f"{name}.key_secret"
    if public.exists() or secret.exists():
        return False
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_public, key_secret = zmq.curve_keypair()
    _write(secret, _certificate(key_public, key_secret), 0o600)
    _write(public, _certificate(key_public, None), 0o644)
    return True


def _certificate(public: bytes, secret: bytes | None) -> bytes:
    lines = ["# boxmaker CURVE certificate (ZeroMQ ZPL format)", "metadata", "curve"]
    lines.append(f'    public-key = "{public.decode()}"')
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return ("\n".join(lines) + "\n").encode()


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_pair(keys: Path, name: str) -> KeyPair:
    path = keys / f"{name}.key_secret"
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise KeyFileError(
            f"cannot read the {name} key {path}: {error}; run `bxctl init`"
        ) from None
    if secret is None:
        raise KeyFileError(f"{path} holds no secret key; run `bxctl init` with a fresh keys folder")
    return KeyPair(public, secret)


def load_public(keys: Path, name: str) -> bytes:
    path = keys / f"{name}.key"
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise KeyFileError(
            f"cannot read the {name} key {path}: {error}; run `bxctl init`"
        ) from None
    return public


def serve_curve(socket: zmq.Socket[bytes], own: KeyPair, domain: str) -> None:
    """Make `socket` a CURVE server whose clients are checked in ZAP domain `domain`."""
    socket.curve_secretkey = own.secret
    socket.curve_publickey = own.public
    socket.curve_server = True
    socket.zap_domain = domain.encode()


def connect_curve(socket: zmq.Socket[bytes], own: KeyPair, server_public: bytes) -> None:
    """Make `socket` a CURVE client of the server whose public key is `server_public`."""
    socket.curve_secretkey = own.secret
    socket.curve_publickey = own.public
    socket.curve_serverkey = server_public


class AllowList:
    """A ZAP credentials provider: exactly these public keys (z85) may connect."""

    def __init__(self, allowed: dict[bytes, str]) -> None:
        self.allowed = allowed  # public key -> who it is, for the log

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.allowed

    def __repr__(self) -> str:
        return f"AllowList({', '.join(sorted(self.allowed.values()))})"


def start_zap(ctx: zmq.Context[Any], domains: dict[str, AllowList]) -> AsyncioAuthenticator:
    """Start this process's one ZAP handler (inside a running event loop); `SetupError` (one
    line) when it cannot bind, its socket closed at once so that the context's end never
    waits for it. Its socket is the context's: `ctx.destroy` closes it even if `stop` is
    never called (a daemon whose next bind fails)."""
    auth = AsyncioAuthenticator(ctx)
    try:
        auth.start()
    except zmq.ZMQError as error:
        if auth.zap_socket is not None:
            auth.zap_socket.close(linger=0)
        raise SetupError(f"cannot start the ZAP handler (CURVE checks): {error}") from None
    for domain, allow in domains.items():
        auth.configure_curve_callback(domain, credentials_provider=allow)
    return auth
