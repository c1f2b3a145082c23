"""What the box still has to show in the room (SPEC §21.2): each post's wanted text, sent as a
new message the first time and as an edit after, in the order they were wanted, until the
homeserver took it. A homeserver that is away loses nothing: the newest text of every post is
sent when it is back, and many edits of one post while it was away are one edit.

No I/O of its own: `run` is given the function that sends a post and returns its event id.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

import anyio

from bxcore.matrix_report import backoff_s

log = logging.getLogger("gatewayd")

POSTS_KEPT = 512  # settled posts remembered (to edit them), newest kept
WAITING_KEPT = 2048  # posts waiting while the homeserver is away; past it the oldest is dropped
EDIT_GAP_S = 0.4  # one post is edited at most this often while a turn streams


@dataclass
class Post:
    key: Hashable
    thread: str | None  # the thread it goes in (None: the main timeline)
    reply_to: str | None  # the event it answers, if any
    text: str
    event_id: str | None = None  # once sent
    sent: str | None = None  # the text the homeserver has
    version: int = 0  # counts the texts wanted, so each send has its own transaction id
    on_sent: Callable[[str], None] | None = None  # told the event id once the post is sent


class SendFailed(Exception):
    """The homeserver did not take a post; tried again after a backoff."""


class Refused(Exception):
    """The homeserver refused a post for what it is (too large, forbidden): never tried
    again, so that it holds up none behind it."""


Send = Callable[[Post], Awaitable[str]]


class Outbox:
    def __init__(self, sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        self._sleep = sleep  # the backoff's and the edits' pauses (a test's own)
        self._posts: OrderedDict[Hashable, Post] = OrderedDict()
        self._dirty: OrderedDict[Hashable, None] = OrderedDict()
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"Outbox({len(self._posts)} posts, {len(self._dirty)} to send)"

    def want(
        self,
        key: Hashable,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        on_sent: Callable[[str], None] | None = None,
    ) -> None:
        """Show `text` as post `key` (a new post goes in `thread`, answering `reply_to`)."""
        post = self._posts.get(key)
        if post is None:
            post = Post(key, thread, reply_to, text, on_sent=on_sent)
            self._posts[key] = post
        elif post.text == text:
            return
        post.text = text
        post.version += 1
        self._dirty[key] = None
        while len(self._dirty) > WAITING_KEPT:
            dropped, _ = self._dirty.popitem(last=False)
            log.warning("matrix: more than %d posts wait; the oldest is dropped", WAITING_KEPT)
            self._posts.pop(dropped, None)
        self._changed.set()
        self._forget_old()

    def adopt(self, key: Hashable, event_id: str, thread: str | None) -> None:
        """Post `key` is already in the room as `event_id` (posted before a restart): what is
        wanted of it from now on is an edit."""
        if key not in self._posts:
            self._posts[key] = Post(key, thread, None, "", event_id=event_id)

    def event_of(self, key: Hashable) -> str | None:
        post = self._posts.get(key)
        return None if post is None else post.event_id

    def waiting(self) -> int:
        return len(self._dirty)

    async def run(self, send: Send) -> None:
        """Send what is wanted, oldest first, until cancelled; a failure waits and tries the
        same post again (backoff 0.5 s doubling to 30 s)."""
        failures = 0
        while True:
            if not self._dirty:
                self._changed = anyio.Event()
                await self._changed.wait()
                continue
            key = next(iter(self._dirty))
            post = self._posts[key]
            text = post.text
            try:
                event_id = await send(post)
            except SendFailed as error:
                failures += 1
                log.info("matrix: a post waits (%s); trying again", error)
                await self._sleep(backoff_s(failures))
                continue
            except Refused as error:
                log.warning("matrix: a post was refused (%s); dropped", error)
                self._dirty.pop(key, None)
                continue
            failures = 0
            first = post.event_id is None
            post.event_id = post.event_id or event_id
            post.sent = text
            if post.text == text:
                self._dirty.pop(key, None)
            else:  # changed while it was sent: the newest text goes next, after a pause
                self._dirty.move_to_end(key)
            if first and post.on_sent is not None:
                post.on_sent(post.event_id)
            if not first:
                await self._sleep(EDIT_GAP_S / max(1, len(self._dirty)))

    def _forget_old(self) -> None:
        while len(self._posts) > POSTS_KEPT + len(self._dirty):
            for key in self._posts:
                if key not in self._dirty:
                    del self._posts[key]
                    break
            else:
                return
