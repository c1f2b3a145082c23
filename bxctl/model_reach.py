"""Whether anything listens where `[model] base_url` points, asked while `bxctl up` waits for
the services (issue 14): the first turn of an owner whose model server is not running fails,
and `up` can say so at once, with where to look next.

Only a TCP connection (and the name's lookup) in a thread: no HTTP, no key, nothing sent. A
server that answers but will not do (a wrong key, no tool calls) is `bxctl model check`'s.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

from bxcore.config.file import ModelConfig
from bxcore.errors import one_line

CONNECT_S = 1.0


class Reach:
    """One connection attempt to the model server, running in a daemon thread."""

    def __init__(self, base_url: str, host: str, port: int) -> None:
        self.base_url = base_url
        self._address = (host, port)
        self._problem: str | None = None
        self._thread = threading.Thread(target=self._try, name="model-reach", daemon=True)

    def __repr__(self) -> str:
        return f"Reach({self.base_url})"

    def start(self) -> Reach:
        self._thread.start()
        return self

    def _try(self) -> None:
        try:
            socket.create_connection(self._address, timeout=CONNECT_S).close()
        except socket.gaierror as error:
            self._problem = f"its name does not resolve: {error.strerror or one_line(error)}"
        except TimeoutError:
            self._problem = f"it did not accept a connection within {CONNECT_S:g} s"
        except OSError as error:
            self._problem = (error.strerror or one_line(error)).lower()

    def hint(self, wait_s: float) -> str | None:
        """One line for the owner when nothing answers there (None: it does, or no word
        within `wait_s`: `up` never waits longer for this)."""
        self._thread.join(wait_s)
        if self._thread.is_alive() or self._problem is None:
            return None
        return (
            f"model: nothing answers at {self.base_url} ({self._problem}): the agent's turns "
            f"will fail until it does; `bxctl model check` says what to change"
        )


def reach(config: ModelConfig) -> Reach | None:
    """A started attempt for a model reached over HTTP; None for the scripted model."""
    if config.provider == "scripted":
        return None
    parts = urlsplit(config.base_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return Reach(config.base_url, parts.hostname, port).start()
