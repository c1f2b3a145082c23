"""`bxctl up`'s word on the model server (issue 14): a TCP connection to `[model] base_url`,
made while the services start. Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket

from bxcore.config.file import ModelConfig
from bxctl.model_reach import reach


def model(base_url: str, provider: str = "openai") -> ModelConfig:
    return ModelConfig(provider=provider, base_url=base_url)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: nothing listens there


def test_nothing_listening_is_one_line_naming_the_url_and_the_next_step() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    attempt = reach(model(url))
    assert attempt is not None
    hint = attempt.hint(5.0)
    assert hint == (
        f"model: nothing answers at {url} (connection refused): the agent's turns will fail "
        "until it does; `bxctl model check` says what to change"
    )


def test_a_server_that_accepts_the_connection_gets_no_line() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        attempt = reach(model(f"http://127.0.0.1:{server.getsockname()[1]}/v1"))
        assert attempt is not None
        assert attempt.hint(5.0) is None


def test_a_name_that_does_not_resolve_says_so() -> None:
    attempt = reach(model("https://model.invalid/v1"))
    assert attempt is not None
    hint = attempt.hint(10.0)
    assert hint is not None and "its name does not resolve" in hint


def test_the_scripted_model_and_a_url_without_a_host_are_not_tried() -> None:
    assert reach(model("http://127.0.0.1:1/v1", provider="scripted")) is None
    assert reach(model("http:///v1")) is None
