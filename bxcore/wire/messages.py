"""Every message that crosses a boxmaker socket (SPEC §3), as frozen dataclasses.

Each top-level message has `TYPE`, its `"type"` on the wire; a variant of a union has `TAG`.
Fields are declared in wire order. The annotations are the whole contract: `bxcore.wire.schema`
reads them to decode strictly and encode canonically. Pure: no I/O. The vocabulary is written
one module a socket (`common`, `broker`, `admin`, `loop` and `supervisor`), and
all of it is here: `bxcore.wire.codec` knows every type from this one place, and every other module
imports a message from here, whatever its socket.
"""

from __future__ import annotations

# The messages are this module's API.
from bxcore.wire.admin import *  # noqa: F403
from bxcore.wire.broker import *  # noqa: F403
from bxcore.wire.common import *  # noqa: F403
from bxcore.wire.loop import *  # noqa: F403
from bxcore.wire.supervisor import *  # noqa: F403
