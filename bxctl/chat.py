"""`bxctl chat` (SPEC §12, §13): the owner talks to the agent through gatewayd, watches the
turn, and answers approvals inline when standard input is a terminal.

Every line of a turn is shown in the agent's gutter (`owner_view.AGENT`); the box's cards,
prompts and verdicts never are, so the model cannot draw a prompt the owner would take for
the box's. Before each question, what was typed ahead is thrown away, and only the code of
the card's own approval id approves it (`card_answer`). A closed or empty standard input is
never an answer: end of input leaves an approval for later (`bxctl approve`, the console), and
an empty line asks again. Without a terminal, an approval is printed whole and chat waits for
the verdict from elsewhere.

A tool's output is folded to its size unless asked for (`--show-output`; `/output` in the
console shows the last one). Ctrl-C during a turn stops it (`cancel`, §12.2; `turn`), and a
second Ctrl-C, or one at the console's prompt, leaves.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import NoReturn, TextIO

from bxcore.clock import now_ms
from bxcore.owner_text import SHOW_OUTPUT, done_lines, event_lines, until
from bxcore.visible import visible
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Accepted,
    ApprovalInfo,
    ApprovalRequested,
    Cancel,
    EndReason,
    Error,
    ErrorCode,
    EventsQuery,
    OwnerMessage,
    PendingQuery,
    Ping,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnEvent,
    VerdictRequest,
)
from bxctl.card_answer import NotAnAnswer, prompt, read_answer
from bxctl.keyboard import Keyboard, NothingYet
from bxctl.output import CommandError, fail, terminal_width
from bxctl.owner_link import OwnerLink, request_id
from bxctl.owner_view import agent_lines, approval_card, verdict_line

WAIT_MS = 5_000  # one long poll; sub-agents' approvals show within it
CHECK_S = 1.0  # while the owner thinks, whether the approval is still pending
PATIENCE_S = 30.0  # how long gatewayd may say loopd or brokerd is unavailable mid-turn
OUTPUT_COMMAND = "/output"
HELP_COMMAND = "/help"
CONSOLE_HINT = f"{OUTPUT_COMMAND} shows it"
CONSOLE_HELP = (
    "Each line you type is a message to the agent.",
    f"  {OUTPUT_COMMAND}  the last tool's output, whole (as the agent's turn folds it)",
    f"  {HELP_COMMAND}    this help",
    "  Ctrl-C  during a turn: stop it (its pending approvals are denied); again: leave",
    "  Ctrl-D  at the prompt: leave (so does Ctrl-C there)",
)


class SettledElsewhere:
    """The approval left the pending list while the owner was being asked."""


class Chat:
    def __init__(
        self,
        link: OwnerLink,
        session: str,
        *,
        by: str,
        keyboard: Keyboard | None,
        as_json: bool = False,
        show_output: bool = False,
        no_wait: bool = False,
        out: TextIO = sys.stdout,
        width: Callable[[], int | None] = terminal_width,
    ) -> None:
        self.link = link
        self.session = session
        self.by = by
        self.keyboard = keyboard  # None: approvals are answered elsewhere
        self.as_json = as_json
        self.show_output = show_output  # each tool's output in full, not folded
        self.no_wait = no_wait  # an approval not asked inline ends the watch (`--no-wait`)
        self.hint = SHOW_OUTPUT  # how to see a folded output (the console has its command)
        self.last_done: ToolDone | None = None  # the last call that gave an output
        self.cursor = 0  # the newest seq of the session read so far
        self._out = out
        self._width = width  # the terminal's columns now (None: not a terminal)
        self._shown: set[str] = set()  # approvals asked about or printed
        self._waits_said: set[str] = set()  # approvals whose "… waits for" line is shown

    def __repr__(self) -> str:
        how = "inline" if self.keyboard is not None and not self.as_json else "elsewhere"
        return f"Chat({self.session} after seq {self.cursor}, approvals answered {how})"

    def say(self, *lines: str) -> None:
        for line in lines:
            self._out.write(line + "\n")
        self._out.flush()

    # --- a turn ------------------------------------------------------------------------------

    def send(self, text: str) -> int:
        """Hand the owner's message to the agent; the turn it runs as."""
        message = OwnerMessage(request_id("chat"), self.session, text)
        answer = self.link.ask(message)
        if isinstance(answer, Accepted):
            self.cursor = max(self.cursor, answer.seq - 1)  # older history is not this turn's
            return answer.turn
        _refused(answer)

    def follow(self, turn: int) -> EndReason | None:
        """Show `turn` as it happens, and the approvals it waits for, until it ends (None:
        it waits for an approval and `no_wait` left it to the owner's other ways)."""
        patience: float | None = None  # while loopd or brokerd restarts, keep asking a while
        while True:
            query = EventsQuery(request_id("chat"), self.session, self.cursor, WAIT_MS)
            answer = self.link.ask(query)
            if isinstance(answer, Error) and answer.code is ErrorCode.UNAVAILABLE:
                patience = patience or time.monotonic() + PATIENCE_S
                if time.monotonic() < patience:
                    time.sleep(1.0)
                    continue
            if isinstance(answer, Error):
                _refused(answer)
            patience = None
            ended: EndReason | None = None
            for event in answer.events:
                self.cursor = max(self.cursor, event.seq)
                if event.turn == turn:
                    self.show(event)
                    if isinstance(event.event, TurnEnd):
                        ended = event.event.reason
            if ended is not None:
                return ended
            for info in answer.pending:
                if info.approval not in self._shown:
                    self._shown.add(info.approval)
                    if not self.approval(info):
                        return None

    def show(self, event: TurnEvent) -> None:
        if isinstance(event.event, ToolDone) and event.event.output:
            self.last_done = event.event
        if isinstance(event.event, ToolPending) and not self.as_json:
            if event.event.approval in self._waits_said:
                return  # said before its card, which came first (`approval`)
            self._waits_said.add(event.event.approval)
        if self.as_json:
            self.say(wire.encode(event).decode())
        else:
            lines = event_lines(event.event, show_output=self.show_output, hint=self.hint)
            self.say(*agent_lines(lines, self._width()))

    def show_last_output(self) -> None:
        """The last tool output of this chat, whole (`/output`)."""
        if self.last_done is None:
            self.say("no tool has given an output in this chat yet")
            return
        lines = done_lines(self.last_done, show_output=True, hint=None)
        self.say(*agent_lines(lines, self._width()))

    def stop(self) -> None:
        """Ask gatewayd to stop the session's running turn (Ctrl-C), and say what became of
        it; the turn's end comes as its last event."""
        self.say("", "stopping the turn… (Ctrl-C again leaves)")
        answer = self.link.ask(Cancel(request_id("chat"), self.session))
        if isinstance(answer, Error):
            self.say(f"could not stop the turn: {visible(answer.message)} ({answer.code})")
        elif answer.turn is None:
            self.say("no turn was running")
        else:
            self.say(f"turn {answer.turn} stopped; its pending approvals are denied")

    # --- approvals ---------------------------------------------------------------------------

    def approval(self, info: ApprovalInfo) -> bool:
        """Show an approval, and ask it inline when there is a keyboard; False when `no_wait`
        leaves it to the owner's other ways."""
        if self.as_json:  # never asked inline: a script answers with `bxctl approve`
            self.say(wire.encode(ApprovalRequested(info)).decode())
            return not self.no_wait
        if info.session == self.session and info.approval not in self._waits_said:
            # The pending list can come before the turn's own event: its line goes first, so
            # that "… waits for X" is never read after "approved X".
            self._waits_said.add(info.approval)
            waits = ToolPending(info.tool, info.approval)
            self.say(*agent_lines(event_lines(waits), self._width()))
        self.say(*approval_card(info, now_ms(), self._width()))
        if self.no_wait:
            self.say(_not_waiting(info))
            return False
        if self.keyboard is None:
            self.say(_elsewhere(info))
            return True
        while True:
            self.keyboard.discard()  # typed before this card was shown: not an answer to it
            self._out.write(prompt(info))
            self._out.flush()
            reply = self._read_answer(self.keyboard, info.approval)
            if isinstance(reply, SettledElsewhere):
                self.say("", f"{info.approval} was settled elsewhere")
                return True
            if reply is None:  # end of input: not an answer (§13)
                self.say("", f"left for later; {_elsewhere(info)}")
                return True
            verdict = read_answer(reply, info)
            if verdict is None:
                continue  # an empty line is not an answer: ask again
            if isinstance(verdict, NotAnAnswer):
                self.say(verdict.why)
                continue
            request = VerdictRequest(
                request_id("chat"), info.approval, verdict.approve, verdict.scope, self.by
            )
            answer = self.link.ask(request)
            self.say(verdict_line(info.approval, answer)[0])
            if isinstance(answer, Error) and answer.code is ErrorCode.UNAVAILABLE:
                self._shown.discard(info.approval)  # not settled: ask again at the next poll
            return True

    def _read_answer(self, keyboard: Keyboard, approval: str) -> str | SettledElsewhere | None:
        """A line from the terminal; None at its end; SettledElsewhere if, while waiting, the
        approval stopped being pending."""
        while True:
            line = keyboard.line(CHECK_S)
            if not isinstance(line, NothingYet):
                return line
            if not self._still_pending(approval):
                return SettledElsewhere()

    def _still_pending(self, approval: str) -> bool:
        try:
            answer = self.link.ask(PendingQuery(request_id("chat")))
        except CommandError:  # gatewayd did not answer: the owner's answer may still count
            return True
        if isinstance(answer, Error):
            return True  # cannot tell: keep asking
        return any(info.approval == approval for info in answer.approvals)

    # --- the console -------------------------------------------------------------------------

    def console(self) -> None:
        """Each line a message, each turn followed to its end (Ctrl-C stops it); end of input,
        or Ctrl-C at the prompt, leaves."""
        self.link.ask(Ping(request_id("chat")))  # is it up?
        self.hint = CONSOLE_HINT
        if self.keyboard is not None:
            self.say(
                f"boxmaker chat, session {self.session}; {HELP_COMMAND} for help, "
                "Ctrl-C stops a turn, Ctrl-D leaves"
            )
        while True:
            try:
                line = self._read_message()
            except KeyboardInterrupt:
                line = None
            if line is None:
                if self.keyboard is not None:
                    self.say("")
                return
            command = line.strip()
            if command == OUTPUT_COMMAND:
                self.show_last_output()
            elif command == HELP_COMMAND:
                self.say(*CONSOLE_HELP)
            elif command:
                self.turn(self.send(line))

    def turn(self, turn: int) -> EndReason | None:
        """Follow `turn` to its end (None: left waiting, `no_wait`); a first Ctrl-C stops it, a
        second one leaves (raised)."""
        try:
            return self.follow(turn)
        except KeyboardInterrupt:
            self.stop()
        return self.follow(turn)

    def _read_message(self) -> str | None:
        if self.keyboard is None:
            data = sys.stdin.buffer.readline()
            return data.decode("utf-8", "replace").rstrip("\n") if data else None
        self._out.write("you> ")
        self._out.flush()
        line = self.keyboard.line()
        return None if isinstance(line, NothingYet) else line


def _elsewhere(info: ApprovalInfo) -> str:
    return (
        f"waiting for the owner's verdict: {_answers(info.approval)}; it expires "
        f"{until(info.expires, now_ms())} (`bxctl chat --no-wait` does not wait)"
    )


def _not_waiting(info: ApprovalInfo) -> str:
    return (
        f"not waiting (--no-wait); the turn waits for {_answers(info.approval)}, "
        f"until it expires {until(info.expires, now_ms())}"
    )


def _answers(approval: str) -> str:
    return f"`bxctl approve {approval}` or `bxctl deny {approval}` (or the console)"


def _refused(answer: Error) -> NoReturn:
    fail(f"gatewayd: {visible(answer.message)} ({answer.code})")
