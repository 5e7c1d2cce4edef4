"""The thread index's core: the record, how its status is derived, and query checking.

Every saver keeps one small record per thread beside its checkpoints, updated by the
same statement, script or transaction as the write that changes the thread (see the
backend modules of this package). This module holds what all backends share: what a
record says, how a record is derived from a thread's latest checkpoint and its pending
writes, how a search is checked, and the exact filter every backend applies.

A record follows the ``Thread`` of ``langgraph_sdk`` (``thread_id``, ``created_at``,
``updated_at``, ``metadata``, ``status``, ``interrupts``), so code written against the
hosted server's ``threads.search`` ports as is, plus ``title`` and ``size``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypedDict

from langgraph.types import Interrupt

from ..errors import InvalidConfigError

# LangGraph's channels for a task's interrupt and failure (private names there, stable:
# they key its WRITES_IDX_MAP and every stored checkpoint's pending writes).
INTERRUPT = "__interrupt__"
ERROR = "__error__"

Status = Literal["idle", "interrupted", "error"]
STATUSES = ("idle", "interrupted", "error", "busy")
"""Accepted as ``status=``: ``busy`` is the hosted server's; no saver reports it, so a
search for it finds nothing (code that asks for it keeps working)."""
SORT_BY = ("updated_at", "created_at", "thread_id", "status", "state_updated_at")
SORT_ORDERS = ("asc", "desc")
DEFAULT_INDEX_KEYS = ("user_id",)
TITLE_GRAPHEMES = 50
MAX_LIMIT = 10_000
MAX_OFFSET = 2**62
"""Past any index's size, and with ``limit`` added still a 64-bit integer for the drivers."""


def check_unicode(value: Any, what: str) -> None:
    """Refuse a lone surrogate (text that is not valid Unicode) anywhere in ``value``.

    Every driver encodes filters as UTF-8 (or JSON, which must be Unicode), so such text
    would fail there with a driver's error; this names it instead.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidConfigError(
                    f"{what} contains text that is not valid Unicode (a lone surrogate): "
                    f"{ascii(item)[:80]}"
                ) from None
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)


@functools.lru_cache(maxsize=4096)
def thread_key(thread_id: str) -> bytes:
    """A thread's key in every table of the index and of the savers above it: 16 bytes of
    SHA-256, no collision in any realistic number of threads, and half the index space of
    the full digest on every row of every table. Remembered for recent threads: a chat
    turn asks for its thread's key about 30 times."""
    return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).digest()[:16]


RawInterrupts = dict[str, tuple[str, bytes]]
"""Per task id, the pending ``__interrupt__`` write as the codec stored it (type, data)."""


class ThreadSize(TypedDict):
    checkpoints: int
    """Checkpoints the thread holds (all namespaces; retention's replay-only ones excluded)."""
    bytes: int
    """Bytes of its checkpoint bodies, metadata and channel values, as written by ``put``
    (pending writes excluded). Shared values are counted where written, so this is an
    estimate of the stored size, not an exact figure."""


class ThreadRecord(TypedDict):
    """One thread, as ``langgraph_sdk``'s ``Thread`` (no ``values``) plus title and size."""

    thread_id: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    """The metadata of the thread's latest root checkpoint (JSON projection)."""
    status: Status
    interrupts: dict[str, list[Interrupt]]
    title: str | None
    size: ThreadSize


@dataclass(frozen=True)
class StoredRecord:
    """A record as a backend reads it: interrupts still encoded, times as epoch seconds."""

    thread_id: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any]
    status: str
    interrupts: RawInterrupts
    title: str | None
    checkpoints: int
    bytes: int
    latest_id: str | None = None
    """The latest root checkpoint's id: its pending writes are where ``interrupts``
    were sealed (see ``encryption.write_at``)."""


@dataclass(frozen=True)
class Derived:
    """What a thread's latest root checkpoint and its pending writes say about it."""

    status: Status
    interrupts: RawInterrupts


def derive(writes: Iterable[tuple[str, str, str, bytes]]) -> Derived:
    """Status and interrupts from the pending writes (task id, channel, type, data) of a
    thread's latest root checkpoint: ``error`` if a task failed (LangGraph stops the run
    then), else ``interrupted`` if one interrupted, else ``idle``."""
    interrupts: RawInterrupts = {}
    failed = False
    for task_id, channel, typ, data in writes:
        if channel == INTERRUPT:
            interrupts[task_id] = (typ, bytes(data))
        elif channel == ERROR:
            failed = True
    status: Status = "error" if failed else "interrupted" if interrupts else "idle"
    return Derived(status, interrupts)


