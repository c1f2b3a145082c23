"""`bxctl model check` (issue 14) against real HTTP servers on 127.0.0.1: the fake model server
of the e2e tests, scripted to answer as real servers do when they work and when they do not
(a tool call written as text, a model without tools, no such model), a server that wants a key
it was not given, a port nobody listens on, a host that does not resolve, and TLS spoken to a
plain HTTP server. Each ends in one clear line, the change to make, and the exit status.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import FakeModel
from tests.support.cli import Completed, bxctl

CALL = ("get_weather", '{"city":"Paris"}')
AS_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def check(home: Path, config: str, *, env: dict[str, str] | None = None) -> Completed:
    (home / "config.toml").write_text(config)
    return bxctl(home, "model", "check", env=env)


def checked(home: Path, config: str, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    (home / "config.toml").write_text(config)
    result = bxctl(home, "model", "check", "--json", env=env)
    data: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == (0 if data["usable"] else 1), result
    return data


def checks(data: dict[str, Any]) -> dict[str, tuple[bool | None, str]]:
    return {c["name"]: (c["ok"], c["detail"]) for c in data["checks"]}


def openai(base_url: str, *, stream: bool = False, key_env: str = "", model: str = "fake") -> str:
    return (
        f'[model]\nbase_url = "{base_url}"\nmodel = "{model}"\n'
        f'stream = {"true" if stream else "false"}\napi_key_env = "{key_env}"\n'
    )


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with FakeModel() as fake:
        yield fake


def test_a_server_that_calls_the_tool_whole_and_streamed_is_usable(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply(tool_calls=[CALL])
    model.reply(tool_calls=[CALL])
    result = check(tmp_path, openai(model.base_url))
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0] == f"openai at {model.base_url}, model 'fake', key none, stream = false"
    assert lines[-1] == "usable: the box can use this model"
    assert "1 offered; 'fake' is among them" in result.stdout
    bodies = model.requests
    assert [b["stream"] for b in bodies] == [False, True]  # the configured way first
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["get_weather"]


def test_tool_calls_that_come_back_only_whole_say_to_turn_streaming_off(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply(text=AS_TEXT)  # streamed, as configured
    model.reply(tool_calls=[CALL])  # whole
    data = checked(tmp_path, openai(model.base_url, stream=True))
    assert data["usable"] is False
    found = checks(data)
    assert found["streamed (configured)"][0] is False
    assert found["whole"][0] is True
    assert data["advice"][0] == (
        "set [model] stream = false: tool calls come back whole, not streamed"
    )


def test_a_tool_call_written_as_text_names_the_server_flags(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply(text=AS_TEXT)
    model.reply(text=AS_TEXT)
    result = check(tmp_path, openai(model.base_url))
    assert result.returncode == 1
    assert "the tool call came back as text" in result.stdout
    assert "--jinja" in result.stdout and "--tool-call-parser" in result.stdout
    assert result.stdout.splitlines()[-1] == "not usable as configured"


def test_a_model_that_answers_in_words_is_not_usable(tmp_path: Path, model: FakeModel) -> None:
    model.reply(text="It is sunny in Paris.")
    model.reply(text="It is sunny in Paris.")
    data = checked(tmp_path, openai(model.base_url))
    assert checks(data)["whole (configured)"] == (
        False,
        "an answer in words, no tool call: It is sunny in Paris.",
    )
    assert "does not call tools reliably" in data["advice"][0]


def test_a_model_without_tools_support_says_to_pick_another(
    tmp_path: Path, model: FakeModel
) -> None:
    refusal = "registry.ollama.ai/library/gemma:2b does not support tools"
    model.fail(400, refusal, times=2)
    data = checked(tmp_path, openai(model.base_url, model="gemma:2b"))
    ok, detail = checks(data)["whole (configured)"]
    assert ok is False and detail.startswith("the server refused a request with tools: ")
    assert refusal in detail
    assert data["advice"][0] == (
        "set [model] model to a model that supports tool calls (docs/models.md)"
    )
    assert checks(data)["models"] == (None, "1 offered; 'gemma:2b' is not: fake")


def test_llama_server_without_jinja_says_to_restart_it_with_the_flag(
    tmp_path: Path, model: FakeModel
) -> None:
    model.fail(500, "tools param requires --jinja flag", times=2)
    result = check(tmp_path, openai(model.base_url))
    assert result.returncode == 1
    assert "the server takes tools only when started with a flag" in result.stdout
    assert (
        "change: restart the server with the flag it names: llama.cpp's llama-server with "
        "--jinja" in result.stdout
    )


def test_a_model_the_server_does_not_have_names_those_it_has(
    tmp_path: Path, model: FakeModel
) -> None:
    model.fail(404, "model 'llama3.1' not found, try pulling it first", times=2)
    data = checked(tmp_path, openai(model.base_url, model="llama3.1"))
    assert data["models"] == ["fake"]
    assert data["advice"] == ["set [model] model to one the server offers: fake"]


def test_anthropic_is_listed_and_asked_in_its_own_form_with_the_key(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply(tool_calls=[CALL])
    model.reply(tool_calls=[CALL])
    config = (
        f'[model]\nprovider = "anthropic"\nbase_url = "{model.root_url}"\n'
        'model = "fake"\napi_key_env = "BX_TEST_ANTHROPIC"\n'
    )
    data = checked(tmp_path, config, env={"BX_TEST_ANTHROPIC": "sk-test"})
    assert data["usable"] is True
    posted = model.received
    assert [r.path for r in posted] == ["/v1/messages", "/v1/messages"]
    assert {r.headers["x-api-key"] for r in posted} == {"sk-test"}


# -- servers that cannot be used at all ---------------------------------------------------------


class _WantsKey(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.seen = self.headers.get("authorization")
        body = json.dumps({"error": {"message": "Incorrect API key provided"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def wants_a_key() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WantsKey)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_refused_key_names_the_variable_it_was_read_from(tmp_path: Path) -> None:
    with wants_a_key() as base_url:
        result = check(tmp_path, openai(base_url, key_env="BX_TEST_KEY"), env={"BX_TEST_KEY": "x"})
        empty = check(tmp_path, openai(base_url))
    assert result.returncode == 1
    assert (
        f"{base_url} refused the key (401): the key read from $BX_TEST_KEY was sent: "
        "Incorrect API key provided" in result.stdout
    )
    assert "change: put a valid key in $BX_TEST_KEY" in result.stdout
    assert "and none is sent: [model] api_key_env is empty" in empty.stdout
    assert "change: set [model] api_key_env to the variable that holds the key" in empty.stdout


def test_a_key_variable_that_is_not_set_is_said_and_nothing_is_asked(
    tmp_path: Path, model: FakeModel
) -> None:
    data = checked(tmp_path, openai(model.base_url, key_env="BX_TEST_UNSET"), env={})
    assert checks(data)["key"] == (False, "$BX_TEST_UNSET is not set")
    assert data["advice"][0].startswith("set $BX_TEST_UNSET (named by [model] api_key_env)")
    assert model.requests == []  # only the list of models was asked (GET)


def a_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "where, line, change",
    [
        (
            "a free port",
            "nothing answers at {url}: the connection was refused (connection refused)",
            "start the model server, or set [model] base_url to where it listens",
        ),
        (
            "no-such-model-server.invalid",
            "the host of {url} cannot be found: ",
            "check the host name in [model] base_url",
        ),
    ],
)
def test_a_server_out_of_reach_is_one_clear_line_and_a_change(
    tmp_path: Path, where: str, line: str, change: str
) -> None:
    host = f"127.0.0.1:{a_free_port()}" if where == "a free port" else where
    base_url = f"http://{host}/v1"
    result = check(tmp_path, openai(base_url))
    assert result.returncode == 1
    assert line.format(url=base_url) in result.stdout
    assert f"change: {change}" in result.stdout
    assert [n for n in ("whole", "streamed") if n in result.stdout] == []


def test_tls_spoken_to_a_plain_http_server_is_a_tls_failure(
    tmp_path: Path, model: FakeModel
) -> None:
    base_url = f"https://127.0.0.1:{model.port}/v1"
    data = checked(tmp_path, openai(base_url))
    ok, detail = checks(data)["reach"]
    assert ok is False and detail.startswith(f"TLS with {base_url} failed: ")
    assert data["advice"][0].startswith("check the scheme in [model] base_url")
