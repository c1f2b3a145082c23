"""A fake npm registry for the tests (issue 27): one package, `evil-mcp` 1.0.0, whose only
dependency is a git repository (`git+file://`) with an `install` script that would write
`FOLDER/ran` (a registry package's git dependency, which npm prepares with `npm install` of
its own: does `--ignore-scripts` reach it?). `serve(folder)` makes the repository and the
tarball under FOLDER and serves the registry on a free port of 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PACKAGE = "evil-mcp"


def _git_dependency(folder: Path) -> str:
    repo = folder / "gitdep"
    repo.mkdir()
    manifest = {
        "name": "gitdep",
        "version": "1.0.0",
        "scripts": {"install": f"touch {folder / 'ran'}", "prepare": f"touch {folder / 'ran'}"},
    }
    (repo / "package.json").write_text(json.dumps(manifest))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return f"git+file://{repo}"


def _tarball(dependency: str) -> bytes:
    manifest = {
        "name": PACKAGE,
        "version": "1.0.0",
        "bin": {PACKAGE: "index.js"},
        "dependencies": {"gitdep": dependency},
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (("package.json", json.dumps(manifest).encode()), ("index.js", b"")):
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """The registry's URL while it serves."""
    tarball = _tarball(_git_dependency(folder))
    digest = hashlib.sha1(tarball).hexdigest()
    port: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            base = f"http://127.0.0.1:{port[0]}"
            if self.path.endswith(".tgz"):
                body, kind = tarball, "application/octet-stream"
            elif self.path.lstrip("/") == PACKAGE:
                version = {
                    "name": PACKAGE,
                    "version": "1.0.0",
                    "bin": {PACKAGE: "index.js"},
                    "dependencies": json.loads(_manifest_of(tarball))["dependencies"],
                    "dist": {"tarball": f"{base}/{PACKAGE}-1.0.0.tgz", "shasum": digest},
                }
                packument = {
                    "name": PACKAGE,
                    "dist-tags": {"latest": "1.0.0"},
                    "versions": {"1.0.0": version},
                }
                body, kind = json.dumps(packument).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port.append(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port[0]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _manifest_of(tarball: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        member = tar.extractfile("package/package.json")
        assert member is not None
        return member.read()
