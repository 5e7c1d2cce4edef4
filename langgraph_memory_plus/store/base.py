"""The public ``BaseStore`` API, written once for every backend and both calling styles.

``batch`` and ``abatch`` check and encode the ops, then run one *outer plan* (see
:mod:`langgraph_memory_plus.drivers.plan`) whose steps are either "embed these texts" or "run this
backend plan in one transaction". The blocking driver executes steps with blocking calls,
the async driver awaits them; everything else (validation, op semantics, the order of
reads and writes) is shared. Embedding happens before the transaction opens, so a slow
embedding API never holds a database connection or row locks.

Semantics follow ``InMemoryStore``: within one batch every read sees the store as it was
before the batch, and the writes apply afterwards, the last op for a key winning. Our
writes run in the same transaction as the reads, so a failed batch (a conflict, a value
too large, a dropped connection) leaves nothing applied.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple, Protocol, TypedDict, TypeVar, cast

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from ..drivers.bridge import AsyncBridge, SyncBridge
from ..drivers.plan import Plan, adrive, drive
from ..encryption import Encryption, Location, key_id_of
from ..errors import ConflictError, InvalidConfigError, ValueTooLargeError, decoding
from ..observability import events as ev
from ..observability.core import Listener, Observable
from .filters import Fields, holds, parse_filter
from .merging import CallMerger, Kind
from .namespaces import (
    Condition,
    check_count,
    check_key,
    check_labels,
    check_writable,
    read_conditions,
    user_of_namespace,
)
from .tombstones import DEFAULT_HOLD_HOURS, check_hold
from .ttl import TaskSweeper, ThreadSweeper, item_ttl, read_ttl_config, sweep_interval
from .values import (
    EncodedValue,
    InvalidValueError,
    VersionedItem,
    VersionedSearchItem,
    decode_value,
    encode_value,
    escape_text,
    utf8_size,
)
from .vectors import IndexSettings, Vector

R = TypeVar("R")
logger = logging.getLogger("langgraph_memory_plus.store")

Namespace = tuple[str, ...]
DEFAULT_SWEEP_BATCH = 1000


class ConditionalPutOp(NamedTuple):
    """A ``PutOp`` that applies only if the item is still at ``expected_version``.

    ``expected_version=0`` means "only if the item does not exist" (create). The whole
    batch fails with ``ConflictError`` otherwise. ``store.put(..., expected_version=...)``
    builds one; pass it to ``batch`` directly to make several writes conditional at once.
    """

    op: PutOp
    expected_version: int


# -- what the core hands a backend ------------------------------------------------------


@dataclass(frozen=True)
class GetRequest:
    namespace: Namespace
    key: str
    refresh: bool


@dataclass(frozen=True)
class SearchRequest:
    prefix: Namespace
    filter: Fields | None
    limit: int
    offset: int
    refresh: bool
    query: Vector | None = None


@dataclass(frozen=True)
class ListRequest:
    conditions: tuple[Condition, ...]
    max_depth: int | None
    limit: int
    offset: int


@dataclass(frozen=True)
class WriteRequest:
    """A put (``value`` set) or delete (``value`` None).

    ``vectors`` is ``None`` when the store has no index (leave vectors alone), else the
    item's complete new set of (name, vector), possibly empty.
    """

    namespace: Namespace
    key: str
    value: EncodedValue | None
    ttl: float | None
    expected_version: int | None
    vectors: list[tuple[str, Vector]] | None = None


def conflict_error(request: WriteRequest, found: int | None) -> ConflictError:
    """The error for a conditional write whose item is at version ``found`` (0: absent).

    ``found=None``: the item was absent when checked but another writer created it first.
    Shared so every backend words a lost race the same way.
    """
    where = f"item {request.key!r} in namespace {request.namespace}"
    if found is None or (found and not request.expected_version):
        return ConflictError(f"{where} already exists (expected_version=0 means 'absent')")
    if not found:
        return ConflictError(f"{where} does not exist; expected version {request.expected_version}")
    return ConflictError(f"{where} is at version {found}, not {request.expected_version}")


class StorePlans(Protocol):
    """What a backend provides: one plan per storage operation, no I/O of its own."""

    max_value_bytes: int
    max_batch_bytes: int
    max_key_bytes: int
    escape_strings: bool

    def setup(self) -> Plan[Any, None]: ...

    def get(self, requests: list[GetRequest]) -> Plan[Any, list[VersionedItem | None]]: ...

    def search(self, request: SearchRequest) -> Plan[Any, list[VersionedSearchItem]]: ...

    def list_namespaces(self, request: ListRequest) -> Plan[Any, list[Namespace]]: ...

    def write(self, requests: list[WriteRequest]) -> Plan[Any, int]:
        """Apply the writes; returns how many puts a tombstone dropped."""
        ...

    def tombstone(self, prefix: Namespace, hold_seconds: float) -> Plan[Any, None]:
        """Drop puts at or below ``prefix`` for ``hold_seconds`` (see :mod:`.tombstones`);
        it takes effect for every write that starts after this plan's transaction."""
        ...

    def lift(self, prefix: Namespace) -> Plan[Any, bool]:
        """Remove the tombstone on exactly ``prefix``; whether a live one was there."""
        ...

    def count(self, prefix: Namespace) -> Plan[Any, int]: ...

    def delete_namespace(self, prefix: Namespace) -> Plan[Any, int]: ...

    def sweep(self, batch_size: int) -> Plan[Any, tuple[int, bool]]:
        """One bounded batch: (items deleted, whether more may be waiting)."""
        ...


