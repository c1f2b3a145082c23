"""What the guided `bxctl init` offers and writes (docs/cli.md): the model servers it knows,
where a local one may listen, how an owner's replies are read, and the config file with the
chosen `[model]` filled in.

Pure: no I/O. The servers are those of docs/models.md's table; the places probed for a local
server are their usual ports on 127.0.0.1, and the address `$OLLAMA_HOST` or
`$OPENAI_BASE_URL` names, as those servers' own tools read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from bxcore.config.written import COMMENTED_CONFIG, toml_value


@dataclass(frozen=True)
class Server:
    """A model server the owner may choose: `local` ones are probed, the others asked of."""

    family: str
    provider: str
    base_url: str
    model: str  # a model to offer when the server lists none
    key_env: str  # the key's usual variable; "" for none
    local: bool = False
    models: tuple[str, ...] | None = None  # what it listed, when it was found answering

    @property
    def found(self) -> bool:
        return self.models is not None

    def shown(self) -> str:
        where = f"{self.family} at {self.base_url}" if self.base_url else self.family
        if self.models is None:
            return where
        count = len(self.models)
        return f"{where} (answering, {count} model{'' if count == 1 else 's'})"


SERVERS: tuple[Server, ...] = (
    Server("Ollama", "openai", "http://127.0.0.1:11434/v1", "qwen2.5:7b", "", local=True),
    Server("llama.cpp", "openai", "http://127.0.0.1:8080/v1", "local", "", local=True),
    Server(
        "vLLM", "openai", "http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct", "", local=True
    ),
    Server(
        "LM Studio", "openai", "http://127.0.0.1:1234/v1", "qwen2.5-7b-instruct", "", local=True
    ),
    Server(
        "LiteLLM proxy",
        "openai",
        "http://127.0.0.1:4000/v1",
        "my-model",
        "LITELLM_API_KEY",
        local=True,
    ),
    Server("OpenAI", "openai", "https://api.openai.com/v1", "gpt-4.1-mini", "OPENAI_API_KEY"),
    Server(
        "Anthropic",
        "anthropic",
        "https://api.anthropic.com",
        "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY",
    ),
    Server(
        "OpenRouter",
        "openai",
        "https://openrouter.ai/api/v1",
        "openai/gpt-4.1-mini",
        "OPENROUTER_API_KEY",
    ),
    Server(
        "Groq",
        "openai",
        "https://api.groq.com/openai/v1",
        "llama-3.3-70b-versatile",
        "GROQ_API_KEY",
    ),
    Server("DeepSeek", "openai", "https://api.deepseek.com", "deepseek-chat", "DEEPSEEK_API_KEY"),
    Server(
        "Gemini",
        "openai",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "gemini-2.5-flash",
        "GEMINI_API_KEY",
    ),
)
#: The last choice: any OpenAI-compatible server, at the address the owner gives.
OTHER = Server("another OpenAI-compatible server (you give its address)", "openai", "", "local", "")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def probed(environ: Mapping[str, str]) -> list[Server]:
    """The local servers to probe: each family's usual address, and first the one
    `$OLLAMA_HOST` or `$OPENAI_BASE_URL` names (when it is another), as their tools read it."""
    found = [server for server in SERVERS if server.local]
    named: list[Server] = []
    ollama = _ollama_url(environ.get("OLLAMA_HOST", ""))
    if ollama is not None:
        named.append(replace(SERVERS[0], base_url=ollama))
    openai = environ.get("OPENAI_BASE_URL", "").strip().rstrip("/")
    if _http_url(openai):
        named.append(replace(OTHER, family="the server $OPENAI_BASE_URL names", base_url=openai))
    places = {server.base_url for server in found}
    return [s for s in named if s.base_url not in places] + found


def _ollama_url(value: str) -> str | None:
    """`$OLLAMA_HOST` as Ollama reads it (`host`, `host:port` on port 11434 unless said, or a
    URL on its scheme's port unless said; 0.0.0.0 is every address, so this machine's) as
    the address of its OpenAI-compatible API."""
    value = value.strip().rstrip("/")
    if not value:
        return None
    default = 11434
    if "://" not in value:
        value = "http://" + value
    else:
        default = 443 if value.startswith("https://") else 80
    try:
        parts = urlsplit(value)
        port = parts.port or default
    except ValueError:
        return None
    host = parts.hostname
    if not host:
        return None
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{port}/v1"


def _http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def choices(found: Sequence[Server]) -> list[Server]:
    """What the owner chooses from: the servers found answering first, then every known one
    not found, then any other."""
    answering = [server for server in found if server.found]
    places = {server.base_url for server in answering}
    rest = [server for server in SERVERS if server.base_url not in places]
    return [*answering, *rest, OTHER]


# --- the owner's replies ------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """A reply that is not an answer: ask again, after saying `why`."""

    why: str


def pick(reply: str, count: int, default: int) -> int | Retry:
    """A number from 1 to `count` (empty: `default`), as an index from 0."""
    text = reply.strip()
    if not text:
        return default
    if text.isdigit() and 1 <= int(text) <= count:
        return int(text) - 1
    return Retry(f"type a number from 1 to {count}, or nothing for {default + 1}")


def yes(reply: str, default: bool) -> bool | Retry:
    text = reply.strip().lower()
    if not text:
        return default
    if text in ("y", "yes"):
        return True
    if text in ("n", "no"):
        return False
    return Retry("type y or n")


def model_name(reply: str, listed: Sequence[str], default: str) -> str | Retry:
    """A listed model by its number, or a name as typed (empty: `default`)."""
    text = reply.strip()
    if not text:
        return default
    if text.isdigit() and listed:
        index = int(text)
        if 1 <= index <= len(listed):
            return listed[index - 1]
        return Retry(f"type a number from 1 to {len(listed)}, or a model's name")
    if any(char.isspace() or not char.isprintable() for char in text) or len(text) > 256:
        return Retry("a model's name has no spaces (as the server lists it)")
    return text


def key_env(reply: str, default: str) -> str | Retry:
    """The name of the key's environment variable; `-` for none (empty: `default`)."""
    text = reply.strip()
    if not text:
        return default
    if text == "-":
        return ""
    if text.startswith("$"):
        text = text[1:]
    if _ENV_NAME.fullmatch(text) is None:
        if len(text) > 20 and " " not in text:
            return Retry(
                "that looks like a key itself: give the name of the variable that holds it"
            )
        return Retry("a variable's name: letters, digits and _, like OPENAI_API_KEY")
    return text


def base_url(reply: str) -> str | Retry:
    text = reply.strip().rstrip("/")
    if not _http_url(text):
        return Retry("an http:// or https:// address, like http://127.0.0.1:8080/v1")
    return text


# --- what is written ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    base_url: str
    model: str
    api_key_env: str


def config_text(choice: ModelChoice, template: str = COMMENTED_CONFIG) -> str:
    """The commented config `bxctl init` writes, with the chosen `[model]` keys set in its one
    `[model]` table (each in place of its commented default), so that editing it later never
    needs a second `[model]` table."""
    lines = template.split("\n")
    start = lines.index("[model]")
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("[")), len(lines))
    values = {
        "provider": choice.provider,
        "base_url": choice.base_url,
        "model": choice.model,
        "api_key_env": choice.api_key_env,
    }
    for number in range(start + 1, end):
        for key, value in values.items():
            if lines[number].startswith(f"# {key} = "):
                lines[number] = f"{key} = {toml_value(value)}"
    return "\n".join(lines)
