"""A bounded history of question/answer turns for apps that stream their answers.

Streaming apps often keep "the last few exchanges" to give the model as context, and often
keep them in a process-global dict keyed by session: lost on restart, wrong with several
workers, and unbounded. ``TurnWindow`` keeps the same thing as plain data that lives in the
graph state, so the checkpointer persists it with the conversation::

    class State(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        turns: TurnHistory                      # a plain last-value key

    def answer(state: State) -> dict:
        window = TurnWindow(state.get("turns"), max_turns=5, max_chars=600)
        window.begin(question)
        for chunk in model.stream([SystemMessage(window.render()), HumanMessage(question)]):
            window.append(chunk)                # safe from any thread
        window.finish()
        return {"turns": window.snapshot()}

The life of a turn: ``begin`` (the user's question), ``append`` (streamed chunks),
``finish`` (archived into the window, abbreviated to ``max_chars``; the oldest turn falls
out past ``max_turns``) or ``abort`` (discarded, as if never asked). After a turn is
finished, ``restart`` (say, when the user rejects the answer) takes it back out of the
window and reopens it with the full question and the user's feedback, ready to be answered
again. Every method holds one lock, so a stream consumer and a cancel button may call it
from different threads.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import SystemMessage
from typing_extensions import TypedDict

from . import _text
from ._core import message_text

logger = logging.getLogger(__name__)

TURNS_MESSAGE_ID = "lgmp-turns"


class TurnRecord(TypedDict):
    """An archived turn (question and answer abbreviated to the window's ``max_chars``)."""

    id: str
    question: str
    answer: str


class OpenTurn(TypedDict):
    """A turn in progress: the full question, the answer streamed so far, feedback given."""

    id: str
    question: str
    answer: str
    feedback: list[str]


class TurnHistory(TypedDict):
    """The persisted form of a ``TurnWindow``: plain values only."""

    turns: list[TurnRecord]
    open: OpenTurn | None
    last: OpenTurn | None
    """The newest finished turn, unabbreviated, so ``restart`` can ask it again."""


class TurnError(RuntimeError):
    """A turn operation that makes no sense in the current state (finish with no turn)."""


def abbreviate(text: str, max_chars: int, marker: str = " […] ") -> str:
    """``text`` cut to at most ``max_chars``, keeping its start and its end.

    Answers tend to open with the gist and close with the conclusion, so both ends are worth
    more than either alone; two thirds of the room go to the start. Cuts fall between
    characters as the reader sees them (never inside an emoji sequence, a surrogate pair
    or a letter with its accents), so a cut can come out a character or two shorter.
    """
    if len(text) <= max_chars:
        return text
    room = max_chars - len(marker)
    if room <= 0:
        return _text.head(text, max_chars)
    start = (room * 2 + 2) // 3
    return _text.head(text, start) + marker + _text.tail(text, room - start)


def _default_format(turn: TurnRecord) -> str:
    return f"User: {turn['question']}\nAssistant: {turn['answer']}"


class TurnWindow:
    """Thread-safe view over a ``TurnHistory`` (see the module docs for the life cycle).

    Args:
        history: the persisted value (``state["turns"]``); ``None`` starts empty.
        max_turns: how many finished turns the window keeps.
        max_chars: the longest a question or answer is kept in the window.
        marker: what stands in for the cut-out middle of an abbreviated text.
        format_turn: renders one turn for ``render`` (default ``User: …\\nAssistant: …``).
    """

    def __init__(
        self,
        history: Mapping[str, Any] | None = None,
        *,
        max_turns: int = 5,
        max_chars: int = 1000,
        marker: str = " […] ",
        format_turn: Callable[[TurnRecord], str] = _default_format,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {max_chars}")
        self.max_turns = max_turns
        self.max_chars = max_chars
        self.marker = marker
        self.format_turn = format_turn
        self._lock = threading.RLock()
        history = copy.deepcopy(dict(history or {}))
        self._turns: list[TurnRecord] = list(history.get("turns") or [])[-max_turns:]
        self._open: OpenTurn | None = history.get("open")
        self._chunks: list[str] = [self._open["answer"]] if self._open else []
        self._last: OpenTurn | None = history.get("last")

    @classmethod
    def from_state(cls, state: Mapping[str, Any], key: str = "turns", **options: Any) -> TurnWindow:
        """The window stored under ``key`` of a graph state (empty if absent)."""
        return cls(state.get(key), **options)

    # -- the life of a turn --------------------------------------------------------------------

    def begin(self, question: str, *, turn_id: str | None = None) -> str:
        """Open a turn for ``question``; returns its id.

        A turn still open is discarded first (logged): its stream was abandoned, typically
        by a crash or a client that went away, and the user has moved on.
        """
        with self._lock:
            if self._open is not None:
                logger.info("discarding unfinished turn %s for a new question", self._open["id"])
            self._open = OpenTurn(
                id=turn_id or uuid.uuid4().hex, question=question, answer="", feedback=[]
            )
            self._chunks = []
            return self._open["id"]

    def append(self, chunk: Any) -> bool:
        """Add a streamed chunk (text, or a message/chunk whose text is used).

        Returns False, and drops the chunk, when no turn is open: chunks still arriving
        after ``abort`` or ``finish`` from another thread must not revive the turn.
        """
        text = chunk if isinstance(chunk, str) else message_text(chunk)
        with self._lock:
            if self._open is None:
                return False
            self._chunks.append(text)
            return True

    def finish(self, answer: str | None = None) -> TurnRecord:
        """Archive the open turn (with ``answer`` if given, else the streamed text)."""
        with self._lock:
            turn = self._require_open("finish")
            full = "".join(self._chunks) if answer is None else answer
            record = TurnRecord(
                id=turn["id"],
                question=abbreviate(turn["question"], self.max_chars, self.marker),
                answer=abbreviate(full, self.max_chars, self.marker),
            )
            self._turns = [*self._turns, record][-self.max_turns :]
            self._last = OpenTurn(
                id=turn["id"], question=turn["question"], answer="", feedback=turn["feedback"]
            )
            self._open, self._chunks = None, []
            return record.copy()

    def abort(self) -> bool:
        """Discard the open turn, if any; returns whether there was one."""
        with self._lock:
            had = self._open is not None
            self._open, self._chunks = None, []
            return had

    def restart(self, feedback: str | None = None) -> str:
        """Reopen the newest turn to answer it again; returns its (full) question.

        With a turn open, its streamed answer is dropped. Otherwise the newest finished turn
        leaves the window and opens again. ``feedback`` (what the user said about the
        rejected answer) is kept with the turn for the app to put in the next prompt.
        """
        with self._lock:
            if self._open is None:
                if self._last is None:
                    raise TurnError("restart: no turn to restart")
                last = self._last
                if self._turns and self._turns[-1]["id"] == last["id"]:
                    self._turns = self._turns[:-1]
                self._open = OpenTurn(
                    id=last["id"], question=last["question"], answer="", feedback=last["feedback"]
                )
                self._last = None
            if feedback:
                self._open["feedback"] = [*self._open["feedback"], feedback]
            self._chunks = []
            return self._open["question"]

    def _require_open(self, operation: str) -> OpenTurn:
        if self._open is None:
            raise TurnError(f"{operation}: no turn is open (call begin first)")
        return self._open

    # -- reading -------------------------------------------------------------------------------

    @property
    def turns(self) -> list[TurnRecord]:
        """The archived turns, oldest first (copies)."""
        with self._lock:
            return copy.deepcopy(self._turns)

    @property
    def current(self) -> OpenTurn | None:
        """The open turn with the answer streamed so far (a copy), or None."""
        with self._lock:
            if self._open is None:
                return None
            return OpenTurn(
                id=self._open["id"],
                question=self._open["question"],
                answer="".join(self._chunks),
                feedback=list(self._open["feedback"]),
            )

    def render(self, header: str = "Earlier in this conversation:") -> str:
        """The window as prompt context ("" when there is nothing to show)."""
        with self._lock:
            if not self._turns:
                return ""
            body = "\n\n".join(self.format_turn(t) for t in self._turns)
        return f"{header}\n{body}" if header else body

    def as_message(self, message_id: str = TURNS_MESSAGE_ID) -> SystemMessage | None:
        """``render()`` as a system message with a stable id (None when empty)."""
        text = self.render()
        return SystemMessage(content=text, id=message_id) if text else None

    def snapshot(self) -> TurnHistory:
        """The plain value to store in state (``{"turns": window.snapshot()}``)."""
        with self._lock:
            current = self.current
            return TurnHistory(
                turns=copy.deepcopy(self._turns),
                open=current,
                last=copy.deepcopy(self._last),
            )
