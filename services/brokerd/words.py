"""The owner's words of each session (SPEC §20): what loopd says the owner typed for a turn
(`owner_words`), recorded in the ledger before it is answered, and given to decisions as the
core's `Words` (`core.owner_words`).

Only an owner's session or a job's run takes words: a sub-agent's are its parent's, never its
task's (the model wrote that); a job's run takes only its job's prompt as the job's file says
it. The words of a turn are given once: asked again, the first stand. A session's words are
read back from the ledger (through its index) when they are not in memory, so a restart keeps
them; memory holds the `Words` of the sessions used last.
"""

from __future__ import annotations

import logging

import anyio

from bxcore.bounded import Bounded
from bxcore.ids import job_run_of, parent_of_sub
from bxcore.wire.messages import Error, ErrorCode, OwnerWords, WordsKept
from services.brokerd.core import records
from services.brokerd.core.owner_words import NO_WORDS, Words
from services.brokerd.job_folder import JobFolder
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import LedgerUnavailable

log = logging.getLogger(__name__)

CACHED = 256  # sessions whose words are kept in memory
SUB_AGENT = "a sub-agent's task is the model's text, not the owner's words"


class WordsBook:
    def __init__(self, committer: Committer, jobs: JobFolder) -> None:
        self._committer = committer
        self._jobs = jobs
        self._cache: Bounded[str, tuple[dict[int, str], Words]] = Bounded(CACHED, recency=True)
        self._lock = anyio.Lock()  # a turn's words are looked for and written as one

    def __repr__(self) -> str:
        return f"WordsBook({len(self._cache)} sessions in memory)"

    async def give(self, message: OwnerWords) -> WordsKept | Error:
        """Record a turn's words, once; refuse a sub-agent's, and a job's run's that are not
        its job's prompt."""
        refused = self._refusal(message)
        if refused is not None:
            return Error(message.id, ErrorCode.INVALID, refused)
        async with self._lock:
            try:
                turns, _ = self._turns(message.session)
                if message.turn in turns:
                    if turns[message.turn] != message.text:
                        why = f"turn {message.turn}'s words were given before, and differ"
                        return Error(message.id, ErrorCode.INVALID, why)
                    return WordsKept(message.id, message.session, message.turn, False)
                entry = records.owner_words(
                    session=message.session, turn=message.turn, text=message.text
                )
                await self._committer.append([entry])
            except LedgerUnavailable as error:
                return Error(message.id, ErrorCode.UNAVAILABLE, f"audit unavailable: {error}")
            turns = {**turns, message.turn: message.text}
            self._cache.put(message.session, (turns, _words(turns)))
        return WordsKept(message.id, message.session, message.turn, True)

    def _refusal(self, message: OwnerWords) -> str | None:
        if parent_of_sub(message.session) is not None:
            return SUB_AGENT
        run = job_run_of(message.session)
        if run is not None and self._jobs.prompt(run[0]) != message.text:
            return f"a run of job {run[0]} takes only its job's prompt as the owner's words"
        return None

    def words_of(self, session: str) -> Words:
        """The owner's words of `session` (a sub-agent's: its parent's), read from the ledger
        when not in memory; none when the ledger cannot say (the owner is then asked)."""
        while (parent := parent_of_sub(session)) is not None:
            session = parent
        try:
            return self._turns(session)[1]
        except LedgerUnavailable as error:
            log.warning("the owner's words of %s cannot be read: %s", session, error)
            return NO_WORDS

    def _turns(self, session: str) -> tuple[dict[int, str], Words]:
        cached = self._cache.get(session)
        if cached is not None:
            return cached
        turns: dict[int, str] = {}
        for record in self._committer.ledger.owner_words(session):
            turn, text = record["turn"], record["text"]
            assert isinstance(turn, int) and isinstance(text, str)  # as `records` checked
            turns.setdefault(turn, text)
        found = (turns, _words(turns))
        self._cache.put(session, found)
        return found


def _words(turns: dict[int, str]) -> Words:
    return Words([turns[turn] for turn in sorted(turns)]) if turns else NO_WORDS
