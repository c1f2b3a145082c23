"""What the owner reads of an MCP server that did not start (issue 27): its exit and the end
of its standard error, the lines that say why, never the SDK's bare "Connection closed"."""

from __future__ import annotations

from services.brokerd.mcp.start import MAX_SAID, start_error, stderr_tail

PYTHON = """\
Traceback (most recent call last):
  File "/srv/bin/mcp-server-mail", line 8, in <module>
    sys.exit(main())
  File "/srv/mail/server.py", line 40, in main
    open(MAILBOX)
FileNotFoundError: [Errno 2] No such file or directory: '/home/me/Mail'
"""

NODE = """\
file:///srv/mcp/npm/fs/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js:31
Error accessing directory /home/me/n: Error: ENOENT: no such file or directory, stat '/home/me/n'
    at async Object.stat (node:internal/fs/promises:1032:18)
    at async file:///srv/mcp/npm/fs/dist/index.js:27:23

Node.js v20.20.2
"""


def test_pythons_last_lines_are_its_exception() -> None:
    tail = stderr_tail(PYTHON)
    assert tail.endswith("FileNotFoundError: [Errno 2] No such file or directory: '/home/me/Mail'")
    assert tail.count(" | ") == 2


def test_nodes_stack_frames_and_version_line_are_left_out() -> None:
    tail = stderr_tail(NODE)
    assert tail.endswith(
        "Error accessing directory /home/me/n: Error: ENOENT: no such file or directory, stat "
        "'/home/me/n'"
    )
    assert " at " not in tail and "Node.js" not in tail


def test_a_server_that_exited_says_its_code_and_its_standard_error() -> None:
    said = start_error("the server closed its output", 1, PYTHON)
    assert said.startswith(
        "exited with code 1 (the server closed its output); its standard error ends: "
    )
    assert said.endswith("No such file or directory: '/home/me/Mail'")
    assert "Connection closed" not in said


def test_a_signal_and_a_silent_server_are_said_too() -> None:
    assert start_error("the server closed its output", -9, "") == (
        "killed by signal 9 (the server closed its output)"
    )
    assert start_error("no answer within 10 s", None, "") == "no answer within 10 s"


def test_a_long_error_keeps_its_end() -> None:
    said = start_error("the server closed its output", 2, "x" * 5000 + "\nthe cause")
    assert len(said) == MAX_SAID and said.startswith("…") and said.endswith("the cause")
