"""What a saver reads from a ``RunnableConfig``, and the options every saver shares.

Checked once here so every backend rejects the same bad input with the same message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..encryption import Encryption
from ..errors import InvalidConfigError
from ..observability.core import Listener
from ..threads.core import (
    DEFAULT_INDEX_KEYS,
    check_index_keys,
    check_transcripts,
    check_unicode,
)
from ..threads.core import thread_key as thread_key  # re-exported: the savers key threads so too


class TTLConfig(TypedDict, total=False):
    """Thread expiry, as the ``ttl=`` option of every saver.

    ``default_ttl`` is in minutes (fractions allowed); a thread expires that long after its
    last write, or its last read when ``refresh_on_read`` is true.
    """

    default_ttl: float | None
    refresh_on_read: bool


def _minutes(minutes: Any, what: str) -> float | None:
    """Seconds for a positive number of minutes (``None`` stays ``None``: no expiry)."""
    if minutes is None:
        return None
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, (int, float))
        or not math.isfinite(minutes)
        or minutes <= 0
    ):
        raise InvalidConfigError(f"{what} must be a positive number of minutes, got {minutes!r}")
    return float(minutes) * 60.0


class SaverOptions(TypedDict, total=False):
    """The keyword options every saver's constructor takes (see the saver classes)."""

    serde: SerializerProtocol | None
    ttl: TTLConfig | None
    keep_last: int | None
    thread_index_keys: Sequence[str] | None
    transcripts: bool
    transcript_ttl: float | None
    listeners: Sequence[Listener] | None
    list_memory_mib: float
    encryption: Encryption | None
    fence: Any
    """``True`` or a ``FenceOptions``: one writer per thread (see ``checkpoint/fence.py``)."""


def list_memory_bytes(mib: Any) -> int:
    """``list_memory_mib`` (MiB a saver's list memory may hold; 0 turns it off) in bytes."""
    if isinstance(mib, bool) or not isinstance(mib, (int, float)) or not mib >= 0:
        raise InvalidConfigError(f"list_memory_mib must be a number of MiB >= 0, got {mib!r}")
    if math.isinf(mib):
        raise InvalidConfigError("list_memory_mib must be finite")
    return int(mib * 1024 * 1024)


@dataclass(frozen=True)
class SaverSettings:
    """Validated saver options."""

    ttl_seconds: float | None = None
    refresh_on_read: bool = False
    keep_last: int | None = None
    index_keys: tuple[str, ...] = DEFAULT_INDEX_KEYS
    """Metadata keys the thread index indexes (see ``threads/``)."""
    transcripts: bool = False
    transcript_ttl_seconds: float | None = None

    @classmethod
    def build(
        cls,
        ttl: TTLConfig | None,
        keep_last: int | None,
        index_keys: Sequence[str] | None = None,
        transcripts: bool = False,
        transcript_ttl: float | None = None,
    ) -> SaverSettings:
        ttl_seconds: float | None = None
        refresh = False
        if ttl is not None:
            if not isinstance(ttl, Mapping):
                raise InvalidConfigError("ttl must be a dict like {'default_ttl': minutes}")
            unknown = set(ttl) - {"default_ttl", "refresh_on_read"}
            if unknown:
                raise InvalidConfigError(f"unknown ttl option(s): {sorted(unknown)}")
            ttl_seconds = _minutes(ttl.get("default_ttl"), "ttl['default_ttl']")
            refresh = bool(ttl.get("refresh_on_read", False))
        if keep_last is not None and (
            isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1
        ):
            raise InvalidConfigError(f"keep_last must be a positive integer, got {keep_last!r}")
        return cls(
            ttl_seconds=ttl_seconds,
            refresh_on_read=refresh,
            keep_last=keep_last,
            index_keys=check_index_keys(index_keys),
            transcripts=check_transcripts(transcripts),
            transcript_ttl_seconds=_minutes(transcript_ttl, "transcript_ttl"),
        )


@dataclass(frozen=True)
class Target:
    """The thread, namespace and (optional) checkpoint a config points at."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    root_id: str | None = field(default=None, compare=False)
    """In a subgraph's namespace, the root checkpoint its run hangs from (LangGraph's
    ``checkpoint_map``): a deleted thread's tombstone judges the subgraph's writes by it."""
    thread_key: bytes = field(init=False, repr=False, compare=False)
    """A fixed-size key for the thread id: ids of any length and characters index alike.
    Worked out once here: a put reads it about ten times."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "thread_key", thread_key(self.thread_id))

    def root_needed(self, live_after: str) -> str | None:
        """The root checkpoint a subgraph's write on a deleted thread needs, or ``None``.

        A subgraph's first checkpoint has no parent, like a fresh run's, so its parent
        cannot tell a run that predates the deletion from one after it; the root
        checkpoint its run hangs from can. A root newer than the tombstone (``live_after``)
        belongs to a run after the deletion (it may still be on its way); an older one
        must still be stored. An old run's root checkpoints made after the deletion are
        refused first (their parent is gone), and the tombstone keeps their ids: a root
        among them is refused too (each saver checks that besides this bound).
        """
        root = self.root_id
        return None if root is None or root > live_after else root

    def config(self, checkpoint_id: str) -> RunnableConfig:
        return checkpoint_config(self.thread_id, self.checkpoint_ns, checkpoint_id)


