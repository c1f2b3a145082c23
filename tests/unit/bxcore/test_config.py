"""bxcore.config.file and .written: config.toml parsed strictly, every key defaulted, every error
one line; the commented file and the reference written from the same keys."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.config.file import (
    MAX_CONFIG_BYTES,
    SECTION_CLASSES,
    Config,
    ConfigError,
    load_config,
    parse_config,
)
from bxcore.config.keys import KEYS, SECTIONS, Key, Kind
from bxcore.config.written import COMMENTED_CONFIG, render_config, toml_value
from bxcore.home.layout import SOCKETS, Home

_NO_SURROGATES = st.characters(exclude_categories=["Cs"])
DOCS = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def _error(text: str | bytes) -> str:
    """The message of the ConfigError that `text` raises, checked to be one line."""
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


def _key_id(key: Key) -> str:
    return f"{key.section}.{key.name}"


# -- defaults --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", [b"", b"\n\n", b"# only a comment\n", b"[model]\n[sockets]\n", b"\xef\xbb\xbf"]
)
def test_an_empty_file_gives_the_defaults(text: bytes) -> None:
    assert parse_config(text) == Config()


def test_a_missing_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "config.toml") == Config()
    assert load_config(tmp_path / "no-such-folder" / "config.toml") == Config()


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        (lambda c: c.model.provider, "openai"),
        (lambda c: c.model.base_url, "http://127.0.0.1:11434/v1"),
        (lambda c: c.model.model, "llama3.1"),
        (lambda c: c.model.api_key_env, ""),
        (lambda c: c.model.stream, False),
        (lambda c: c.model.timeout_s, 60.0),
        (lambda c: c.model.script, ""),
        (lambda c: c.loop.max_steps, 24),
        (lambda c: c.loop.max_depth, 3),
        (lambda c: c.broker.approval_ttl_s, 600.0),
        (lambda c: c.broker.results_kept, 1000),
        (lambda c: c.sandbox.mode, "bwrap"),
        (lambda c: c.sandbox.file_timeout_s, 10.0),
        (lambda c: c.sandbox.shell_timeout_s, 60.0),
        (lambda c: c.sandbox.fetch_timeout_s, 20.0),
        (lambda c: c.sandbox.memory_mb, 1024),
        (lambda c: c.sandbox.max_processes, 256),
        (lambda c: dict(c.sandbox.fetch_pins), {}),
        (lambda c: c.sandbox.fetch_ca_file, ""),
        (lambda c: c.console.host, "127.0.0.1"),
        (lambda c: c.console.port, 8420),
        (lambda c: c.sockets.broker_events, ""),
    ],
)
def test_the_defaults_are_the_specs(read: Any, expected: object) -> None:
    assert read(Config()) == expected


def test_the_default_system_prompt_explains_the_broker_denials_and_absolute_paths() -> None:
    prompt = Config().loop.system_prompt
    assert "broker" in prompt and "denied" in prompt.lower() and "absolute paths" in prompt
    assert Config().loop.subagent_prompt


def test_the_dataclasses_have_exactly_the_tables_keys_and_defaults() -> None:
    tables = ("mcp", "matrix")  # an array of tables, and a table with required keys
    sections = tuple(f.name for f in _fields(Config) if f.name not in tables)
    assert tuple(SECTION_CLASSES) == tuple(SECTIONS) == sections
    for section, cls in SECTION_CLASSES.items():
        keys = [k for k in KEYS if k.section == section]
        assert [f.name for f in _fields(cls)] == [k.attr for k in keys]
        defaults = cls()
        for key in keys:
            assert getattr(defaults, key.attr) == key.default


def _fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def test_a_config_is_frozen_and_hashable() -> None:
    config = parse_config(b'[sandbox.fetch_pins]\n"a.example" = "127.0.0.1:8443"\n')
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.model.model = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.sandbox.fetch_pins["b.example"] = "127.0.0.1:1"  # type: ignore[index]
    hash(config)


# -- values that are taken -------------------------------------------------------------------


def test_every_key_can_be_set() -> None:
    text = """