# -- steps of an outer plan --------------------------------------------------------------


@dataclass(frozen=True)
class Embed:
    """Step: embed ``texts`` (as queries or as documents); answers a list of vectors."""

    texts: list[str]
    query: bool


@dataclass(frozen=True)
class Transact:
    """Step: run a backend plan in one transaction; answers the plan's result."""

    plan: Plan[Any, Any]


Step = Embed | Transact


@dataclass
class _Write:
    request: WriteRequest
    texts: list[tuple[str, str]]


@dataclass
class _Batch:
    size: int
    gets: list[tuple[int, GetRequest]] = field(default_factory=list)
    searches: list[tuple[int, SearchRequest, str | None]] = field(default_factory=list)
    lists: list[tuple[int, ListRequest]] = field(default_factory=list)
    writes: dict[tuple[Namespace, str], _Write] = field(default_factory=dict)


class StoreOptions(TypedDict, total=False):
    """The keyword options every store's constructor takes (see the store classes)."""

    index: IndexConfig | None
    ttl: TTLConfig | None
    max_value_bytes: int | None
    listeners: Sequence[Listener] | None
    encryption: Encryption | None


SEALED_FIELD = "lgmp_sealed"
"""The only field of a stored value when encryption is on: the sealed JSON text."""


def sealed_text(value: Any) -> str | None:
    """The envelope of a stored value sealed by an encrypting store (``{SEALED_FIELD:
    envelope}``), or ``None`` for plaintext: a user's own value of that one field that
    holds no envelope too (read as sealed in the migration mode, it failed to open, and
    the migration's rekey sealed its text in place of the value)."""
    sealed = value.get(SEALED_FIELD) if isinstance(value, dict) and len(value) == 1 else None
    return sealed if isinstance(sealed, str) and key_id_of(sealed) is not None else None


SEARCH_ALL = 1 << 30
"""The page an encrypted search asks its backend for: every match under the prefix
(filters and pages are applied after decryption)."""


