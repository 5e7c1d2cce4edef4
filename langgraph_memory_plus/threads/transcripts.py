"""Transcripts: what the user said and saw in a thread, kept apart from its checkpoints.

Checkpoints are runtime state (days of TTL, trimmed, summarized, deleted with the
thread); a transcript is the readable history for the user's "history" page and for
audit, kept for ``transcript_ttl`` (years, or forever) and untouched by the checkpoint
TTL, ``delete_thread``, ``prune``, trimming and summarization. Only its own TTL removes
it (and erasure, later).

The saver records it from the ``messages`` channel of root checkpoints it stores, in the
same statement, transaction or script as the checkpoint: human messages and assistant
text only (no tool calls or results, no AI turn that only called tools, no message this
package injects: their ids start with ``lgmp-``, e.g. ``lgmp-profile``,
``lgmp-summary``, ``lgmp-turns``). Each message is recorded once, keyed by its id;
the saver remembers which ids it recorded per thread, so a put sends only new messages
(a new process sends a thread's messages once more; the storage ignores known ids).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from .core import message_role, message_text

OWN_MESSAGE_PREFIX = "lgmp-"
"""Ids of the messages this package injects (profile, running summary, turn notes)."""
MAX_THREADS_REMEMBERED = 10_000


class TranscriptMessage(TypedDict):
    id: str
    role: str
    """``human`` or ``ai``."""
    content: str
    created_at: datetime


@dataclass(frozen=True)
class Line:
    id: str
    role: str
    text: str


def _clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL; keep every backend's transcript the same.
    return text.replace("\x00", "\ufffd")


def lines_of(messages: Any, known: set[str] | None) -> list[Line]:
    """The messages worth a transcript line, minus ids already recorded."""
    if not isinstance(messages, list):
        return []
    out: list[Line] = []
    seen = set(known or ())
    for message in messages:
        msg_id = getattr(message, "id", None)
        if msg_id is None and isinstance(message, dict):
            msg_id = message.get("id")
        if not isinstance(msg_id, str) or not msg_id or msg_id in seen:
            continue
        if msg_id.startswith(OWN_MESSAGE_PREFIX):
            continue
        role = message_role(message)
        if role not in ("human", "ai"):
            continue
        text = message_text(message)
        if not text.strip():  # an AI turn that only called tools, an empty message
            continue
        seen.add(msg_id)
        out.append(Line(_clean(msg_id), role, _clean(text)))
    return out


class RecordedIds:
    """Per thread, the message ids this process recorded (bounded, least recent out)."""

    def __init__(self, limit: int = MAX_THREADS_REMEMBERED) -> None:
        self._limit = limit
        self._ids: OrderedDict[bytes, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, thread_key: bytes) -> set[str]:
        with self._lock:
            found = self._ids.get(thread_key)
            if found is None:
                return set()
            self._ids.move_to_end(thread_key)
            return set(found)

    def add(self, thread_key: bytes, lines: Sequence[Line]) -> None:
        if not lines:
            return
        with self._lock:
            self._ids.setdefault(thread_key, set()).update(line.id for line in lines)
            self._ids.move_to_end(thread_key)
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)
