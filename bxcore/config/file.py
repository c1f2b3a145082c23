"""The owner's settings, `{home}/config.toml` (SPEC §14), parsed strictly into frozen dataclasses.

`parse_config` is pure; `load_config` only reads the file. Every key has a default (the table
in `bxcore.config.keys`), and every problem is one `ConfigError` line naming the key. The
commented file `bxctl init` writes, and the reference page, are `bxcore.config.written`'s.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bxcore.config.keys import KEYS, SECTIONS, Key, Kind, default, show, show_name, table_values
from bxcore.config.matrix import MatrixConfig, TableError, parse_matrix
from bxcore.config.mcp import EntryError, McpServer, parse_mcp_entries
from bxcore.home.layout import SOCKETS, Home

MAX_CONFIG_BYTES = 1 << 20
#: The sockets that authenticate with CURVE, and so alone may be moved to tcp:// (§3.6).
CURVE_SOCKETS = frozenset({"admin", "gateway"})


class ConfigError(Exception):
    """config.toml cannot be used; `str()` is one line that names the file and the key."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True)
class ModelConfig:
    provider: str = default("model", "provider")
    base_url: str = default("model", "base_url")
    model: str = default("model", "model")
    api_key_env: str = default("model", "api_key_env")
    stream: bool = default("model", "stream")
    timeout_s: float = default("model", "timeout_s")
    deadline_s: float = default("model", "deadline_s")
    max_tokens: int = default("model", "max_tokens")
    retry_max_tokens: int = default("model", "retry_max_tokens")
    script: str = default("model", "script")


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int = default("loop", "max_steps")
    max_depth: int = default("loop", "max_depth")
    max_calls_per_reply: int = default("loop", "max_calls_per_reply")
    max_tokens_per_day: int = default("loop", "max_tokens_per_day")
    context_chars: int = default("loop", "context_chars")
    system_prompt: str = default("loop", "system_prompt")
    subagent_prompt: str = default("loop", "subagent_prompt")


@dataclass(frozen=True)
class BrokerConfig:
    approval_ttl_s: float = default("broker", "approval_ttl_s")
    results_kept: int = default("broker", "results_kept")


@dataclass(frozen=True)
class SandboxConfig:
    mode: str = default("sandbox", "mode")
    file_timeout_s: float = default("sandbox", "file_timeout_s")
    shell_timeout_s: float = default("sandbox", "shell_timeout_s")
    fetch_timeout_s: float = default("sandbox", "fetch_timeout_s")
    memory_mb: int = default("sandbox", "memory_mb")
    max_processes: int = default("sandbox", "max_processes")
    tmp_mb: int = default("sandbox", "tmp_mb")
    user: str = default("sandbox", "user")
    fetch_pins: Mapping[str, str] = field(
        default_factory=lambda: default("sandbox", "fetch_pins"), hash=False
    )
    fetch_ca_file: str = default("sandbox", "fetch_ca_file")


@dataclass(frozen=True)
class ConsoleConfig:
    host: str = default("console", "host")
    port: int = default("console", "port")
    enabled: bool = default("console", "enabled")
    allowed_hosts: tuple[str, ...] = default("console", "allowed_hosts")


@dataclass(frozen=True)
class SocketsConfig:
    """One endpoint override per socket; "" means `ipc://` in the run folder."""

    broker: str = default("sockets", "broker")
    admin: str = default("sockets", "admin")
    broker_events: str = default("sockets", "broker-events")
    loop: str = default("sockets", "loop")
    loop_events: str = default("sockets", "loop-events")
    memory: str = default("sockets", "memory")
    gateway: str = default("sockets", "gateway")
    supervisor: str = default("sockets", "supervisor")

    def endpoint(self, name: str, home: Home) -> str:
        """The endpoint of socket `name`: the override, else the home's ipc endpoint."""
        if name not in SOCKETS:
            raise ValueError(f"no such socket: {name!r}")
        override: str = getattr(self, name.replace("-", "_"))
        return override or home.endpoint(name)


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    sockets: SocketsConfig = field(default_factory=SocketsConfig)
    mcp: tuple[McpServer, ...] = ()  # the [[mcp]] entries (§18.1), in the file's order
    matrix: MatrixConfig | None = None  # the phone channel (§21.1); None: no channel


SECTION_CLASSES: Mapping[str, type[Any]] = MappingProxyType(
    {
        "model": ModelConfig,
        "loop": LoopConfig,
        "broker": BrokerConfig,
        "sandbox": SandboxConfig,
        "console": ConsoleConfig,
        "sockets": SocketsConfig,
    }
)

#: Each section's keys by name.
_KEYS = {section: {k.name: k for k in KEYS if k.section == section} for section in SECTIONS}