def deletion_id() -> str:
    """A checkpoint id for this instant, above every id LangGraph made before it (its ids
    are UUIDv6, ordered by time as text), for a deleted thread's tombstone.

    A tombstone refuses writes to checkpoints older than the deletion that no longer exist.
    Bounding it by the newest *stored* id missed a run's checkpoint still in flight: its
    writes can arrive before its put (LangGraph runs them side by side), were taken for a
    new run's, and brought an erased thread back.
    """
    return str(uuid6())[:19] + "ffff-ffffffffffff"


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _configurable(config: Any, what: str) -> Mapping[str, Any]:
    # ``type(...) is dict`` first: the ``Mapping`` check is an ABC's, slower, and every
    # saver call parses its config
    if type(config) is not dict and not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"{what} must be a RunnableConfig dict, got {type(config).__name__}"
        )
    configurable = config.get("configurable")
    if type(configurable) is not dict and not isinstance(configurable, Mapping):
        raise InvalidConfigError(
            f"{what} has no 'configurable' dict; pass "
            "{'configurable': {'thread_id': ...}} so the saver knows which thread to use"
        )
    return configurable


def _text(value: Any, key: str, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return str(value)
    if value.__class__.__name__ == "UUID":
        return str(value)
    raise InvalidConfigError(f"{what}['configurable']['{key}'] must be a string, got {value!r}")


def check_no_nul(value: str, key: str, where: str) -> None:
    """Namespaces and checkpoint ids are stored as text on every backend (PostgreSQL
    refuses NUL in text, SQLite's JSON functions cut at it): NUL is refused before any
    statement, alike everywhere, wherever the id comes from (a config, or the checkpoint
    a put stores). A thread id may hold NUL: it is stored as bytes."""
    if "\x00" in value:
        raise InvalidConfigError(
            f"{key} must not contain NUL characters: {value[:80]!r} (in {where})"
        )


def _no_nul(value: str, key: str, what: str) -> None:
    check_no_nul(value, key, f"{what}['configurable']")


def read_target(config: Any, what: str = "config") -> Target:
    """Parse a config that must name a thread; the error says which key is missing."""
    configurable = _configurable(config, what)
    raw_thread = configurable.get("thread_id")
    if raw_thread is None or raw_thread == "":
        raise InvalidConfigError(
            f"{what}['configurable']['thread_id'] is required: the checkpointer stores state "
            "per thread, e.g. graph.invoke(inputs, {'configurable': {'thread_id': '1'}})"
        )
    # str, the common case, without a call (every saver call parses its config)
    thread_id = raw_thread if type(raw_thread) is str else _text(raw_thread, "thread_id", what)
    ns = configurable.get("checkpoint_ns")
    if type(ns) is str:
        checkpoint_ns = ns
    else:
        checkpoint_ns = "" if ns is None else _text(ns, "checkpoint_ns", what)
    raw_id = configurable.get("checkpoint_id")
    if type(raw_id) is str:
        checkpoint_id = raw_id or None
    else:
        checkpoint_id = None if raw_id in (None, "") else _text(raw_id, "checkpoint_id", what)
    _no_nul(checkpoint_ns, "checkpoint_ns", what)
    if checkpoint_id is not None:
        _no_nul(checkpoint_id, "checkpoint_id", what)
    root = None if checkpoint_ns == "" else _root_id(configurable, checkpoint_ns)
    return Target(thread_id, checkpoint_ns, checkpoint_id, root)


def _root_id(configurable: Mapping[str, Any], checkpoint_ns: str) -> str | None:
    """The root checkpoint a subgraph's run belongs to, if LangGraph named it."""
    parents = configurable.get("checkpoint_map")
    if checkpoint_ns == "" or not isinstance(parents, Mapping):
        return None
    root = parents.get("")
    return root if isinstance(root, str) and root else None


def read_checkpoint_target(config: Any, what: str = "config") -> Target:
    """Like :func:`read_target`, for operations that need a ``checkpoint_id`` too."""
    target = read_target(config, what)
    if target.checkpoint_id is None:
        raise InvalidConfigError(
            f"{what}['configurable']['checkpoint_id'] is required for this call "
            "(use the config returned by put())"
        )
    return target


@dataclass(frozen=True)
class ListQuery:
    """The arguments of ``list()``, validated, plus the keyset cursor of the next page."""

    thread_id: str | None
    checkpoint_ns: str | None
    checkpoint_id: str | None
    filter: Mapping[str, Any] | None
    before: str | None
    limit: int | None
    after: tuple[str, bytes, str] | None = None  # (checkpoint_id, thread_key, ns) last seen

    @classmethod
    def build(
        cls,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> ListQuery:
        thread_id = checkpoint_ns = checkpoint_id = None
        if config is not None:
            configurable = _configurable(config, "config")
            if configurable.get("thread_id") not in (None, ""):
                target = read_target(config)
                thread_id = target.thread_id
                checkpoint_id = target.checkpoint_id
                if configurable.get("checkpoint_ns") is not None:
                    checkpoint_ns = target.checkpoint_ns
        before_id = None
        if before is not None:
            raw = _configurable(before, "before").get("checkpoint_id")
            before_id = None if raw in (None, "") else _text(raw, "checkpoint_id", "before")
            if before_id is not None:
                _no_nul(before_id, "checkpoint_id", "before")
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidConfigError(f"filter must be a dict, got {type(filter).__name__}")
        check_unicode(filter, "filter")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidConfigError(f"limit must be an integer, got {limit!r}")
        return cls(thread_id, checkpoint_ns, checkpoint_id, filter or None, before_id, limit)