def status_of(pending_writes: Sequence[tuple[str, str, Any]]) -> tuple[Status, dict[str, Any]]:
    """Status and interrupts from a ``CheckpointTuple``'s decoded ``pending_writes``.

    What ``list()`` says, for comparing with the index (and for callers without one).
    """
    interrupts = {t: list(v) for t, ch, v in pending_writes if ch == INTERRUPT}
    if any(ch == ERROR for _, ch, _ in pending_writes):
        return "error", interrupts
    return ("interrupted" if interrupts else "idle"), interrupts


def interrupts_json(raw: RawInterrupts) -> dict[str, list[str]]:
    """Encoded interrupts as JSON: per task, [type, base64 data]."""
    return {t: [typ, base64.b64encode(data).decode()] for t, (typ, data) in raw.items()}


def interrupts_from_json(value: Mapping[str, Sequence[str]] | None) -> RawInterrupts:
    return {t: (typ, base64.b64decode(data)) for t, (typ, data) in (value or {}).items()}


def writes_of_interest(writes: Iterable[Any]) -> list[Any]:
    """The encoded writes that change a record (interrupts and errors)."""
    return [w for w in writes if w.channel in (INTERRUPT, ERROR)]


# -- titles -------------------------------------------------------------------------


def _extends(ch: str, prev: str) -> bool:
    """Whether ``ch`` continues the grapheme ``prev`` ends (marks, joiners, selectors)."""
    cp = ord(ch)
    if prev == "\u200d" or ch == "\u200d":
        return True
    if unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:  # variation selectors
        return True
    if 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:  # skin tones, emoji tags
        return True
    return prev == "\r" and ch == "\n"


def graphemes(text: str, most: int | None = None) -> list[str]:
    """``text`` split into user-perceived characters (extended grapheme clusters,
    approximated with :mod:`unicodedata`: combining marks, ZWJ sequences, variation
    selectors, skin tones, emoji tags and flag pairs stay whole).

    With ``most``, only the first ``most`` of them (whole): a title needs no more, and the
    walk is Python code per character, run on every put.
    """
    out: list[str] = []
    flag_open = False
    for ch in text:
        regional = 0x1F1E6 <= ord(ch) <= 0x1F1FF
        if out and (_extends(ch, out[-1][-1]) or (regional and flag_open)):
            out[-1] += ch
            flag_open = False
            continue
        if most is not None and len(out) == most:
            break
        out.append(ch)
        flag_open = regional
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p if isinstance(p, str) else p.get("text", "")
            for p in content
            if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")
        ]
        return " ".join(p for p in parts if p)
    return ""


def message_role(message: Any) -> str | None:
    """``human``, ``ai``, ``tool``, ``system``... for a message object or dict."""
    role = getattr(message, "type", None)
    if role is None and isinstance(message, dict):
        role = message.get("type") or message.get("role")
    if role == "user":
        return "human"
    if role == "assistant":
        return "ai"
    return role if isinstance(role, str) else None


def message_text(message: Any) -> str:
    content = getattr(message, "content", None)
    if content is None and isinstance(message, dict):
        content = message.get("content")
    return _content_text(content)


def title_of(messages: Any, limit: int = TITLE_GRAPHEMES) -> str | None:
    """The first human message's text, whitespace collapsed, cut at ``limit`` graphemes
    (with an ellipsis when cut). No model call: a title costs nothing per turn."""
    if not isinstance(messages, list):
        return None
    for message in messages:
        if message_role(message) != "human":
            continue
        # NUL as in transcripts: PostgreSQL text cannot hold it
        text = " ".join(message_text(message).replace("\x00", "\ufffd").split())
        if not text:
            continue
        if text.isascii():  # one grapheme a character: whitespace, "\r\n" too, is collapsed
            return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"
        chars = graphemes(text, limit + 1)
        if len(chars) <= limit:
            return text
        return "".join(chars[: limit - 1]).rstrip() + "\u2026"
    return None


# -- indexed keys -------------------------------------------------------------------


def check_index_keys(keys: Sequence[str] | None) -> tuple[str, ...]:
    """The metadata keys to index (``user_id`` by default), checked once."""
    if keys is None:
        return DEFAULT_INDEX_KEYS
    if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
        raise InvalidConfigError(
            f"thread_index_keys must be a list of metadata key names, got {keys!r}"
        )
    out = tuple(dict.fromkeys(keys))
    for key in out:
        if len(key) > 64 or not key.replace("_", "").replace("-", "").isalnum():
            raise InvalidConfigError(
                f"thread_index_keys: {key!r} must be letters, digits, '_' or '-' (at most 64)"
            )
    return out


