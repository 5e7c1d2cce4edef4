"""``saver.threads``: search, count and get the thread index; per-user sessions.

One object per saver, for sync and async callers alike: each method builds its plan once
(:class:`ThreadPlans` of the backend) and runs it with the saver's ``_run`` or
``_arun``, as every saver method does (see ``checkpoint/saver.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.types import Interrupt

from ..drivers.plan import Plan, adrive, drive
from ..encryption import Encryption, Location, write_at
from ..errors import InvalidConfigError
from .core import (
    INTERRUPT,
    ReindexBatch,
    ReindexProgress,
    StoredRecord,
    ThreadQuery,
    ThreadRecord,
    check_user_id,
    index_value,
    to_datetime,
)
from .transcripts import TranscriptMessage


class ThreadPlans(Protocol):
    """What a backend provides to read its thread index (no I/O of its own)."""

    def search(self, query: ThreadQuery) -> Plan[Any, list[StoredRecord]]: ...

    def count(self, query: ThreadQuery) -> Plan[Any, int]: ...

    def get(self, thread_id: str) -> Plan[Any, StoredRecord | None]: ...

    def transcript(
        self, thread_id: str, owner: str | None, limit: int, offset: int
    ) -> Plan[Any, list[tuple[str, str, str, float]]]: ...

    def reindex(self, codec: Any, cursor: Any, batch_size: int) -> Plan[Any, ReindexBatch]:
        """One backfill batch: records for threads that have none (written before the
        index, or whose record was lost), up to ``batch_size`` threads looked at. The
        cursor (``None`` first) says where the next batch starts; a run that crashed
        starts again and skips the threads it indexed."""
        ...


def _thread_id(thread_id: Any) -> str:
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidConfigError(f"thread_id must be a non-empty string, got {thread_id!r}")
    return thread_id


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Decoder(Protocol):
    def _load(self, typ: str, data: bytes | None, where: Location | None = None) -> Any: ...


class IndexedSaver(Protocol):
    """What the index needs of the saver that keeps it: the saver's driver and codec.

    The savers (``checkpoint/saver.py``) sit in the layer above the index and satisfy this;
    naming them here would make the two layers import each other."""

    @property
    def _codec(self) -> Decoder: ...

    encryption: Encryption | None

    def _run(self, plan: Plan[Any, R]) -> R: ...

    async def _arun(self, plan: Plan[Any, R]) -> R: ...


def _then(plan: Plan[Any, T], finish: Callable[[T], R]) -> Plan[Any, R]:
    """``plan``, its answer handed to ``finish``."""
    return finish((yield from plan))


def _blocking(
    build: Callable[Concatenate[Any, P], Plan[Any, R]],
) -> Callable[Concatenate[Any, P], R]:
    """The blocking method of a builder: its arguments are checked when called (the
    builder is a plain function returning the plan), then the saver's driver runs it."""

    @functools.wraps(build)
    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._saver._run(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    call.__name__ = call.__qualname__ = build.__name__.lstrip("_")
    return call


def _awaitable(
    build: Callable[Concatenate[Any, P], Plan[Any, R]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The async twin of :func:`_blocking`, over the same builder."""

    @functools.wraps(build)
    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._saver._arun(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    name = build.__name__.lstrip("_")
    call.__name__ = call.__qualname__ = f"a{name}"
    call.__doc__ = f"Async :meth:`{name}`."
    return call


class Threads:
    """The thread index of one saver, as ``langgraph_sdk``'s ``client.threads`` reads it.

    ``search`` / ``count`` take the SDK's argument names; ``get(thread_id, user_id=...)``
    and ``sessions(user_id)`` check ownership against the saver's user key
    (``user_key``, ``user_id`` by default). Async twins are ``asearch``, ``acount``,
    ``aget`` and ``asessions``.
    """

    def __init__(self, saver: IndexedSaver, plans: ThreadPlans, keys: Sequence[str]):
        self._saver = saver
        self._plans = plans
        self.index_keys = tuple(keys)
        self.user_key = self.index_keys[0] if self.index_keys else "user_id"

    # -- building -----------------------------------------------------------------------

    def _query(self, **kwargs: Any) -> ThreadQuery:
        return ThreadQuery.build(self.index_keys, **kwargs)

    def _record(self, stored: StoredRecord) -> ThreadRecord:
        load = self._saver._codec._load
        interrupts: dict[str, list[Interrupt]] = {}
        for task_id, (typ, data) in sorted(stored.interrupts.items()):
            # copies of the latest root checkpoint's interrupt writes, sealed there
            where = write_at(
                stored.thread_id,
                "",
                stored.latest_id or "",
                task_id,
                WRITES_IDX_MAP[INTERRUPT],
                INTERRUPT,
                "",  # (an interrupt's path is not bound: see write_at)
            )
            value = load(typ, data, where)
            interrupts[task_id] = list(value) if isinstance(value, (list, tuple)) else [value]
        title = stored.title
        enc = self._saver.encryption
        if enc is not None and title is not None:
            title = enc.open_text(title, Location("title", stored.thread_id))
        return ThreadRecord(
            thread_id=stored.thread_id,
            created_at=to_datetime(stored.created_at),
            updated_at=to_datetime(stored.updated_at),
            metadata=dict(stored.metadata),
            status=stored.status,  # type: ignore[typeddict-item]
            interrupts=interrupts,
            title=title,
            size={"checkpoints": stored.checkpoints, "bytes": stored.bytes},
        )

    def _owned(self, stored: StoredRecord | None, user_id: Any) -> ThreadRecord | None:
        if stored is None:
            return None
        if user_id is not None:
            # compared as the index stores them (see ``index_value``)
            want = index_value(check_user_id(user_id))
            if want is None or index_value(stored.metadata.get(self.user_key)) != want:
                return None
        return self._record(stored)

    def _sessions_query(self, user_id: Any, limit: int, offset: int) -> ThreadQuery:
        if user_id is None:
            raise InvalidConfigError("sessions needs a user id")
        user = check_user_id(user_id)
        return self._query(metadata={self.user_key: user}, limit=limit, offset=offset)

    def _transcript_args(
        self, thread_id: Any, user_id: Any, limit: Any, offset: Any
    ) -> tuple[str, str | None, int, int]:
        query = self._query(limit=limit, offset=offset)  # the same checks as a search
        owner = None
        if user_id is not None:
            owner = index_value(check_user_id(user_id))
            if owner is None:
                raise InvalidConfigError(f"user_id must be a string or number, got {user_id!r}")
        return _thread_id(thread_id), owner, query.limit, query.offset

    def _lines(
        self, rows: list[tuple[str, str, str, float]], thread_id: str
    ) -> list[TranscriptMessage]:
        enc = self._saver.encryption
        return [
            TranscriptMessage(
                id=i,
                role=r,
                content=c
                if enc is None
                else enc.open_text(c, Location("transcript", thread_id, key=i)),
                created_at=to_datetime(t),
            )
            for i, r, c, t in rows
        ]

    def _reindex(
        self, batch_size: Any, progress: Callable[[ReindexProgress], None] | None
    ) -> Plan[Plan[Any, ReindexBatch], ReindexProgress]:
        """The backfill as a plan of batch plans: each batch is one plan (one transaction
        or one script per thread), run by ``drive`` / ``adrive`` with the saver's driver."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        codec, cursor, examined, indexed = self._saver._codec, None, 0, 0
        while True:
            batch: ReindexBatch = yield self._plans.reindex(codec, cursor, batch_size)
            examined, indexed = examined + batch.examined, indexed + batch.indexed
            done = ReindexProgress(examined, indexed)
            if progress is not None:
                progress(done)
            if batch.cursor is None:
                return done
            cursor = batch.cursor

    # -- what each call runs: built once, for the blocking and the awaitable method ----

    def _search(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        status: str | None = None,
        ids: Sequence[str] | None = None,
        sort_by: str = "updated_at",
        sort_order: str = "desc",
        limit: int = 10,
        offset: int = 0,
    ) -> Plan[Any, list[ThreadRecord]]:
        """Threads whose metadata has these top-level values, in this status, newest first
        by default. A filter on an indexed key (``user_id``) or on ``status`` (or both)
        reads an index: O(log n + offset + limit), whatever the number of threads."""
        query = self._query(
            metadata=metadata,
            status=status,
            ids=ids,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return _then(self._plans.search(query), self._records)

    def _count(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        status: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> Plan[Any, int]:
        """How many threads :meth:`search` would find with no limit."""
        return self._plans.count(self._query(metadata=metadata, status=status, ids=ids))

    def _get(self, thread_id: str, *, user_id: Any = None) -> Plan[Any, ThreadRecord | None]:
        """One thread's record; ``None`` if it does not exist, expired, or (with
        ``user_id``) belongs to another user."""
        if user_id is not None:
            check_user_id(user_id)
        plan = self._plans.get(_thread_id(thread_id))
        return _then(plan, lambda stored: self._owned(stored, user_id))

    def _sessions(
        self, user_id: Any, *, limit: int = 20, offset: int = 0
    ) -> Plan[Any, list[ThreadRecord]]:
        """A user's conversations, newest first: the search by the user key."""
        query = self._sessions_query(user_id, limit, offset)
        return _then(self._plans.search(query), self._records)

    def _transcript(
        self, thread_id: str, *, user_id: Any = None, limit: int = 100, offset: int = 0
    ) -> Plan[Any, list[TranscriptMessage]]:
        """The thread's clean chat history, oldest first (``transcripts=True`` savers).

        Outlives the thread's checkpoints. With ``user_id``, only a transcript recorded
        for that user is returned (another user's thread id gives ``[]``).
        """
        args = self._transcript_args(thread_id, user_id, limit, offset)
        return _then(
            self._plans.transcript(*args), functools.partial(self._lines, thread_id=args[0])
        )

    def _records(self, stored: list[StoredRecord]) -> list[ThreadRecord]:
        return [self._record(r) for r in stored]

    # -- the methods --------------------------------------------------------------------

    search = _blocking(_search)
    count = _blocking(_count)
    get = _blocking(_get)
    sessions = _blocking(_sessions)
    transcript = _blocking(_transcript)
    asearch = _awaitable(_search)
    acount = _awaitable(_count)
    aget = _awaitable(_get)
    asessions = _awaitable(_sessions)
    atranscript = _awaitable(_transcript)

    def reindex(
        self,
        *,
        batch_size: int = 500,
        progress: Callable[[ReindexProgress], None] | None = None,
    ) -> ReindexProgress:
        """Write a record for every thread that has none: threads written before the
        index existed (an upgrade) or whose record was lost. Safe at any time, also
        beside running graphs; idempotent, so a run that crashed is just run again.

        ``batch_size`` threads are looked at per batch (one transaction on SQL; on Redis
        one script per thread, after a ``SCAN`` of every primary node); ``progress``
        gets a :class:`ReindexProgress` after each batch. A backfilled record is what a
        refresh derives (metadata, status, interrupts, counts), dated by its checkpoint
        ids; its title comes with its next write.
        """
        return drive(self._reindex(batch_size, progress), self._saver._run)

    async def areindex(
        self,
        *,
        batch_size: int = 500,
        progress: Callable[[ReindexProgress], None] | None = None,
    ) -> ReindexProgress:
        """Async :meth:`reindex`."""
        return await adrive(self._reindex(batch_size, progress), self._saver._arun)
