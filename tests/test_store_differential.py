"""Differential test: random operation sequences on our stores and on ``InMemoryStore``.

Hypothesis draws sequences of puts, deletes, gets, searches (with filters, pagination and
semantic queries), namespace listings (prefix/suffix conditions with wildcards, depth),
mixed batches, puts that expire (and TTL sweeps after them) and ``delete_namespace``, runs
each on a fresh store of ours (PostgreSQL, single-node Redis, Redis Cluster, SQLite and the
server matrix of ``tests/backends.py``; blocking and async classes) and on LangGraph's
``InMemoryStore``, and compares every answer. Where LangGraph leaves the order unspecified
(search without a query) a page is checked as "the right number of the right items", and
the whole result as a set; namespace listings are ordered
by definition and compared as lists; semantic scores are compared with a tolerance and must
be non-increasing.

``InMemoryStore`` quirks we do not reproduce are neutralized: :class:`Reference` fixes two
bugs (empty namespaces listed; batches putting one text twice crash), and where its order
operators meet a value ``float()`` rejects it raises, so there we only check that our store
answers (``test_store_postgres`` pins what it answers).
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest
import test_redis_saver
from backends import ALL_SERVERS, MATRIX
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from langgraph_memory_plus.store import AsyncPostgresStore, PostgresStore
from langgraph_memory_plus.store.redis import AsyncRedisStore, RedisStore
from langgraph_memory_plus.store.sqlite import AsyncSqliteStore, SqliteStore

pytestmark = pytest.mark.storage

MAX_EXAMPLES = 140
MATRIX_EXAMPLES = 40
"""On the server matrix (other versions, poolers): what differs there is the server, not the
filters or search rules, which the machine's servers run through MAX_EXAMPLES."""
ALL = 10_000
EXPIRE_MINUTES = 0.00005  # 3 ms: an "expire" op waits this out (EXPIRE_WAIT) before going on
EXPIRE_WAIT = 0.018
"""Every store stamps expiry at least to the microsecond from this machine's clock, and the
wait starts after the put returned: the TTL's length is not what is tested, only that the
item is gone by the next operation. The 15 ms past it are a margin, as before."""


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic: letter counts of a-f."""
    return [[float(t.count(c)) for c in "abcdef"] for t in texts]


INDEX: Any = {"dims": 6, "embed": embed, "fields": ["text"]}

# -- strategies ----------------------------------------------------------------------------

# Small universes, so that items collide, filters match and pages have several items.
# Labels include ones whose order depends on the collation ("B" < "a" bytewise) and one
# that a careless prefix range would mistake for a child of "a" ("a-b").
labels = st.sampled_from(["a", "b", "B", "a-b"])
namespaces = st.lists(labels, min_size=1, max_size=3).map(tuple)
prefixes = st.one_of(st.just(()), st.tuples(labels), st.lists(labels, max_size=2).map(tuple))
keys = st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k\x00"])
texts = st.sampled_from(["aa", "ab", "abc", "ddd", "f", "cafe", "bead", "ef"])
# "long..." is longer than the stores' field indexes keep (see store/tokens.py).
LONG = "long" * 17
scalars = st.one_of(st.none(), st.sampled_from(["x", "y", LONG]), st.integers(0, 2), st.booleans())
small = st.one_of(st.integers(-3, 3), st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.0, 2.5]))
numbers = st.one_of(
    small,
    small,
    small,
    st.booleans(),
    st.sampled_from(["2", " 1 ", "1e0", "1_0", "-2.5", "inf", "x"]),
)
# Dates in one format: InMemoryStore compares their strings, we the days they name (see
# store/filters.py), which agree here; where formats or offsets differ they do not, and
# tests/test_memory_search.py pins ours.
dates = st.sampled_from(["2025-12-31", "2026-01-01", "2026-06-01", "2026-06-02"])
values = st.fixed_dictionaries(
    {"text": texts, "n": numbers, "tag": scalars, "d": dates},
    optional={
        "nested": st.fixed_dictionaries(
            {"x": st.integers(0, 2)}, optional={"y": st.sampled_from(["p", "q"])}
        ),
        "list": st.lists(st.integers(0, 2), max_size=2),
        "t_1": scalars,  # a key the field indexes leave out
    },
)
comparisons = st.dictionaries(
    st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), small, min_size=1, max_size=2
)
filters = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.fixed_dictionaries({"tag": scalars}),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"$ne": scalars})}),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"$eq": scalars})}),
    st.fixed_dictionaries({"n": comparisons}),
    st.fixed_dictionaries({"n": comparisons}),
    st.fixed_dictionaries({"n": st.one_of(small, st.booleans(), st.sampled_from(["2", "x"]))}),
    st.fixed_dictionaries({"nested": st.fixed_dictionaries({"x": st.integers(0, 2)})}),
    st.fixed_dictionaries({"nested": st.fixed_dictionaries({"$eq": st.just({"x": 1})})}),
    st.fixed_dictionaries({"nested": st.fixed_dictionaries({"y": st.sampled_from(["p", "q"])})}),
    st.fixed_dictionaries(
        {
            "nested": st.fixed_dictionaries(
                {"$eq": st.sampled_from([{"x": 1, "y": "p"}, {"y": "q"}])}
            )
        }
    ),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"$eq": scalars, "$ne": scalars})}),
    st.fixed_dictionaries({"t_1": scalars, "tag": scalars}),
    st.fixed_dictionaries({"list": st.lists(st.integers(0, 2), max_size=2)}),
    st.fixed_dictionaries({"tag": scalars, "n": comparisons}),
    st.fixed_dictionaries(
        {"d": st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), dates, min_size=1)}
    ),
)
limits = st.integers(0, 6)
offsets = st.integers(0, 3)
paths = st.lists(st.sampled_from(["a", "b", "B", "a-b", "*"]), min_size=1, max_size=3).map(tuple)

puts = st.tuples(st.just("put"), namespaces, keys, values)
deletes = st.tuples(st.just("delete"), namespaces, keys)
gets = st.tuples(st.just("get"), namespaces, keys)
searches = st.tuples(st.just("search"), prefixes, filters, limits, offsets)
queries = st.tuples(
    st.just("query"), prefixes, texts, st.one_of(st.none(), st.none(), filters), limits, offsets
)
listings = st.tuples(
    st.just("list"),
    st.one_of(st.none(), paths),
    st.one_of(st.none(), paths),
    st.one_of(st.none(), st.integers(0, 3)),
    st.integers(0, 6),
    offsets,
)
simple = st.one_of(puts, deletes, gets, searches)
batches = st.tuples(st.just("batch"), st.lists(simple, min_size=1, max_size=4))
# Puts with a TTL that has run out by the next operation (to the reference: deletes); a
# TTL sweep (nothing to the reference); delete_namespace of a non-empty prefix.
expiries = st.tuples(
    st.just("expire"), st.lists(st.tuples(namespaces, keys, values), min_size=1, max_size=3)
)
sweeps = st.tuples(st.just("sweep"))
drops = st.tuples(st.just("drop"), st.lists(labels, min_size=1, max_size=2).map(tuple))
operations = st.one_of(
    puts,
    puts,
    puts,
    puts,
    deletes,
    gets,
    searches,
    searches,
    queries,
    queries,
    listings,
    batches,
    expiries,
    sweeps,
    drops,
)


def to_op(spec: tuple[Any, ...]) -> Any:
    kind = spec[0]
    if kind == "put":
        return PutOp(spec[1], spec[2], spec[3])
    if kind == "delete":
        return PutOp(spec[1], spec[2], None)
    if kind == "get":
        return GetOp(spec[1], spec[2])
    if kind == "search":
        return SearchOp(spec[1], spec[2], spec[3], spec[4])
    if kind == "query":
        return SearchOp(spec[1], spec[3], spec[4], spec[5], spec[2])
    conditions = []
    if spec[1] is not None:
        conditions.append(MatchCondition("prefix", spec[1]))
    if spec[2] is not None:
        conditions.append(MatchCondition("suffix", spec[2]))
    return ListNamespacesOp(tuple(conditions), spec[3], spec[4], spec[5])


# -- running both ----------------------------------------------------------------------------


class Ours:
    """One blocking interface over any of our classes (the async ones driven on their own loop)."""

    def __init__(
        self, backend: str, url: str, is_async: bool, options: dict[str, Any] | None = None
    ) -> None:
        self.backend, self.url, self.is_async = backend, url, is_async
        # Only what a server needs (PgBouncer: prepare_threshold); each store has its own prefix.
        self.options = {k: v for k, v in (options or {}).items() if k != "key_prefix"}
        self.name = f"diff_{uuid.uuid4().hex[:12]}"  # schema or key prefix, removed on exit
        self.ops_run = 0

    def _open(self) -> Any:
        if self.backend == "postgres":
            cls: Any = AsyncPostgresStore if self.is_async else PostgresStore
            return cls.from_conn_string(self.url, schema=self.name, index=INDEX, **self.options)
        if self.backend == "sqlite":  # a file per test in a temporary directory
            cls = AsyncSqliteStore if self.is_async else SqliteStore
            return cls.from_conn_string(f"{self.url}/{self.name}.db", index=INDEX)
        cls = AsyncRedisStore if self.is_async else RedisStore
        return cls.from_conn_string(self.url, key_prefix=self.name, index=INDEX)

    def __enter__(self) -> Ours:
        if self.backend == "postgres":
            # No prepared statements: the same DELETE runs once per example, via PgBouncer too.
            self.admin: Any = psycopg.connect(self.url, autocommit=True, prepare_threshold=None)
        elif self.backend == "sqlite":
            self.admin = sqlite3.connect(f"{self.url}/{self.name}.db", isolation_level=None)
        else:
            self.admin = test_redis_saver.admin_client(self.url)
        if self.is_async:
            self.loop = asyncio.new_event_loop()
            self.stack = AsyncExitStack()
            self.store: Any = self.loop.run_until_complete(
                self.stack.enter_async_context(self._open())
            )
            self.loop.run_until_complete(self.store.setup())
        else:
            self.sync_cm = self._open()
            self.store = self.sync_cm.__enter__()
            self.store.setup()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.is_async:
            self.loop.run_until_complete(self.stack.aclose())
            self.loop.close()
        else:
            self.sync_cm.__exit__(*exc)
        if self.backend == "postgres":
            self.admin.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
        elif self.backend != "sqlite":  # the temporary directory goes by itself
            self.reset()
        self.admin.close()

    def reset(self) -> None:
        if self.backend in ("postgres", "sqlite"):
            table = f'"{self.name}".lgmp_store' if self.backend == "postgres" else "lgmp_store"
            self.admin.execute(f"DELETE FROM {table}")
            return
        found = list(self.admin.scan_iter(match=f"{self.name}:*", count=1000))
        if found:
            self.admin.delete(*found)  # a cluster client splits this by hash slot

    def batch(self, ops: list[Any]) -> list[Any]:
        self.ops_run += len(ops)
        if self.is_async:
            return self.loop.run_until_complete(self.store.abatch(ops))  # type: ignore[no-any-return]
        return self.store.batch(ops)  # type: ignore[no-any-return]

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A store method by its blocking name (the async class: its coroutine, awaited)."""
        self.ops_run += 1
        if not self.is_async:
            return getattr(self.store, method)(*args, **kwargs)
        name = method if method == "sweep_ttl" else f"a{method}"
        return self.loop.run_until_complete(getattr(self.store, name)(*args, **kwargs))