def check_transcripts(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidConfigError(f"transcripts must be True or False, got {value!r}")
    return value


def stored_form(value: Any) -> Any:
    """A JSON value as the index stores metadata: the checkpoint's JSON projection
    (``checkpoint.codec.json_safe``), where a NUL in text is the six characters
    ``\\u0000`` (PostgreSQL's ``jsonb`` rejects NUL). A filter is compared in that form."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {stored_form(k): stored_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stored_form(v) for v in value]
    return value


def check_user_id(value: Any, what: str = "user_id") -> str | int:
    """``value`` if it can be a user id (a string or an integer), else one
    :class:`InvalidConfigError` naming ``what``.

    Every place a user id enters (a run's config or context, ``sessions``, ``get``,
    ``transcript``, ``erase_user``, drafts, approvals, copies) checks it here, so an id is
    refused everywhere or accepted everywhere. A NUL is refused: LangGraph strips it from
    checkpoint metadata, so ``"a\\x00b"`` would be indexed as ``"ab"``, another user.
    """
    if isinstance(value, str):
        if not value:
            raise InvalidConfigError(f"{what} must be a non-empty string")
        if "\x00" in value:
            raise InvalidConfigError(f"{what} must not contain a NUL character")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidConfigError(
        f"{what} must be a non-empty string (or an integer), got {type(value).__name__}"
    )


def user_values(user_id: str) -> list[str | int]:
    """The values a user id given as text may be stored under: itself, and for a decimal
    integer (``"5"``) also the number a run given ``user_id=5`` left in its metadata
    (LangGraph keeps the int). Namespace labels are text either way."""
    values: list[str | int] = [user_id]
    if user_id.isascii() and user_id.lstrip("-").isdecimal() and str(int(user_id)) == user_id:
        values.append(int(user_id))
    return values


def owner_digest(owner: str) -> str:
    """What an erased-user hold stores of a user (an owner's indexed form): a SHA-256
    hex digest, so erasure leaves no user id behind (as the store's tombstones)."""
    return hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()


def index_value(value: Any) -> str | None:
    """The indexed form of a metadata value: JSON text of a scalar, else not indexed.

    Of its :func:`stored_form`, so a user id with a NUL finds its threads and transcript
    lines on every backend."""
    if isinstance(value, (str, int, float, bool)) and not (
        isinstance(value, float) and not math.isfinite(value)
    ):
        return json.dumps(stored_form(value), separators=(",", ":"), ensure_ascii=False)
    return None


# -- queries ------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadQuery:
    """A checked ``threads.search`` / ``count`` request."""

    metadata: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    ids: tuple[str, ...] | None = None
    sort_by: str = "updated_at"
    sort_order: str = "desc"
    limit: int = 10
    offset: int = 0
    indexed: tuple[str, str] | None = None
    """An indexed metadata key and its value's indexed form, when the filter has one:
    the backends then read that key's index instead of every thread."""

    @classmethod
    def build(
        cls,
        index_keys: Sequence[str],
        metadata: Any = None,
        status: Any = None,
        ids: Any = None,
        sort_by: Any = "updated_at",
        sort_order: Any = "desc",
        limit: Any = 10,
        offset: Any = 0,
    ) -> ThreadQuery:
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
            raise InvalidConfigError(
                f"metadata filter must be a dict with string keys, got {type(metadata).__name__}"
            )
        check_unicode(metadata, "metadata filter")
        try:
            metadata = json.loads(json.dumps(dict(metadata), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidConfigError(f"metadata filter must be JSON: {exc}") from None
        metadata = stored_form(metadata)
        if status is not None and status not in STATUSES:
            raise InvalidConfigError(f"unknown status {status!r}; use one of {STATUSES}")
        if ids is not None:
            if isinstance(ids, str) or not all(isinstance(i, str) for i in ids):
                raise InvalidConfigError(f"ids must be a list of thread id strings, got {ids!r}")
            ids = tuple(dict.fromkeys(ids))
        if sort_by is None:
            sort_by = "updated_at"
        if sort_by not in SORT_BY:
            raise InvalidConfigError(f"unknown sort_by {sort_by!r}; use one of {SORT_BY}")
        if sort_order is None:
            sort_order = "desc"
        if sort_order not in SORT_ORDERS:
            raise InvalidConfigError(f"unknown sort_order {sort_order!r}; use one of {SORT_ORDERS}")
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if limit > MAX_LIMIT:
            raise InvalidConfigError(f"limit must be at most {MAX_LIMIT}, got {limit}")
        if offset > MAX_OFFSET:
            raise InvalidConfigError(f"offset must be at most 2**62, got {offset}")
        indexed = None
        for key in index_keys:
            if key in metadata and (form := index_value(metadata[key])) is not None:
                indexed = (key, form)
                break
        return cls(
            metadata,
            status,
            ids,
            "updated_at" if sort_by == "state_updated_at" else sort_by,
            sort_order,
            limit,
            offset,
            indexed,
        )

    def matches(self, record: StoredRecord) -> bool:
        """The exact filter: top-level metadata equality (as ``list(filter=...)``), status
        and ids. Backends narrow with their indexes; this decides."""
        if self.status is not None and record.status != self.status:
            return False
        if self.ids is not None and record.thread_id not in self.ids:
            return False
        meta = record.metadata
        return all(k in meta and _same(meta[k], v) for k, v in self.metadata.items())

    def sort_key(self) -> Callable[[StoredRecord], Any]:
        name = self.sort_by
        return lambda r: (getattr(r, name), r.thread_id)

    def page(self, records: Iterable[StoredRecord]) -> list[StoredRecord]:
        """Filter, sort and cut: for backends that gather candidates themselves."""
        found = sorted(
            (r for r in records if self.matches(r)),
            key=self.sort_key(),
            reverse=self.sort_order == "desc",
        )
        return found[self.offset : self.offset + self.limit]


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``, as in PostgreSQL's jsonb."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def to_datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


# -- what a put tells the index -----------------------------------------------------


@dataclass(frozen=True)
class RecordInput:
    """What one ``put`` contributes to its thread's record, worked out before any I/O."""

    root: bool
    """Whether the checkpoint is in the root namespace (only those set status/metadata)."""
    title: str | None
    bytes: int
    metadata: dict[str, Any]
    indexed: dict[str, str]
    """Per indexed key present in the metadata, its value's indexed form."""
    lines: tuple[Any, ...] = ()
    """New transcript lines (``transcripts.Line``), when transcripts are on."""
    owner: str | None = None
    """The user key's indexed form: whose transcript the lines are."""


def record_input(
    checkpoint_ns: str,
    channel_values: Mapping[str, Any] | None,
    metadata_json: dict[str, Any],
    sizes: Iterable[int],
    index_keys: Sequence[str],
    lines: Sequence[Any] = (),
) -> RecordInput:
    indexed = {}
    for key in index_keys:
        if key in metadata_json and (form := index_value(metadata_json[key])) is not None:
            indexed[key] = form
    root = checkpoint_ns == ""
    return RecordInput(
        root=root,
        title=title_of((channel_values or {}).get("messages")) if root else None,
        bytes=sum(sizes),
        metadata=metadata_json,
        indexed=indexed,
        lines=tuple(lines) if root else (),
        owner=indexed.get(index_keys[0]) if index_keys else None,
    )


# -- backfill -----------------------------------------------------------------------

_UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 to 1970-01-01, in 100 ns steps


def checkpoint_time(checkpoint_id: str | None) -> float | None:
    """When a checkpoint was made (epoch seconds), read from its id: LangGraph's ids are
    UUIDv6, time-ordered with a 100 ns timestamp. ``None`` for any other id.

    A backfilled record takes its times from its thread's first and latest root
    checkpoints, so it sorts where its last write put it, not at the backfill's time.
    """
    try:
        value = uuid.UUID(checkpoint_id or "")
    except ValueError:
        return None
    if value.version != 6:
        return None
    n = value.int
    ticks = ((n >> 96) << 28) | (((n >> 80) & 0xFFFF) << 12) | ((n >> 64) & 0x0FFF)
    return (ticks - _UUID_EPOCH) / 1e7


def backfill_times(rows: Iterable[Sequence[Any]]) -> list[tuple[bytes, float, float]]:
    """(thread key, created, updated) from a backfill batch's (thread key, first root
    checkpoint id, latest root checkpoint id) rows, for those whose ids tell the time."""
    out = []
    for tk, first, latest in rows:
        created, updated = checkpoint_time(first), checkpoint_time(latest)
        if created is not None and updated is not None:
            out.append((bytes(tk), created, updated))
    return out


@dataclass(frozen=True)
class ReindexProgress:
    """Where a backfill is, handed to its ``progress`` callback after every batch."""

    examined: int
    """Threads looked at so far (those that had a record are skipped)."""
    indexed: int
    """Records written so far."""


@dataclass(frozen=True)
class ReindexBatch:
    """What one backfill batch did, and where the next one starts (``None``: done)."""

    examined: int
    indexed: int
    cursor: Any