def load_config(path: Path) -> Config:
    """Read and parse `path`; a missing file gives the defaults."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return Config()
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path}: cannot be read: {why}") from None
    return parse_config(data, str(path))


def parse_config(text: bytes, source: str = "config.toml") -> Config:
    """Parse the bytes of a config file. Pure; raises only `ConfigError`."""
    document = _toml(text, source)
    sections: dict[str, Any] = {}
    for section, body in document.items():
        where = f"{source}: [{show_name(section)}]"
        if section == "mcp":
            sections["mcp"] = _mcp(body, source)
            continue
        if section == "matrix":
            sections["matrix"] = _matrix(body, source)
            continue
        if section not in SECTIONS:
            raise ConfigError(f"{where}: unknown section")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: expected a table, got {show(body)}")
        values = table_values(body, _KEYS[section].get, where, _value, ConfigError)
        sections[section] = SECTION_CLASSES[section](**values)
    config = Config(**sections)
    _check_together(config, source)
    return config


def _mcp(body: Any, source: str) -> tuple[McpServer, ...]:
    def check(key: Key, value: Any, where: str) -> Any:
        return _value(key, value, f"{source}: {where}")

    try:
        return parse_mcp_entries(body, check)
    except EntryError as error:
        raise ConfigError(f"{source}: {error}") from None


def _matrix(body: Any, source: str) -> MatrixConfig:
    def check(key: Key, value: Any, where: str) -> Any:
        return _value(key, value, f"{source}: {where}")

    try:
        return parse_matrix(body, check)
    except TableError as error:
        raise ConfigError(f"{source}: {error}") from None


def _toml(text: bytes, source: str) -> dict[str, Any]:
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes")
    nul = text.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{source}: contains a NUL byte (at byte {nul})")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 (at byte {exc.start})") from None
    try:
        return tomllib.loads(decoded.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        said = _twice(decoded, str(exc), source) or f"{source}: not valid TOML: {exc}"
        raise ConfigError(said) from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid TOML: nested too deeply") from None


_DECLARED = re.compile(r"Cannot declare \((.*)\) twice \(at line (\d+), column \d+\)")
_HEADER = re.compile(r"\s*\[\s*([A-Za-z0-9_.\- ]+?)\s*\]\s*(#.*)?")


def _twice(text: str, problem: str, source: str) -> str | None:
    """For a table declared twice (an owner who appends a `[model]` table to the file `bxctl
    init` wrote, which has one), the line that says where the first one is; None otherwise."""
    found = _DECLARED.fullmatch(problem)
    if found is None:
        return None
    again = int(found.group(2))
    lines = text.removeprefix("\ufeff").split("\n")
    for number, line in enumerate(lines[: again - 1], start=1):
        header = _HEADER.fullmatch(line)
        if header is None:
            continue
        name = tuple(part.strip() for part in header.group(1).split("."))
        if repr(name) == f"({found.group(1)})":
            shown = ".".join(name)
            return (
                f"{source} line {again}: a second [{shown}] table; the first is at line "
                f"{number}: put its keys there, once each"
            )
    return None


def _value(key: Key, value: Any, where: str) -> Any:
    """Check the type (a bool is no number; an int is a fine float), then the key's check."""
    is_bool = isinstance(value, bool)
    if key.kind is Kind.STRING:
        ok = isinstance(value, str)
    elif key.kind is Kind.INTEGER:
        ok = isinstance(value, int) and not is_bool
    elif key.kind is Kind.NUMBER:
        ok = isinstance(value, int | float) and not is_bool
        value = float(value) if ok else value
    elif key.kind is Kind.BOOLEAN:
        ok = is_bool
    elif key.kind is Kind.LIST:
        ok = isinstance(value, list)
    else:
        ok = isinstance(value, dict)
    if not ok:
        raise ConfigError(f"{where}: expected {key.kind.value}, got {show(value)}")
    why = key.check.why(value)
    if why is not None:
        raise ConfigError(f"{where}: {why}")
    if key.kind is Kind.LIST:
        return tuple(value)
    return MappingProxyType(dict(value)) if key.kind is Kind.TABLE else value


def _check_together(config: Config, source: str) -> None:
    """The rules that read two keys at once."""
    if config.model.provider == "scripted" and not config.model.script:
        raise ConfigError(f'{source}: [model] script: needed when provider = "scripted"')
    model = config.model
    if 0 < model.retry_max_tokens <= model.max_tokens:
        raise ConfigError(
            f"{source}: [model] retry_max_tokens: must be more than [model] max_tokens "
            f"({model.max_tokens}), or 0 for no second try"
        )
    seen: dict[str, str] = {}
    for key in KEYS:
        if key.section != "sockets":
            continue
        value = getattr(config.sockets, key.attr)
        if value.startswith("tcp://") and key.name not in CURVE_SOCKETS:
            raise ConfigError(
                f"{source}: [sockets] {key.name}: tcp:// needs CURVE, which only "
                f"{' and '.join(sorted(CURVE_SOCKETS))} have; use ipc://"
            )
        if value and value in seen:
            raise ConfigError(
                f"{source}: [sockets] {key.name}: the same endpoint as [sockets] {seen[value]}"
            )
        seen[value] = key.name
