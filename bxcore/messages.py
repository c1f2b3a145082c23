"""Every message that crosses a boxmaker socket (SPEC §3), as frozen dataclasses.

Each top-level message has `TYPE`, its `"type"` on the wire; a variant of a union has `TAG`.
Fields are declared in wire order. The annotations are the whole contract: `bxcore.schema`
reads them to decode strictly and encode canonically. Pure: no I/O. The vocabulary is written
one module a socket (`messages_common`, `_broker`, `_admin`, `_loop` and `_supervisor`), and
all of it is here: `bxcore.wire` knows every type from this one place, and every other module
imports a message from here, whatever its socket.
"""

from __future__ import annotations

# The messages are this module's API.
from bxcore.messages_admin import *  # noqa: F403
from bxcore.messages_broker import *  # noqa: F403
from bxcore.messages_common import *  # noqa: F403
from bxcore.messages_loop import *  # noqa: F403
from bxcore.messages_supervisor import *  # noqa: F403