class Reference(InMemoryStore):
    """``InMemoryStore`` with two of its quirks fixed, so the comparison is about behaviour.

    - It keeps empty namespaces (left by deletes, or created by a ``get``) and lists them.
    - A batch with two puts of the same text fails: it embeds each distinct text once but
      then expects one vector per (item, path).
    """

    def batch(self, ops: Any) -> list[Any]:
        try:
            return super().batch(ops)
        finally:
            for ns in [ns for ns, items in self._data.items() if not items]:
                del self._data[ns]

    def _insertinmem_store(
        self,
        to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]],
        embeddings: list[list[float]],
    ) -> None:
        for embedding, targets in zip(embeddings, to_embed.values(), strict=True):
            for ns, key, path in targets:
                self._vectors[ns][key][path] = embedding


def view(item: Item) -> tuple[Any, ...]:
    """What both stores must agree on; JSON objects are unordered, so keys are sorted."""
    return (item.namespace, item.key, json.dumps(item.value, sort_keys=True))


def reference(ref: Reference, op: Any) -> Any:
    """The reference answer, or the exception InMemoryStore raised."""
    try:
        result = ref.batch([op])[0]
    except (TypeError, ValueError, OverflowError) as exc:
        result = exc
    return result


def check_search(ours: Any, op: SearchOp, ref: Reference, ours_all: list[Any]) -> None:
    """A page is the right number of the right items; the whole result is the right set."""
    try:
        everything = ref.batch([op._replace(limit=ALL, offset=0)])[0]
    except (TypeError, ValueError, OverflowError):
        return  # InMemoryStore raised: only "we answered" is checked
    assert isinstance(everything, list)
    expected = everything[op.offset : op.offset + op.limit]
    assert len(ours) == len(expected), (op, ours, expected)
    assert {view(i) for i in ours} <= {view(i) for i in everything}
    assert len({(i.namespace, i.key) for i in ours}) == len(ours)
    assert {view(i) for i in ours_all} == {view(i) for i in everything}
    if op.query:
        scores = {(i.namespace, i.key): i.score for i in everything}
        assert [i.score for i in ours] == sorted((i.score for i in ours), reverse=True)
        for got, want in zip(
            [i.score for i in ours],
            sorted(scores.values(), reverse=True)[op.offset :],
            strict=False,
        ):
            assert math.isclose(got, want, abs_tol=1e-9)
        for item in ours:
            assert math.isclose(item.score, scores[(item.namespace, item.key)], abs_tol=1e-9)


