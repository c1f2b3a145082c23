"""The base of the HTTP providers (`openai`, `anthropic`; SPEC §10.2): the key read from the
environment, never from config; the server reached through `http_client` with its retries;
and one POST per completion, read whole or streamed. A provider subclasses `HttpProvider` and
says where it posts, how it signs, and how it writes and reads its own format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from bxcore.config.file import ModelConfig
from services.loopd.http_client import BACKOFF_S, Body, HttpClient, Sleep, key_note, read_key
from services.loopd.model import Message, ModelError, Offer, Reply
from services.loopd.replies import Streamed


class HttpProvider:
    """A model behind an HTTP API; the `_` methods below are the provider's to fill in."""

    def __init__(
        self,
        config: ModelConfig,
        environ: Mapping[str, str],
        *,
        sleep: Sleep = anyio.sleep,
        backoff: Sequence[float] = BACKOFF_S,
    ) -> None:
        self.config = config
        self._key, self._key_problem = read_key(config.api_key_env, environ)
        self._client = HttpClient(
            config.base_url,
            config.timeout_s,
            config.api_key_env,
            deadline_s=config.deadline_s,
            sleep=sleep,
            backoff=backoff,
        )
        self.url = self._url(self._client.base_url)

    def __repr__(self) -> str:
        key = key_note(self.config.api_key_env, self._key)
        mode = "streamed" if self.config.stream else "whole"
        return f"<{type(self).__name__} {self.config.model!r} at {self.url}, {key}, {mode}>"

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        *,
        max_tokens: int | None = None,
    ) -> Reply:
        if self._key_problem is not None:
            raise ModelError(self._key_problem)
        stream = self.config.stream
        limit = max_tokens if max_tokens is not None else self.config.max_tokens
        body = self._body(system, messages, tools, stream, limit)
        headers = self._headers(self._key)
        if stream:
            headers["accept"] = "text/event-stream"

        async def read(answer: Body) -> Reply:
            if stream:
                return await self._streamed(answer, messages)
            return self._whole(await answer.json(), messages)

        return await self._client.post(self.url, body, headers, read)

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- what a provider says ---------------------------------------------------------------

    def _url(self, base_url: str) -> str:
        """Where completions are posted, from the base URL without its trailing `/`."""
        raise NotImplementedError

    def _headers(self, key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _body(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Offer],
        stream: bool,
        max_tokens: int,
    ) -> dict[str, Any]:
        """The request; `max_tokens` 0 is the provider's default."""
        raise NotImplementedError

    def _whole(self, body: Any, messages: Sequence[Message]) -> Reply:
        raise NotImplementedError

    def _stream_reader(self) -> Streamed:
        """A reader of one streamed answer, in the provider's event format."""
        raise NotImplementedError

    async def _streamed(self, answer: Body, messages: Sequence[Message]) -> Reply:
        """A streamed answer, read event by event until its end marker; a server that
        answers whole despite `stream: true` is read as a whole answer."""
        if not answer.is_event_stream:
            return self._whole(await answer.json(), messages)
        streamed = self._stream_reader()
        async for event in answer.events():
            if streamed.take(event.data):
                break
        return streamed.reply(messages)