[model]
provider = "scripted"
base_url = "https://api.example.com/v1/"
model = "claude-x"
api_key_env = "BX_KEY"
stream = true
timeout_s = 2.5
script = "/srv/demo.json"
[loop]
max_steps = 1
max_depth = 0
system_prompt = ""
subagent_prompt = "be brief"
[broker]
approval_ttl_s = 1
results_kept = 5
[sandbox]
mode = "none"
file_timeout_s = 1
shell_timeout_s = 86400
fetch_timeout_s = 0.5
memory_mb = 64
max_processes = 1
fetch_pins = { "test.example" = "127.0.0.1:8443", "v6.example" = "[::1]:443" }
fetch_ca_file = "/tmp/ca.pem"
[console]
host = "::1"
port = 65535
[sockets]
admin = "tcp://127.0.0.1:5555"
broker-events = "ipc:///tmp/bx/events.sock"
gateway = "tcp://[::1]:5556"
"""
    config = parse_config(text.encode())
    assert config.model.provider == "scripted" and config.model.stream is True
    assert config.model.timeout_s == 2.5 and config.broker.approval_ttl_s == 1.0
    assert isinstance(config.broker.approval_ttl_s, float)
    assert isinstance(config.sandbox.file_timeout_s, float)
    assert config.loop.max_depth == 0 and config.loop.system_prompt == ""
    assert dict(config.sandbox.fetch_pins) == {
        "test.example": "127.0.0.1:8443",
        "v6.example": "[::1]:443",
    }
    assert config.console == dataclasses.replace(Config().console, host="::1", port=65535)
    assert config.sockets.broker_events == "ipc:///tmp/bx/events.sock"


def test_a_socket_endpoint_is_the_override_else_the_homes_ipc() -> None:
    home = Home(Path("/srv/bx"))
    sockets = parse_config(b'[sockets]\ngateway = "tcp://127.0.0.1:7000"\n').sockets
    assert sockets.endpoint("gateway", home) == "tcp://127.0.0.1:7000"
    for name in SOCKETS:
        if name != "gateway":
            assert sockets.endpoint(name, home) == f"ipc:///srv/bx/run/{name}.sock"


def test_an_endpoint_of_no_such_socket_is_refused() -> None:
    with pytest.raises(ValueError, match="no such socket"):
        Config().sockets.endpoint("endpoint", Home(Path("/srv/bx")))


def test_a_utf8_bom_is_allowed() -> None:
    assert parse_config(b"\xef\xbb\xbf[console]\nport = 9000\n").console.port == 9000


# -- what is refused, and how it is said -----------------------------------------------------

_WRONG = {
    Kind.STRING: ("5", "got 5"),
    Kind.INTEGER: ('"5"', 'got "5"'),
    Kind.NUMBER: ('"5"', 'got "5"'),
    Kind.BOOLEAN: ("1", "got 1"),
    Kind.TABLE: ('"x"', 'got "x"'),
    Kind.LIST: ('"x"', 'got "x"'),
}


@pytest.mark.parametrize("key", KEYS, ids=_key_id)
def test_every_keys_wrong_type_is_named(key: Key) -> None:
    value, got = _WRONG[key.kind]
    message = _error(f"[{key.section}]\n{key.name} = {value}\n")
    assert message == f"config.toml: [{key.section}] {key.name}: expected {key.kind.value}, {got}"


@pytest.mark.parametrize(
    "key", [k for k in KEYS if k.kind in (Kind.INTEGER, Kind.NUMBER)], ids=_key_id
)
@pytest.mark.parametrize("value", ["true", "false"])
def test_a_boolean_is_not_a_number(key: Key, value: str) -> None:
    message = _error(f"[{key.section}]\n{key.name} = {value}\n")
    assert f"[{key.section}] {key.name}: expected {key.kind.value}, got {value}" in message


@pytest.mark.parametrize("key", [k for k in KEYS if k.kind is Kind.INTEGER], ids=_key_id)
def test_a_float_is_not_an_integer(key: Key) -> None:
    assert "expected an integer, got 5.0" in _error(f"[{key.section}]\n{key.name} = 5.0\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[model]\ntimeout = 1\n", "config.toml: [model] timeout: unknown key"),
        ("[modle]\n", "config.toml: [modle]: unknown section"),
        ("provider = 'openai'\n", "config.toml: [provider]: unknown section"),
        ("model = 5\n", "config.toml: [model]: expected a table, got 5"),
        ("[[model]]\n", "config.toml: [model]: expected a table, got an array"),
        ("[model.extra]\n", "config.toml: [model] extra: unknown key"),
        ('[model]\n"a\\nb" = 1\n', 'config.toml: [model] "a\\nb": unknown key'),
        ('[sockets]\nbroker_events = ""\n', "config.toml: [sockets] broker_events: unknown key"),
    ],
)
def test_an_unknown_section_or_key_is_named(text: str, message: str) -> None:
    assert _error(text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[sandbox]\nmode = "docker"',
         'config.toml: [sandbox] mode: expected one of "bwrap", "none", got "docker"'),
        ('[model]\nprovider = "OpenAI"', '[model] provider: expected one of "openai", '),
        ('[model]\nbase_url = "ftp://x"', "[model] base_url: expected an http:// or https://"),
        ('[model]\nbase_url = "http://"', "[model] base_url: expected an http://"),
        ('[model]\nbase_url = "http://a b"', "[model] base_url: expected an http://"),
        ('[model]\nmodel = ""', "[model] model: expected a name of 1 to 256"),
        ('[model]\napi_key_env = "MY-KEY"', "[model] api_key_env: expected \"\" or an env"),
        ('[model]\napi_key_env = "sk-123"', "[model] api_key_env: expected"),
        ("[model]\ntimeout_s = 0", "[model] timeout_s: expected a number of seconds, more than 0"),
        ("[model]\ntimeout_s = -1", "[model] timeout_s: expected a number of seconds"),
        ("[model]\ntimeout_s = nan", "[model] timeout_s: expected a number of seconds"),
        ("[model]\ntimeout_s = inf", "got inf"),
        ("[model]\ntimeout_s = 86401", "at most 86400, got 86401.0"),
        ('[model]\nscript = "demo.json"', '[model] script: expected "" or an absolute path'),
        ('[model]\nscript = "/a\\u0000b"', '[model] script: expected "" or an absolute path'),
        ('[model]\nprovider = "scripted"',
         'config.toml: [model] script: needed when provider = "scripted"'),
        ("[model]\ndeadline_s = 0", "[model] deadline_s: expected a number of seconds, more"),
        ("[model]\ndeadline_s = true", "[model] deadline_s: expected a number, got true"),
        ("[model]\nmax_tokens = -1", "[model] max_tokens: expected an integer from 0 to "),
        ("[model]\nmax_tokens = 1.5", "[model] max_tokens: expected an integer, got 1.5"),
        ("[model]\nretry_max_tokens = -5", "[model] retry_max_tokens: expected an integer"),
        ("[model]\nmax_tokens = 4000\nretry_max_tokens = 4000",
         "config.toml: [model] retry_max_tokens: must be more than [model] max_tokens (4000), "
         "or 0 for no second try"),
        ("[loop]\nmax_steps = 0", "[loop] max_steps: expected an integer from 1 to 1000, got 0"),
        ("[loop]\nmax_steps = 1001", "got 1001"),
        ("[loop]\nmax_depth = -1", "[loop] max_depth: expected an integer from 0 to 16, got -1"),
        ('[loop]\nsystem_prompt = "a\\u0000"', "[loop] system_prompt: must not contain a NUL"),
        ("[broker]\napproval_ttl_s = 0.5", "[broker] approval_ttl_s: expected a number of "
         "seconds, at least 1 and at most 604800, got 0.5"),
        ("[broker]\nresults_kept = 0", "[broker] results_kept: expected an integer from 1"),
        ("[sandbox]\nmemory_mb = 63", "[sandbox] memory_mb: expected an integer from 64"),
        ("[sandbox]\nmax_processes = 0", "[sandbox] max_processes: expected an integer from 1"),
        ("[sandbox]\nshell_timeout_s = 0", "[sandbox] shell_timeout_s: expected a number"),
        ("[sandbox]\ntmp_mb = 0", "[sandbox] tmp_mb: expected an integer from 1"),
        ('[sandbox]\nuser = "root"', "[sandbox] user: expected a user name or a uid, other"),
        ('[sandbox]\nuser = "0"', "[sandbox] user: expected a user name or a uid"),
        ('[sandbox]\nuser = "4294967295"', "[sandbox] user: expected a user name or a uid"),
        ('[sandbox]\nuser = "no body"', "[sandbox] user: expected a user name or a uid"),
        ("[loop]\nmax_calls_per_reply = 0", "[loop] max_calls_per_reply: expected an"),
        ('[sandbox]\nfetch_pins = { "localhost" = "127.0.0.1:1" }',
         '[sandbox] fetch_pins: "localhost": expected a host name'),
        ('[sandbox]\nfetch_pins = { "A.example" = "127.0.0.1:1" }', '"A.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "127.0.0.1" }',
         '[sandbox] fetch_pins: "a.example": expected "ip:port" or "[ipv6]:port", got "127.0.0.1"'),
        ('[sandbox]\nfetch_pins = { "a.example" = "127.0.0.1:0" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "::1:443" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "[127.0.0.1]:443" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "0.0.0.0:443" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "224.0.0.1:443" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = "example.com:443" }', '"a.example": expected'),
        ('[sandbox]\nfetch_pins = { "a.example" = 5 }', '"a.example": expected "ip:port"'),
        ('[sandbox]\nfetch_ca_file = "ca.pem"', "[sandbox] fetch_ca_file: expected"),
        ('[console]\nhost = "not a host"', "[console] host: expected an IP address or a host"),
        ("[console]\nport = 0", "[console] port: expected an integer from 1 to 65535, got 0"),
        ("[console]\nport = 65536", "got 65536"),
        ('[sockets]\nbroker = "http://x"', "[sockets] broker: expected \"\", ipc://"),
        ('[sockets]\nbroker = "ipc://relative.sock"', "[sockets] broker: expected"),
        ('[sockets]\nbroker = "ipc://@abstract"', "[sockets] broker: expected"),
        ('[sockets]\nbroker = "tcp://127.0.0.1"', "[sockets] broker: expected"),
        ('[sockets]\nbroker = "tcp://127.0.0.1:70000"', "[sockets] broker: expected"),
        (f'[sockets]\nadmin = "ipc:///{"a" * 107}"',
         "[sockets] admin: the socket path is longer than 107 bytes"),
        ('[sockets]\nadmin = "tcp://127.0.0.1:5"\ngateway = "tcp://127.0.0.1:5"',
         "config.toml: [sockets] gateway: the same endpoint as [sockets] admin"),
        ('[sockets]\nloop = "tcp://127.0.0.1:5"',
         "config.toml: [sockets] loop: tcp:// needs CURVE, which only admin and gateway have"),
    ],
)  # fmt: skip
def test_a_value_out_of_bounds_or_not_allowed_is_named(text: str, message: str) -> None:
    assert message in _error(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[model\n", "config.toml: not valid TOML: "),
        (b"[model]\nstream = yes\n", "config.toml: not valid TOML: Invalid value (at line 2"),
        (b"[console]\nport = 1\nport = 2\n", "config.toml: not valid TOML: Cannot overwrite"),
        (
            b"[console]\n[console]\n",
            "config.toml line 2: a second [console] table; the first is at line 1",
        ),
        (b'[model]\nmodel = "\xff"\n', "config.toml: not UTF-8 (at byte 17)"),
        (b"\xc3(", "config.toml: not UTF-8 (at byte 0)"),
        (b"[model]\x00\n", "config.toml: contains a NUL byte (at byte 7)"),
        (b"a = " + b"[" * 5000 + b"]" * 5000, "config.toml: not valid TOML: nested too deeply"),
        (b"#" * (5 * 1024 * 1024), f"config.toml: larger than {MAX_CONFIG_BYTES} bytes"),
    ],
)
def test_a_broken_file_is_one_line_naming_the_problem(text: bytes, message: str) -> None:
    assert _error(text).startswith(message)


def test_the_file_may_be_exactly_the_size_limit() -> None:
    assert parse_config(b"#" * MAX_CONFIG_BYTES) == Config()


# -- load_config -----------------------------------------------------------------------------


def test_load_config_names_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"[console]\nport = 9000\n")
    assert load_config(path).console.port == 9000
    path.write_bytes(b'[sandbox]\nmode = "docker"\n')
    with pytest.raises(ConfigError, match=f"^{path}: \\[sandbox\\] mode: expected one of"):
        load_config(path)


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"#" * (5 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        load_config(path)


def test_a_folder_in_place_of_the_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").mkdir()
    with pytest.raises(ConfigError, match=r"config\.toml: cannot be read: Is a directory$"):
        load_config(tmp_path / "config.toml")


def test_a_path_with_a_nul_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"cannot be read: embedded null byte$"):
        load_config(Path("/tmp/a\x00b/config.toml"))


def test_an_unreadable_file_is_one_line() -> None:
    """/proc/self/mem cannot be read at offset 0, by root (as CI runs) or anyone else."""
    with pytest.raises(ConfigError, match=r"/proc/self/mem: cannot be read: Input/output error$"):
        load_config(Path("/proc/self/mem"))


# -- the commented file and the docs ---------------------------------------------------------


def test_the_commented_config_parses_to_exactly_the_defaults() -> None:
    assert parse_config(COMMENTED_CONFIG.encode()) == Config()


def test_the_config_with_every_key_uncommented_also_parses_to_the_defaults() -> None:
    text = render_config(commented=False)
    assert parse_config(text.encode()) == Config()
    every = {(s, k) for s, body in tomllib.loads(text).items() for k in body}
    assert every == {(k.section, k.name) for k in KEYS}


def test_the_commented_config_shows_every_section_and_key_with_its_help() -> None:
    for section in SECTIONS:
        assert f"\n[{section}]\n" in COMMENTED_CONFIG
    for key in KEYS:
        assert f"\n# {key.name} = " in COMMENTED_CONFIG
        assert key.help.split()[0] in COMMENTED_CONFIG
    assert all(len(line) <= 100 for line in COMMENTED_CONFIG.splitlines())


def test_docs_configuration_md_is_the_generated_reference() -> None:
    from bxcore.config.written import config_reference_markdown

    reference = config_reference_markdown()
    assert DOCS.read_text(encoding="utf-8") == reference
    for key in KEYS:
        assert f"`[{key.section}] {key.name}`" in reference


@given(st.text(alphabet=_NO_SURROGATES))
def test_toml_value_writes_any_text_so_that_toml_reads_it_back(text: str) -> None:
    assert tomllib.loads(f"a = {toml_value(text)}")["a"] == text


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=400)
@given(st.binary(max_size=512))
def test_random_bytes_raise_nothing_but_config_error(data: bytes) -> None:
    try:
        parse_config(data)
    except ConfigError as error:
        assert len(str(error).splitlines()) == 1


_ANY_VALUE = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(alphabet=_NO_SURROGATES, max_size=40),
    st.dictionaries(st.sampled_from(["a.example", "x", "b.example"]), st.text(max_size=20)),
)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.sampled_from(KEYS), _ANY_VALUE),
        max_size=6,
        unique_by=lambda pair: (pair[0].section, pair[0].name),
    )
)
def test_any_value_for_any_key_parses_or_is_one_config_error_line(
    pairs: list[tuple[Key, Any]],
) -> None:
    lines = []
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key, value in pairs:
            if key.section == section:
                lines.append(f"{key.name} = {toml_value(value)}")
    try:
        config = parse_config("\n".join(lines).encode())
    except ConfigError as error:
        assert len(str(error).splitlines()) == 1
    else:
        assert isinstance(config, Config)


def test_a_second_model_table_appended_to_the_init_file_names_the_first_ones_line() -> None:
    from bxcore.config.file import ConfigError, parse_config
    from bxcore.config.written import COMMENTED_CONFIG

    first = COMMENTED_CONFIG.split("\n").index("[model]") + 1
    appended = COMMENTED_CONFIG + '\n[model]\nmodel = "qwen2.5:7b"\n'
    again = appended.split("\n").index("[model]", first) + 1
    with pytest.raises(ConfigError) as raised:
        parse_config(appended.encode())
    assert str(raised.value) == (
        f"config.toml line {again}: a second [model] table; the first is at line {first}: "
        "put its keys there, once each"
    )