UNKNOWN = object()  # InMemoryStore raised for this search: only "we answered" is checked


def under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def compare(ours: Ours, ref: Reference, spec: tuple[Any, ...]) -> None:
    if spec[0] == "expire":
        for namespace, key, value in spec[1]:
            ours.call("put", namespace, key, value, ttl=EXPIRE_MINUTES)
        ref.batch([PutOp(namespace, key, None) for namespace, key, _ in spec[1]])
        time.sleep(EXPIRE_WAIT)
        return
    if spec[0] == "sweep":
        ours.call("sweep_ttl")
        return
    if spec[0] == "drop":
        gone = [
            PutOp(ns, key, None)
            for ns, items in ref._data.items()
            if under(ns, spec[1])
            for key in items
        ]
        ref.batch(gone)
        # Our count includes expired items not swept yet: it is at least the live ones.
        assert ours.call("delete_namespace", spec[1]) >= len(gone)
        return
    if spec[0] == "batch":
        ops = [to_op(s) for s in spec[1]]
        got = ours.batch(ops)
        for op, mine, want in zip(ops, got, reference_batch(ref, ops), strict=True):
            compare_result(op, mine, want)
        return
    op = to_op(spec)
    if isinstance(op, SearchOp):
        page = ours.batch([op])[0]
        whole = ours.batch([op._replace(limit=ALL, offset=0)])[0]
        check_search(page, op, ref, whole)
        return
    compare_result(op, ours.batch([op])[0], reference(ref, op))


