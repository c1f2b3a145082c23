"""A real Matrix homeserver for the channel's tests (SPEC §21.4): Synapse from PyPI, on
127.0.0.1 at a free port, with SQLite in its own temporary folder and registration by shared
secret only. Ready in about 2 s; `kill` and `start` again keep its database (the homeserver
went away mid-turn and came back).

    with homeserver(folder) as hs:
        alice = hs.register("alice")           # (user id, access token, device id)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemons import free_port

SERVER_NAME = "box.test"
SECRET = "bx-test-registration-secret"
_UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}


@dataclass(frozen=True)
class Account:
    user_id: str
    token: str
    device_id: str


def _config(folder: Path, port: int) -> str:
    config = {
        "server_name": SERVER_NAME,
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "pid_file": str(folder / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(folder / "homeserver.db")}},
        "log_config": str(folder / "log.yaml"),
        "media_store_path": str(folder / "media"),
        "signing_key_path": str(folder / "signing.key"),
        "registration_shared_secret": SECRET,
        "enable_registration": False,
        "report_stats": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],
        "presence": {"enabled": False},
        "url_preview_enabled": False,
        "enable_metrics": False,
        "bcrypt_rounds": 4,  # the accounts' passwords: a test's, not worth 12 rounds
        **{
            name: _UNLIMITED
            for name in (
                "rc_message",
                "rc_registration",
                "rc_joins",
                "rc_invites",
                "rc_3pid_validation",
                "rc_key_requests",
                "rc_admin_redaction",
            )
        },
        "rc_login": {
            "address": _UNLIMITED,
            "account": _UNLIMITED,
            "failed_attempts": _UNLIMITED,
        },
    }
    return json.dumps(config)  # JSON is YAML


_LOG = """\
version: 1
formatters:
  plain: {format: '%(asctime)s %(levelname)s %(name)s: %(message)s'}
handlers:
  file: {class: logging.FileHandler, formatter: plain, filename: LOGFILE}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


class Homeserver:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "homeserver.yaml").write_text(_config(folder, self.port))
        (folder / "log.yaml").write_text(_LOG.replace("LOGFILE", str(folder / "homeserver.log")))
        self._signing_key()

    def __repr__(self) -> str:
        state = "running" if self.process and self.process.poll() is None else "stopped"
        return f"Homeserver({self.url}, {state})"

    def _signing_key(self) -> None:
        from signedjson.key import generate_signing_key, write_signing_keys

        path = self.folder / "signing.key"
        if not path.exists():
            with open(path, "w") as out:
                write_signing_keys(out, [generate_signing_key("a_test")])

    def start(self, deadline_s: float = 60.0) -> None:
        out = open(self.folder / "stdout.log", "ab")  # noqa: SIM115 (kept by the process)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "synapse.app.homeserver", "-c",
             str(self.folder / "homeserver.yaml")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=self.folder, start_new_session=True,
        )  # fmt: skip
        out.close()
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"synapse exited {self.process.returncode}:\n{self.output()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/health", timeout=1) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"synapse did not answer in {deadline_s} s:\n{self.output()}")

    def output(self) -> str:
        parts = []
        for name in ("stdout.log", "homeserver.log"):
            path = self.folder / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def kill(self) -> None:
        """SIGKILL: the homeserver is gone at once (its database stays)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def _call(self, method: str, path: str, body: object = None, token: str = "") -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} {path}: {error.code} {error.read()[:300]!r}") from None

    def register(self, name: str, admin: bool = False) -> Account:
        """A new account by shared secret (Synapse's admin API), logged in on one device."""
        nonce = self._call("GET", "/_synapse/admin/v1/register")
        assert isinstance(nonce, dict)
        password = f"pw-{name}"
        body = {
            "nonce": nonce["nonce"],
            "username": name,
            "password": password,
            "admin": admin,
            "mac": _mac(nonce["nonce"], name, password, admin),
        }
        answer = self._call("POST", "/_synapse/admin/v1/register", body)
        assert isinstance(answer, dict), answer
        return Account(answer["user_id"], answer["access_token"], answer["device_id"])


def _mac(nonce: str, name: str, password: str, admin: bool) -> str:
    mac = hmac.new(SECRET.encode(), digestmod=hashlib.sha1)
    mac.update(nonce.encode() + b"\x00" + name.encode() + b"\x00" + password.encode() + b"\x00")
    mac.update(b"admin" if admin else b"notadmin")
    return mac.hexdigest()


@contextlib.contextmanager
def homeserver(folder: Path) -> Iterator[Homeserver]:
    server = Homeserver(folder)
    try:
        server.start()
        yield server
    finally:
        server.stop()
