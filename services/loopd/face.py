"""What bxctl may do with loopd's code while loopd is not running (issue 25): probe a model
server as loopd would talk to it (`bxctl model check`): the model client loopd would make, the
key it would send, how a server's error is read, and Anthropic's version and address. bxctl
reaches loopd only through here (`tests/unit/test_imports.py`).
"""

from __future__ import annotations

from services.loopd.anthropic import VERSION, messages_url
from services.loopd.http_client import read_key, server_message
from services.loopd.model import McpTool, ModelError, User
from services.loopd.providers import make_model

__all__ = [
    "VERSION",
    "McpTool",
    "ModelError",
    "User",
    "make_model",
    "messages_url",
    "read_key",
    "server_message",
]