def reference_batch(ref: Reference, ops: list[Any]) -> list[Any]:
    try:
        result = ref.batch(ops)
    except (TypeError, ValueError, OverflowError):
        # A search raised; run the rest as one batch, so reads still precede the writes.
        rest = iter(ref.batch([op for op in ops if not isinstance(op, SearchOp)]))
        result = [UNKNOWN if isinstance(op, SearchOp) else next(rest) for op in ops]
    return result


def compare_result(op: Any, mine: Any, want: Any) -> None:
    if isinstance(op, GetOp):
        assert (None if mine is None else view(mine)) == (None if want is None else view(want))
    elif isinstance(op, ListNamespacesOp):
        assert mine == want, op
    elif isinstance(op, SearchOp):
        assert isinstance(mine, list)
        if want is UNKNOWN:
            return
        assert len(mine) == len(want), op
        if op.offset == 0 and len(want) < op.limit:  # the page holds every match
            assert {view(i) for i in mine} == {view(i) for i in want}, op
    else:
        assert mine is None


@ALL_SERVERS
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_random_operations_match_in_memory_store(storage: Any, flavour: str) -> None:
    # SQLite's filters are the Python definition itself (filters.holds), so fewer examples
    # buy the same confidence there; its own tests pin the rest.
    examples = MAX_EXAMPLES // 2 if storage.kind == "sqlite" else MAX_EXAMPLES
    if storage.name in MATRIX:
        examples = MATRIX_EXAMPLES
    with Ours(storage.kind, storage.url, flavour == "async", storage.options) as ours:
        run_random_operations(ours, examples)


def run_random_operations(ours: Ours, examples: int) -> None:
    """``examples`` random sequences (seed puts, then operations) on ``ours`` and on
    ``InMemoryStore``, compared after every operation."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(puts, min_size=3, max_size=20), st.lists(operations, min_size=3, max_size=40))
    def run(seed: list[tuple[Any, ...]], specs: list[tuple[Any, ...]]) -> None:
        ours.reset()
        ref = Reference(index=INDEX)
        for spec in [("batch", seed), *specs]:
            compare(ours, ref, spec)

    run()
    assert ours.ops_run >= examples