class StoreBase(Observable, BaseStore, ABC):
    """Shared store logic; drivers supply ``_plans``, ``_run`` and ``_arun``."""

    supports_ttl = True
    _plans: StorePlans

    def __init__(
        self,
        *,
        index: Any = None,
        ttl: Any = None,
        max_value_bytes: int | None = None,
        listeners: Sequence[Listener] | None = None,
        encryption: Encryption | None = None,
    ) -> None:
        self._init_listeners(listeners)
        if encryption is not None and not isinstance(encryption, Encryption):
            raise InvalidConfigError(
                f"encryption must be an Encryption, got {type(encryption).__name__}"
            )
        self.encryption = encryption
        """Encryption at rest of item values (see :mod:`..encryption`), or ``None``."""
        self.index = IndexSettings.build(index)
        self.index_config = None if self.index is None else self.index.config
        self.ttl_config = read_ttl_config(ttl)
        self._max_value_bytes = max_value_bytes

    @abstractmethod
    def _run(self, plan: Plan[Any, R]) -> R:
        """Run one backend plan in one transaction, blocking."""

    @abstractmethod
    async def _arun(self, plan: Plan[Any, R]) -> R:
        """Run one backend plan in one transaction without blocking the event loop."""

    # -- executing steps ------------------------------------------------------------------

    def _step(self, step: Step) -> Any:
        if isinstance(step, Transact):
            return self._run(step.plan)
        assert self.index is not None
        return self.index.embed(step.texts, step.query)

    async def _astep(self, step: Step) -> Any:
        if isinstance(step, Transact):
            return await self._arun(step.plan)
        assert self.index is not None
        return await self.index.aembed(step.texts, step.query)

    # -- checking ops -------------------------------------------------------------------

    @property
    def max_value_bytes(self) -> int:
        """The largest value (as JSON text, in bytes) a put accepts."""
        limit = self._plans.max_value_bytes
        return limit if self._max_value_bytes is None else min(limit, self._max_value_bytes)

    def _address(self, namespace: Namespace, key: str) -> None:
        escape = escape_text if self._plans.escape_strings else str
        size = utf8_size(".".join(escape(label) for label in namespace) + escape(key), "key")
        if size > self._plans.max_key_bytes:
            raise ValueTooLargeError(
                "the namespace and key together", size, self._plans.max_key_bytes
            )

    def _write(self, op: PutOp, expected_version: int | None) -> _Write:
        key = check_key(op.key)
        if expected_version is not None and (
            isinstance(expected_version, bool)
            or not isinstance(expected_version, int)
            or expected_version < 0
        ):
            raise InvalidConfigError(
                f"expected_version must be a version read from an item, or 0 for 'absent'; "
                f"got {expected_version!r}"
            )
        if op.value is None:
            namespace = check_labels(op.namespace)
            request = WriteRequest(namespace, key, None, None, expected_version)
            return _Write(request, [])
        # Not check_writable: the reserved root "langgraph" is refused by put()/aput() only
        # (``_put_op``), as BaseStore does; InMemoryStore.batch stores it, and so do we.
        namespace = check_labels(op.namespace)
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        self._address(namespace, key)
        encoded = encode_value(op.value, escape=self._plans.escape_strings)
        if encoded.size > self.max_value_bytes:
            raise ValueTooLargeError(
                f"the value for key {key!r}", encoded.size, self.max_value_bytes
            )
        texts = [] if self.index is None else self.index.texts(op.value, op.index)
        if self.encryption is not None:
            encoded = self._seal_value(namespace, key, encoded)
        request = WriteRequest(namespace, key, encoded, item_ttl(op.ttl), expected_version)
        return _Write(request, texts)

    # -- encryption -------------------------------------------------------------------

    def _location(self, namespace: Namespace, key: str) -> Location:
        enc = self.encryption
        user = (
            user_of_namespace(namespace)
            if enc is not None and enc.tenant_keys is not None
            else None
        )
        return Location("store", namespace=tuple(namespace), key=key, user_id=user)

    def _seal_value(self, namespace: Namespace, key: str, encoded: EncodedValue) -> EncodedValue:
        """``encoded`` as ``{SEALED_FIELD: envelope}``: its JSON text (and whether it was
        escaped) sealed at its namespace and key."""
        assert self.encryption is not None
        plain = ("1" if encoded.escaped else "0") + encoded.text
        sealed = self.encryption.seal_text(plain, self._location(namespace, key))
        out = encode_value({SEALED_FIELD: sealed}, escape=self._plans.escape_strings)
        if out.size > self._plans.max_value_bytes:
            raise ValueTooLargeError(
                f"the encrypted value for key {key!r}", out.size, self._plans.max_value_bytes
            )
        return out

    def _unseal(self, item: Any) -> Any:
        """``item`` (an ``Item`` or ``None``) with its value opened."""
        enc = self.encryption
        if enc is None or item is None:
            return item
        where = self._location(item.namespace, item.key)
        sealed = sealed_text(item.value)
        if sealed is None:
            enc.plaintext(where)  # raises unless migrating
            return item
        plain = enc.open_text(sealed, where)
        item.value = decode_value(json.loads(plain[1:]), plain[:1] == "1")
        return item

    def _search(self, op: SearchOp) -> tuple[SearchRequest, str | None]:
        query = op.query if (op.query and self.index is not None) else None
        if query is not None and not isinstance(query, str):
            raise InvalidConfigError(f"query must be a string, got {type(query).__name__}")
        request = SearchRequest(
            prefix=check_labels(op.namespace_prefix),
            filter=parse_filter(op.filter),
            limit=check_count(op.limit, "limit"),
            offset=check_count(op.offset, "offset"),
            refresh=bool(op.refresh_ttl),
        )
        return request, query

    def _prepare(self, ops: Iterable[Op | ConditionalPutOp]) -> _Batch:
        batch = _Batch(0)
        for i, op in enumerate(ops):
            batch.size = i + 1
            if isinstance(op, GetOp):
                request = GetRequest(
                    check_labels(op.namespace), check_key(op.key), bool(op.refresh_ttl)
                )
                batch.gets.append((i, request))
            elif isinstance(op, SearchOp):
                batch.searches.append((i, *self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                listing = ListRequest(
                    read_conditions(op.match_conditions),
                    None if op.max_depth is None else check_count(op.max_depth, "max_depth"),
                    check_count(op.limit, "limit"),
                    check_count(op.offset, "offset"),
                )
                batch.lists.append((i, listing))
            elif isinstance(op, (PutOp, ConditionalPutOp)):
                if isinstance(op, PutOp):
                    write = self._write(op, None)
                else:
                    write = self._write(op.op, op.expected_version)
                # The last write of a key wins, as in InMemoryStore.
                address = (write.request.namespace, write.request.key)
                batch.writes.pop(address, None)
                batch.writes[address] = write
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        total = sum(w.request.value.size for w in batch.writes.values() if w.request.value)
        if total > self._plans.max_batch_bytes:
            raise ValueTooLargeError(
                "the batch's values together", total, self._plans.max_batch_bytes
            )
        return batch

    # -- the outer plans ------------------------------------------------------------------

    def _batch_plan(self, ops: Iterable[Op | ConditionalPutOp]) -> Plan[Step, list[Result]]:
        return (yield from self._prepared_plan(self._prepare(ops)))

    def _prepared_plan(self, batch: _Batch) -> Plan[Step, list[Result]]:
        queries = sorted({q for _, _, q in batch.searches if q is not None})
        found: dict[str, Vector] = {}
        if queries:
            found = dict(zip(queries, (yield Embed(queries, query=True)), strict=True))
        texts = sorted({text for w in batch.writes.values() for _, text in w.texts})
        embedded: dict[str, Vector] = {}
        if texts:
            embedded = dict(zip(texts, (yield Embed(texts, query=False)), strict=True))
        searches = [
            (i, req if q is None else _with_query(req, found[q])) for i, req, q in batch.searches
        ]
        writes = [
            w.request
            if self.index is None or w.request.value is None
            else _with_vectors(w.request, [(name, embedded[text]) for name, text in w.texts])
            for w in batch.writes.values()
        ]
        if not batch.size:
            return []
        results: list[Result] = yield Transact(
            self._observed(
                self._transaction(batch, searches, writes),
                lambda results, took, error: _store_events(
                    self._backend, batch, writes, results, took, error
                ),
            )
        )
        return results

    def _transaction(
        self,
        batch: _Batch,
        searches: list[tuple[int, SearchRequest]],
        writes: list[WriteRequest],
    ) -> Plan[Any, list[Result]]:
        results: list[Result] = [None] * batch.size
        if batch.gets:
            requests = [req for _, req in batch.gets]
            where = _items_where(requests)
            with decoding("a store item", **where):
                items = yield from self._plans.get(requests)
                items = [self._unseal(item) for item in items]
            for (i, _), item in zip(batch.gets, items, strict=True):
                results[i] = item
        for i, search in searches:
            with decoding("a store item found by search", namespace_prefix=search.prefix):
                if self.encryption is None:
                    found = yield from self._plans.search(search)
                else:
                    found = yield from self._sealed_search(search)
            results[i] = cast(list[SearchItem], found)
        for i, listing in batch.lists:
            results[i] = yield from self._plans.list_namespaces(listing)
        if writes:
            dropped = yield from self._plans.write(writes)
            if dropped:
                # As a deleted thread's tombstone drops a late checkpoint: the caller is a
                # run that outlived an erasure, and its data must not come back.
                logger.warning("dropped %d put(s) under a tombstoned (erased) namespace", dropped)
        return results

    def _sealed_search(self, search: SearchRequest) -> Plan[Any, list[VersionedSearchItem]]:
        """A search over sealed values: the backend narrows by prefix (and orders by
        vector score), every match is opened, and the filter and page apply here."""
        if search.limit == 0:
            return []
        wide = replace(search, filter=None, limit=SEARCH_ALL, offset=0, refresh=False)
        found = yield from self._plans.search(wide)
        opened = [self._unseal(item) for item in found]
        if search.filter is not None:
            opened = [item for item in opened if holds(search.filter, item.value)]
        page = opened[search.offset : search.offset + search.limit]
        if search.refresh and page:
            # Only the items handed out have their TTL refreshed, as without encryption.
            yield from self._plans.get(
                [GetRequest(tuple(item.namespace), item.key, True) for item in page]
            )
        return page

    def _sweep_plan(self, batch_size: int) -> Plan[Step, int]:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        total, more = 0, True
        while more:
            deleted, more = yield Transact(
                self._observed(
                    self._plans.sweep(batch_size),
                    lambda done, took, error: [
                        ev.StoreExpired(
                            backend=self._backend,
                            duration=took,
                            error=error,
                            deleted=0 if done is None else done[0],
                        )
                    ],
                )
            )
            total += deleted
        return total

    def _put_op(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        index: Literal[False] | list[str] | None,
        ttl: float | NotProvided | None,
        expected_version: int | None,
    ) -> PutOp | ConditionalPutOp:
        """What ``BaseStore.put`` builds, plus the optional version condition."""
        namespace = check_writable(namespace)
        if ttl is NOT_PROVIDED:
            ttl = (self.ttl_config or {}).get("default_ttl")
        op = PutOp(namespace, str(key), value, index=index, ttl=ttl)  # type: ignore[arg-type]
        return op if expected_version is None else ConditionalPutOp(op, expected_version)

    @staticmethod
    def _delete_op(
        namespace: Namespace, key: str, expected_version: int | None
    ) -> PutOp | ConditionalPutOp:
        op = PutOp(check_labels(namespace), str(key), None, ttl=None)
        return op if expected_version is None else ConditionalPutOp(op, expected_version)

    @staticmethod
    def _prefix_to_delete(namespace_prefix: Namespace, what: str = "delete_namespace") -> Namespace:
        prefix = check_labels(namespace_prefix)
        if not prefix:
            raise InvalidConfigError(
                f"{what} needs a non-empty namespace prefix; it will not act on the whole store"
            )
        return prefix

    def _count_plan(self, namespace_prefix: Namespace) -> Plan[Any, int]:
        prefix = check_labels(namespace_prefix)
        return self._observed_event(
            self._plans.count(prefix),
            ev.StoreCounted,
            lambda n: {"namespace": prefix, "count": n or 0},
        )

    def _delete_namespace_plan(self, namespace_prefix: Namespace) -> Plan[Any, int]:
        prefix = self._prefix_to_delete(namespace_prefix)
        return self._observed_event(
            self._plans.delete_namespace(prefix),
            ev.NamespaceDeleted,
            lambda n: {"namespace": prefix, "count": n or 0},
        )

    def _tombstone_plan(self, namespace_prefix: Namespace, hold_seconds: float) -> Plan[Any, None]:
        prefix = self._prefix_to_delete(namespace_prefix, "a tombstone")
        return self._plans.tombstone(prefix, check_hold(hold_seconds))

    def _lift_plan(self, namespace_prefix: Namespace) -> Plan[Any, bool]:
        return self._plans.lift(self._prefix_to_delete(namespace_prefix, "a tombstone"))

    # -- blocking API -------------------------------------------------------------------

    def batch(self, ops: Iterable[Op | ConditionalPutOp]) -> list[Result]:
        """Run ops as one transaction; results in op order (reads see the pre-batch store)."""
        return drive(self._batch_plan(ops), self._step)

    def put(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        expected_version: int | None = None,
    ) -> None:
        """``BaseStore.put``; with ``expected_version`` it raises ``ConflictError`` when the
        item is no longer at that version (``0``: when it exists)."""
        self.batch([self._put_op(namespace, key, value, index, ttl, expected_version)])

    def get(
        self, namespace: Namespace, key: str, *, refresh_ttl: bool | None = None
    ) -> VersionedItem | None:
        """``BaseStore.get``, typed as what it returns: the item with its ``version``."""
        return cast("VersionedItem | None", super().get(namespace, key, refresh_ttl=refresh_ttl))

    def delete(
        self, namespace: Namespace, key: str, *, expected_version: int | None = None
    ) -> None:
        """``BaseStore.delete``, optionally conditional like :meth:`put`."""
        self.batch([self._delete_op(namespace, key, expected_version)])

    def count(self, namespace_prefix: Namespace = ()) -> int:
        """How many live items are stored under ``namespace_prefix`` (all, for ``()``)."""
        return self._run(self._count_plan(namespace_prefix))

    def delete_namespace(self, namespace_prefix: Namespace) -> int:
        """Delete every item under ``namespace_prefix`` in one transaction; returns how many.

        Meant for erasing a user's data: ``delete_namespace(("users", user_id))``.
        """
        return self._run(self._delete_namespace_plan(namespace_prefix))

    def tombstone_namespace(
        self, namespace_prefix: Namespace, *, hold_seconds: float = DEFAULT_HOLD_HOURS * 3600
    ) -> None:
        """Drop every put at or below ``namespace_prefix`` for ``hold_seconds``.

        What ``erase_user`` leaves on an erased namespace, so that a run still going cannot
        write the user's data back. Deletes still work; placing it again extends it;
        :meth:`lift_tombstone` removes it early.
        """
        self._run(self._tombstone_plan(namespace_prefix, hold_seconds))

    def lift_tombstone(self, namespace_prefix: Namespace) -> bool:
        """Let puts at or below ``namespace_prefix`` work again before the hold ends (a user
        who signs up again); whether a tombstone was there."""
        return self._run(self._lift_plan(namespace_prefix))

    # -- asynchronous API ---------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op | ConditionalPutOp]) -> list[Result]:
        """Async :meth:`batch`."""
        return await adrive(self._batch_plan(ops), self._astep)

    async def aput(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        expected_version: int | None = None,
    ) -> None:
        """Async :meth:`put`."""
        await self.abatch([self._put_op(namespace, key, value, index, ttl, expected_version)])

    async def aget(
        self, namespace: Namespace, key: str, *, refresh_ttl: bool | None = None
    ) -> VersionedItem | None:
        """Async :meth:`get`."""
        found = await super().aget(namespace, key, refresh_ttl=refresh_ttl)
        return cast("VersionedItem | None", found)

    async def adelete(
        self, namespace: Namespace, key: str, *, expected_version: int | None = None
    ) -> None:
        """Async :meth:`delete`."""
        await self.abatch([self._delete_op(namespace, key, expected_version)])

    async def acount(self, namespace_prefix: Namespace = ()) -> int:
        """Async :meth:`count`."""
        return await self._arun(self._count_plan(namespace_prefix))

    async def adelete_namespace(self, namespace_prefix: Namespace) -> int:
        """Async :meth:`delete_namespace`."""
        return await self._arun(self._delete_namespace_plan(namespace_prefix))

    async def atombstone_namespace(
        self, namespace_prefix: Namespace, *, hold_seconds: float = DEFAULT_HOLD_HOURS * 3600
    ) -> None:
        """Async :meth:`tombstone_namespace`."""
        await self._arun(self._tombstone_plan(namespace_prefix, hold_seconds))

    async def alift_tombstone(self, namespace_prefix: Namespace) -> bool:
        """Async :meth:`lift_tombstone`."""
        return await self._arun(self._lift_plan(namespace_prefix))


def _store_events(
    backend: str,
    batch: _Batch,
    writes: list[WriteRequest],
    results: list[Result] | None,
    took: float,
    error: BaseException | None,
) -> list[ev.MemoryEvent]:
    """One event per op of a batch, in op order for reads, then namespace listings, then
    the writes.

    The ops ran in one transaction: each carries its duration, and a failed batch (a
    conflict, an outage) fails every op in it.
    """
    out: list[ev.MemoryEvent] = []
    reads: list[tuple[int, Namespace, str | None, str | None]]
    reads = [(i, req.namespace, req.key, None) for i, req in batch.gets]
    reads += [(i, req.prefix, None, q) for i, req, q in batch.searches]
    for i, namespace, key, query in sorted(reads, key=lambda r: r[0]):
        found = None if results is None else results[i]
        count = len(found) if isinstance(found, list) else int(found is not None)
        out.append(
            ev.StoreRead(
                backend=backend,
                duration=took,
                error=error,
                namespace=namespace,
                key=key,
                count=count,
                query=query,
            )
        )
    for i, listing in batch.lists:
        found = None if results is None else results[i]
        prefix = next((c.labels for c in listing.conditions if not c.suffix), ())
        out.append(
            ev.NamespacesListed(
                backend=backend,
                duration=took,
                error=error,
                namespace=tuple("*" if label is None else label for label in prefix),
                count=len(found) if isinstance(found, list) else 0,
            )
        )
    for w in writes:
        if w.value is None:
            out.append(
                ev.StoreDeleted(
                    backend=backend,
                    duration=took,
                    error=error,
                    namespace=w.namespace,
                    key=w.key,
                    expected_version=w.expected_version,
                )
            )
        else:
            out.append(
                ev.StoreWritten(
                    backend=backend,
                    duration=took,
                    error=error,
                    namespace=w.namespace,
                    key=w.key,
                    bytes_written=w.value.size,
                    expected_version=w.expected_version,
                )
            )
    return out


def _kind(batch: _Batch) -> tuple[Kind, int]:
    """Whether a prepared batch may share a transaction with others (see
    :mod:`.merging`), and its values' bytes."""
    reads = bool(batch.gets or batch.searches or batch.lists)
    if not batch.writes:
        return "read", 0
    nbytes = sum(w.request.value.size for w in batch.writes.values() if w.request.value)
    conditional = any(w.request.expected_version is not None for w in batch.writes.values())
    return ("alone" if reads or conditional else "write"), nbytes


def _merge(batches: list[_Batch]) -> tuple[_Batch, list[int]]:
    """One batch of several callers' (whose writes touch distinct keys), and where each
    caller's results start."""
    merged = _Batch(0)
    offsets: list[int] = []
    for batch in batches:
        at = merged.size
        offsets.append(at)
        merged.gets += [(i + at, req) for i, req in batch.gets]
        merged.searches += [(i + at, req, q) for i, req, q in batch.searches]
        merged.lists += [(i + at, req) for i, req in batch.lists]
        merged.writes.update(batch.writes)
        merged.size += batch.size
    return merged, offsets


def _items_where(requests: list[GetRequest]) -> dict[str, object]:
    """The namespace and key of a get, for a corrupt-data error (all of them for several)."""
    if len(requests) == 1:
        return {"namespace": requests[0].namespace, "key": requests[0].key}
    return {"items": [(r.namespace, r.key) for r in requests]}


def _with_query(request: SearchRequest, vector: Vector) -> SearchRequest:
    return SearchRequest(
        request.prefix, request.filter, request.limit, request.offset, request.refresh, vector
    )


def _with_vectors(request: WriteRequest, vectors: list[tuple[str, Vector]]) -> WriteRequest:
    return WriteRequest(
        request.namespace,
        request.key,
        request.value,
        request.ttl,
        request.expected_version,
        vectors,
    )


class SyncStore(SyncBridge, StoreBase, ABC):
    """A store whose storage calls block; setup and TTL sweeping are blocking too."""

    _sweeper: ThreadSweeper | None = None

    def _before_close(self) -> None:
        self.stop_ttl_sweeper()

    def setup(self) -> None:
        """Create or migrate the storage; safe to run repeatedly and concurrently."""
        self._run(self._plans.setup())

    def sweep_ttl(self, batch_size: int = DEFAULT_SWEEP_BATCH) -> int:
        """Delete expired items, ``batch_size`` per transaction; returns how many.

        Expired items are already invisible to every read; sweeping reclaims the space.
        """
        return drive(self._sweep_plan(batch_size), self._step)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Future[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the ttl config's, else 5)
        on a daemon thread. Without a ``ttl`` config there is nothing to sweep, and the
        returned future is already done. Cancel the future or call
        :meth:`stop_ttl_sweeper` to stop."""
        if self.ttl_config is None:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        if self._sweeper is not None and self._sweeper.running:
            return self._sweeper.future
        interval = sweep_interval(self.ttl_config, sweep_interval_minutes)
        self._sweeper = ThreadSweeper(self.sweep_ttl, interval)
        return self._sweeper.future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False if it was still running after ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        stopped = self._sweeper.stop(timeout)
        if stopped:
            self._sweeper = None
        return stopped


class AsyncStore(AsyncBridge, StoreBase, ABC):
    """A store whose storage calls are awaited; setup and TTL sweeping are awaited too.

    Bound to the event loop running when it is created (its connections belong to it).
    Stores that set ``_merges_calls`` merge concurrent ``abatch`` calls (hence ``aget``,
    ``aput``, ``asearch``...) into shared transactions, at most :meth:`_merge_slots` at
    once (see :mod:`.merging`), so a burst of calls waits in a queue, not at the pool.
    """

    _sweeper: TaskSweeper | None = None
    _merges_calls: bool = False
    _merger: CallMerger[_Batch] | None = None

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._bind_loop()

    async def _before_close(self) -> None:
        await self.stop_ttl_sweeper()
        if self._merger is not None:
            await self._merger.drain()  # no queued call is lost when the pool closes

    def _merge_slots(self) -> int:
        """How many merged transactions may run at once (the pool's size)."""
        return 1

    def _shared_error(self, exc: Exception) -> bool:
        """Whether ``exc`` came from the pool or the server rather than from a call's
        data: then a merged group's callers all get it (see :mod:`.merging`)."""
        return isinstance(exc, (ConnectionError, TimeoutError))

    async def abatch(self, ops: Iterable[Op | ConditionalPutOp]) -> list[Result]:
        """Async :meth:`batch`; concurrent calls may share a transaction (see the class)."""
        if not self._merges_calls or asyncio.get_running_loop() is not self.loop:
            return await adrive(self._batch_plan(ops), self._astep)
        merger = self._merger
        if merger is None:
            merger = self._merger = CallMerger(
                run_one=self._run_prepared,
                run_merged=self._run_merged,
                shared=self._shared_error,
                slots=self._merge_slots(),
                max_bytes=self._plans.max_batch_bytes,
            )
        batch = self._prepare(ops)  # the caller's own errors, raised in its own task
        if not batch.size:
            return []
        kind, nbytes = _kind(batch)
        return await merger.submit(
            batch, kind, ops=batch.size, nbytes=nbytes, keys=frozenset(batch.writes)
        )

    async def _run_prepared(self, batch: _Batch) -> list[Result]:
        return await adrive(self._prepared_plan(batch), self._astep)

    async def _run_merged(self, batches: list[_Batch]) -> list[list[Result]]:
        """Several callers' batches as one; each caller's slice of the results."""
        merged, offsets = _merge(batches)
        results = await self._run_prepared(merged)
        return [results[at : at + b.size] for at, b in zip(offsets, batches, strict=True)]

    async def setup(self) -> None:
        """Create or migrate the storage; safe to run repeatedly and concurrently."""
        await self._arun(self._plans.setup())

    async def sweep_ttl(self, batch_size: int = DEFAULT_SWEEP_BATCH) -> int:
        """Async :meth:`SyncStore.sweep_ttl`."""
        return await adrive(self._sweep_plan(batch_size), self._astep)

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Future[None]:
        """Sweep periodically in a task on the running loop; returns the task (cancel it,
        or call :meth:`stop_ttl_sweeper`, to stop). Without a ``ttl`` config the returned
        future is already done."""
        if self.ttl_config is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if self._sweeper is not None and self._sweeper.running:
            return self._sweeper.task
        interval = sweep_interval(self.ttl_config, sweep_interval_minutes)
        self._sweeper = TaskSweeper(self.sweep_ttl, interval)
        return self._sweeper.task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; False if it was still running after ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        stopped = await self._sweeper.stop(timeout)
        if stopped:
            self._sweeper = None
        return stopped


__all__ = [
    "AsyncStore",
    "ConditionalPutOp",
    "InvalidValueError",
    "StoreBase",
    "StoreOptions",
    "SyncStore",
    "VersionedItem",
    "VersionedSearchItem",
]
