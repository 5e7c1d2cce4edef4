"""Behaviour, bad-input and fault tests for ``PostgresStore`` / ``AsyncPostgresStore``.

Every test runs against a real PostgreSQL (the ``pg_url`` fixture) in a schema of its own,
so tests can look at rows directly to prove what was (not) written. Most tests are written
once against :class:`Ops`, which drives either class through one awaitable interface, and
run for both (the ``flavour`` parameter). Where the expected behaviour is "what LangGraph's
``InMemoryStore`` does", the test asks an ``InMemoryStore`` instead of hard-coding answers.

No assertion depends on speed: waits are bounded polls for a condition, and TTL tests only
sleep *longer* than a TTL or compare stored expiry times.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore, _cosine_similarity

from langgraph_memory_plus.errors import ConflictError, InvalidConfigError, ValueTooLargeError
from langgraph_memory_plus.store import (
    AsyncPostgresStore,
    ConditionalPutOp,
    InvalidFilterError,
    InvalidValueError,
    PostgresStore,
    VersionedItem,
)
from langgraph_memory_plus.store.postgres.schema import MIGRATIONS
from langgraph_memory_plus.store.vectors import cosine, norm

pytestmark = pytest.mark.storage

WAIT_SECONDS = 20.0  # upper bound of every poll; a healthy run never gets near it
DIMS = 6


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: letter counts of a-f (enough to rank texts apart)."""
    return [[float(t.lower().count(c)) for c in "abcdef"] for t in texts]


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text"]}


# --------------------------------------------------------------------------------------------
# Adapter and fixtures
# --------------------------------------------------------------------------------------------


class Ops:
    """Drives a sync store through its sync methods, an async store through its ``a*`` twins."""

    def __init__(self, store: Any, is_async: bool) -> None:
        self.store = store
        self.is_async = is_async

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.store, "a" + name)(*args, **kwargs)
        return getattr(self.store, name)(*args, **kwargs)

    async def admin(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """setup / sweep_ttl / start / stop: coroutines on the async class, plain on the sync."""
        result = getattr(self.store, name)(*args, **kwargs)
        return await result if self.is_async else result

    def background(self, name: str, *args: Any, **kwargs: Any) -> asyncio.Task[Any]:
        """Start a call without waiting (sync stores run it in a worker thread)."""
        if self.is_async:
            return asyncio.ensure_future(getattr(self.store, "a" + name)(*args, **kwargs))
        call = getattr(self.store, name)
        return asyncio.ensure_future(asyncio.to_thread(call, *args, **kwargs))


OpenStore = Callable[..., AbstractAsyncContextManager[Ops]]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    """A schema of this test's own, dropped afterwards."""
    name = f"store_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def open_store(pg_url: str, schema: str, flavour: str) -> OpenStore:
    """``open_store(**options)`` opens a new store of this test's flavour on the schema."""

    @asynccontextmanager
    async def factory(**options: Any) -> AsyncIterator[Ops]:
        options.setdefault("schema", schema)
        if flavour == "sync":
            with PostgresStore.from_conn_string(pg_url, **options) as store:
                store.setup()
                yield Ops(store, False)
        else:
            async with AsyncPostgresStore.from_conn_string(pg_url, **options) as astore:
                await astore.setup()
                yield Ops(astore, True)

    return factory


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def rows(conn: psycopg.Connection[Any], schema: str, where: str = "true") -> list[tuple[Any, ...]]:
    return conn.execute(
        f'SELECT prefix, key, value::text, expires_at FROM "{schema}".lgmp_store WHERE {where} '
        "ORDER BY prefix, key"
    ).fetchall()


def same(ours: Sequence[Item] | Item | None, theirs: Sequence[Item] | Item | None) -> None:
    """Items agree on what LangGraph defines (namespace, key, value); timestamps are ours."""

    def view(item: Item) -> tuple[Any, ...]:
        return (item.namespace, item.key, item.value)

    if ours is None or theirs is None:
        assert ours is None and theirs is None, (ours, theirs)
    elif isinstance(ours, Item):
        assert isinstance(theirs, Item)
        assert view(ours) == view(theirs)
    else:
        assert isinstance(theirs, Sequence)
        assert sorted(map(view, ours), key=repr) == sorted(map(view, theirs), key=repr)


def keys(items: Sequence[Item]) -> list[str]:
    return [item.key for item in items]


async def poll(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def blocked_by(conn: psycopg.Connection[Any], locker_pid: int) -> list[int]:
    found = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [locker_pid]
    ).fetchall()
    return [r[0] for r in found]


# --------------------------------------------------------------------------------------------
# Basic behaviour, compared with InMemoryStore
# --------------------------------------------------------------------------------------------


def test_a_new_database_gets_the_layout_the_migrations_build(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    """setup() on a schema with no tables creates ``schema.FRESH`` directly, and
    ``lgmp_store_vectors`` only for a store with an index; a schema at version 0 replays
    the rest. With an index both end the same, catalog entry by catalog entry. A store
    without one works without the vectors table, and a store with one set up later on
    that schema creates it: the same layout again."""
    from psycopg import sql
    from test_postgres_saver import _layout

    fresh, replayed, plain = (f"store_{uuid.uuid4().hex[:12]}" for _ in range(3))
    options: dict[str, Any] = {"index": INDEX, "vector_backend": "exact"}

    def use(schema: str, **more: Any) -> None:
        with PostgresStore.from_conn_string(pg_url, schema=schema, **more) as store:
            store.setup()
            store.put(("u",), "k", {"text": "hello", "kind": "fact"})
            assert keys(store.search(("u",), filter={"kind": "fact"})) == ["k"]
            store.delete(("u",), "k")

    def vectors(schema: str) -> Any:
        found = admin.execute("SELECT to_regclass(%s)", (f'"{schema}".lgmp_store_vectors',))
        return found.fetchone()[0]  # type: ignore[index]

    try:
        use(fresh, **options)
        q = sql.Identifier(replayed)
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(q))
        for statement in MIGRATIONS[0]:
            admin.execute(statement.format(s=q.as_string(admin)))
        admin.execute(
            sql.SQL(
                "CREATE TABLE {}.lgmp_store_migrations (v integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now()); "
                "INSERT INTO {}.lgmp_store_migrations (v) VALUES (0)"
            ).format(q, q)
        )
        use(replayed, **options)
        layout = _layout(admin, fresh, "lgmp_store_migrations")
        assert layout == _layout(admin, replayed, "lgmp_store_migrations")
        assert sorted(int(v) for (v,) in layout["versions"]) == list(range(len(MIGRATIONS)))
        use(plain)
        assert vectors(plain) is None
        use(plain, **options)
        assert vectors(plain) is not None
        assert _layout(admin, plain, "lgmp_store_migrations") == layout
    finally:
        for name in (fresh, replayed, plain):
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_put_get_update_delete_like_in_memory(open_store: OpenStore) -> None:
    ref = InMemoryStore()
    async with open_store() as ops:
        for store in (ops, Ops(ref, False)):
            await store.call("put", ("users", "u1"), "prefs", {"theme": "dark", "n": [1, 2.5]})
            await store.call("put", ("users", "u1"), "prefs", {"theme": "light"})
            await store.call("put", ("users", "u2"), "prefs", {"theme": "dark"})
            await store.call("delete", ("users", "u2"), "prefs")
            await store.call("delete", ("users", "nobody"), "nothing")
        for ns, key in [(("users", "u1"), "prefs"), (("users", "u2"), "prefs"), (("x",), "y")]:
            same(await ops.call("get", ns, key), ref.get(ns, key))
        item = await ops.call("get", ("users", "u1"), "prefs")
        assert isinstance(item, VersionedItem)
        assert item.value == {"theme": "light"}
        assert item.dict()["version"] == item.version


async def test_versions_change_on_every_write_and_never_repeat(open_store: OpenStore) -> None:
    async with open_store() as ops:
        seen = []
        for i in range(3):
            await ops.call("put", ("v",), "k", {"i": i})
            seen.append((await ops.call("get", ("v",), "k")).version)
        await ops.call("delete", ("v",), "k")
        await ops.call("put", ("v",), "k", {"i": 0})
        item = await ops.call("get", ("v",), "k")
        seen.append(item.version)
        assert len(set(seen)) == 4 and seen == sorted(seen)
        first = await ops.call("get", ("v",), "k")
        await ops.call("put", ("v",), "k", {"i": 1})
        second = await ops.call("get", ("v",), "k")
        assert second.created_at == first.created_at
        assert second.updated_at >= first.updated_at


async def test_batch_reads_see_the_store_before_the_batch_writes(open_store: OpenStore) -> None:
    ref = InMemoryStore()
    ref.put(("b",), "old", {"v": 1})
    batch = [
        PutOp(("b",), "new", {"v": 2}),
        GetOp(("b",), "new"),
        PutOp(("b",), "old", {"v": 3}),
        PutOp(("b",), "old", {"v": 4}),  # the last op for a key wins
        GetOp(("b",), "old"),
        SearchOp(("b",)),
        ListNamespacesOp(),
    ]
    async with open_store() as ops:
        await ops.call("put", ("b",), "old", {"v": 1})
        ours = await ops.call("batch", batch)
        theirs = ref.batch(batch)
        assert ours[0] is None and ours[2] is None and ours[3] is None
        same(ours[1], theirs[1])
        same(ours[4], theirs[4])
        same(ours[5], theirs[5])
        assert ours[6] == theirs[6]
        same(await ops.call("get", ("b",), "old"), ref.get(("b",), "old"))
        same(await ops.call("search", ("b",)), ref.search(("b",)))
        assert await ops.call("batch", []) == []


async def test_search_prefix_boundaries_and_recency_order(open_store: OpenStore) -> None:
    async with open_store() as ops:
        spaces = [(("a",), "1"), (("a", "b"), "2"), (("ab",), "3"), (("a", "b", "c"), "4")]
        spaces += [(("a-b",), "5"), (("a", "b-c"), "6")]  # '-' sorts before '.' and '/'
        for ns, key in spaces:
            await ops.call("put", ns, key, {"k": key})
        assert keys(await ops.call("search", ("a",))) == ["6", "4", "2", "1"]
        assert keys(await ops.call("search", ("a", "b"))) == ["4", "2"]
        assert keys(await ops.call("search", ("ab",))) == ["3"]
        assert keys(await ops.call("search", ())) == ["6", "5", "4", "3", "2", "1"]
        assert await ops.call("count", ("a", "b")) == 2
        await ops.call("put", ("a",), "1", {"k": "again"})
        assert keys(await ops.call("search", ("a",)))[0] == "1"


async def test_filtered_search_across_namespaces_like_in_memory_store(
    open_store: OpenStore,
) -> None:
    """Many namespaces under one prefix, every operator, nested namespaces and fields,
    pages: the same answers as InMemoryStore; then expired and deleted items never come
    back, whatever index a backend keeps for such searches."""
    ref = InMemoryStore()

    def newest_first(items: Sequence[Item]) -> list[tuple[tuple[str, ...], str]]:
        # Keys number the puts, so by key is by version: InMemoryStore's order is its own.
        return sorted(((h.namespace, h.key) for h in items), key=lambda a: a[1], reverse=True)

    async with open_store() as ops:
        puts = []
        for i in range(60):
            label = f"n{i % 12:02}"
            namespace = ("u", label, "deep") if i % 5 == 0 else ("u", label)
            value = {"kind": ("fact", "note", "rare")[min(i % 7, 2)], "n": i % 9}
            value["meta"] = {"src": "doc" if i % 2 else "chat", "lang": ["en", "de"][i % 3 % 2]}
            puts.append(PutOp(namespace, f"k{i:02}", value))
        for op in puts:  # one at a time: versions follow the order of the puts
            await ops.call("batch", [op])
            ref.batch([op])
        filters: list[dict[str, Any]] = [
            {"kind": "rare"},
            {"kind": "fact", "meta": {"src": "doc"}},
            {"meta": {"lang": "de"}},
            {"kind": {"$eq": "note"}},
            {"kind": {"$ne": "fact"}},
            {"n": {"$gt": 6}},
            {"n": {"$gte": 2, "$lte": 3}},
            {"n": {"$lt": 1}},
            {"kind": "rare", "n": {"$gte": 4}},
            {"kind": "nothing"},
        ]
        for flt in filters:
            for prefix in [("u",), (), ("u", "n05")]:
                want = newest_first(ref.search(prefix, filter=flt, limit=1000))
                for limit, offset in [(1000, 0), (3, 0), (3, 2), (1, 7)]:
                    got = await ops.call("search", prefix, filter=flt, limit=limit, offset=offset)
                    assert [(h.namespace, h.key) for h in got] == want[offset : offset + limit], (
                        flt,
                        prefix,
                        limit,
                        offset,
                    )
        rare = newest_first(ref.search(("u",), filter={"kind": "rare"}, limit=99))
        assert len(rare) >= 4
        await ops.call("delete", *rare[0])
        await ops.call("put", *rare[1], {"kind": "fact"})
        await ops.call("put", *rare[2], {"kind": "rare"}, ttl=0.005)  # 0.3 seconds
        await asyncio.sleep(0.5)
        found = await ops.call("search", ("u",), filter={"kind": "rare"}, limit=99)
        assert [(h.namespace, h.key) for h in found] == rare[3:]


async def test_pagination_has_no_silent_caps(open_store: OpenStore) -> None:
    async with open_store() as ops:
        puts = [PutOp(("p", f"n{i:03}"), f"k{i:03}", {"i": i}) for i in range(150)]
        await ops.call("batch", puts)
        assert len(await ops.call("search", ("p",), limit=140)) == 140
        assert len(await ops.call("search", ("p",), filter={"i": {"$gte": 0}}, limit=140)) == 140
        assert len(await ops.call("list_namespaces", limit=130)) == 130
        assert len(await ops.call("search", ("p",), limit=10**20, offset=10**19)) == 0
        assert len(await ops.call("list_namespaces", max_depth=10**12, limit=10**20)) == 150
        pages = [await ops.call("search", ("p",), limit=40, offset=o) for o in range(0, 160, 40)]
        assert [len(p) for p in pages] == [40, 40, 40, 30]
        assert sorted(k for page in pages for k in keys(page)) == [f"k{i:03}" for i in range(150)]
        spaces = [await ops.call("list_namespaces", limit=60, offset=o) for o in (0, 60, 120)]
        flat = [ns for page in spaces for ns in page]
        assert flat == sorted(("p", f"n{i:03}") for i in range(150))
        assert await ops.call("search", ("p",), limit=0) == []
        for bad in ({"limit": -1}, {"offset": -2}, {"limit": 1.5}):
            with pytest.raises(InvalidConfigError):
                await ops.call("search", ("p",), **bad)
        assert await ops.call("count", ("p",)) == 150


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


async def test_numeric_filter_compares_numbers_as_numbers(open_store: OpenStore) -> None:
    """The issue's case: text comparison made ``{"$gt": 10}`` match 12 of 0..14."""
    async with open_store() as ops:
        await ops.call("batch", [PutOp(("n",), f"i{i}", {"n": i}) for i in range(15)])
        for flt, expected in [
            ({"$gt": 10}, {11, 12, 13, 14}),
            ({"$gte": 10}, {10, 11, 12, 13, 14}),
            ({"$lt": 2}, {0, 1}),
            ({"$lte": 2.5}, {0, 1, 2}),
            ({"$gt": 3, "$lt": 6}, {4, 5}),
            ({"$gt": "9"}, {10, 11, 12, 13, 14}),
        ]:
            found = await ops.call("search", ("n",), filter={"n": flt}, limit=100)
            assert {item.value["n"] for item in found} == expected, flt


FILTER_VALUES: list[dict[str, Any]] = [
    {"n": 12, "tag": "x", "flag": True, "nested": {"a": 1, "b": [1, 2]}, "list": [1, "two"]},
    {"n": 1.0, "tag": "y", "flag": False, "nested": {"a": 2}, "list": [1, "two", 3]},
    {"n": "12", "tag": None, "flag": 1, "nested": {"a": 1, "c": {"d": "e"}}},
    {"n": " 7.5 ", "tag": "x\x00z", "flag": 0, "nested": "not a dict"},
    {"n": "1e2", "tag": "", "list": [True, "two"]},
    {"n": "1_000", "flag": "true", "nested": {"a": True}},
    {"n": "inf", "tag": "x"},
    {"n": "١٢", "tag": "y"},
    {"n": "nan", "tag": "x"},
    {"n": True, "tag": 12},
    {"n": 2**70, "tag": 1.5},
    {"n": 1e300, "tag": [1]},
    {"n": "-0", "tag": {"k": False}},
    {"n": "12abc", "tag": {"k": 0}},
    {"n": "1e99999", "tag": {"k": 0.0, "j": None}},
]

FILTERS: list[dict[str, Any]] = [
    {"tag": "x"},
    {"tag": None},
    {"tag": {"$eq": None}},
    {"tag": {"$ne": None}},
    {"tag": {"$ne": "x"}},
    {"tag": 12},
    {"tag": 1.5},
    {"tag": [1]},
    {"tag": {"k": False}},
    {"tag": {"k": 0}},
    {"tag": {"$eq": {"k": 0}}},
    {"tag": {"$eq": {"k": False, "j": None}}},
    {"tag": {"$eq": {"k": 0, "j": None}}},
    {"tag": "x\x00z"},
    {"flag": True},
    {"flag": 1},
    {"flag": 0.0},
    {"flag": {"$ne": True}},
    {"nested": {"a": 1}},
    {"nested": {"a": True}},
    {"nested": {"c": {"d": "e"}}},
    {"nested": {}},
    {"nested": {"b": [1, 2]}},
    {"nested": {"b": [1, {"$gt": 1}]}},
    {"list": [1, "two"]},
    {"list": [True, "two"]},
    {"list": [{"$gte": 1}, "two"]},
    {"list": {"$eq": [1, "two"]}},
    {"n": {"$gt": 10}},
    {"n": {"$gte": 12}},
    {"n": {"$lt": 8}},
    {"n": {"$lte": 1}},
    {"n": {"$gt": 0, "$lt": 100}},
    {"n": {"$gt": 1e30}},
    {"n": {"$lt": -1e30}},
    {"n": {"$gt": float("nan")}},
    {"n": {"$eq": 12}},
    {"n": {"$ne": 12}},
    {"n": 1},
    {"tag": "x", "n": {"$gt": 10}},
    {"missing": None},
    {"missing": {"$ne": None}},
    {"missing": {"$gt": 1}},
]


def reference_matches(values: list[dict[str, Any]], flt: dict[str, Any]) -> set[int] | None:
    """Indexes ``InMemoryStore`` finds; ``None`` where it raises (we then expect no crash)."""
    ref = InMemoryStore()
    for i, value in enumerate(values):
        ref.put(("f",), str(i), value)
    try:
        return {int(item.key) for item in ref.search(("f",), filter=flt, limit=1000)}
    except (TypeError, ValueError, OverflowError):
        return None


def numeric_truth(values: list[dict[str, Any]], flt: dict[str, Any]) -> set[int]:
    """Our documented rule where InMemoryStore raises: a value that is not a number fails."""
    from langgraph_memory_plus.store.filters import holds, parse_filter

    tree = parse_filter(flt)
    assert tree is not None
    return {i for i, value in enumerate(values) if holds(tree, value)}


async def test_filters_agree_with_in_memory_store(open_store: OpenStore) -> None:
    async with open_store() as ops:
        await ops.call(
            "batch", [PutOp(("f",), str(i), value) for i, value in enumerate(FILTER_VALUES)]
        )
        for flt in FILTERS:
            found = await ops.call("search", ("f",), filter=flt, limit=1000)
            ours = {int(item.key) for item in found}
            theirs = reference_matches(FILTER_VALUES, flt)
            if theirs is None:
                theirs = numeric_truth(FILTER_VALUES, flt)
            assert ours == theirs, flt


async def test_numeric_filter_skips_values_that_are_not_numbers(open_store: OpenStore) -> None:
    """Where InMemoryStore raises (missing field, word, list), the item just doesn't match."""
    async with open_store() as ops:
        values = [{"n": 5}, {"n": "five"}, {"n": [5]}, {}, {"n": None}, {"n": {"v": 5}}, {"n": 6}]
        await ops.call("batch", [PutOp(("w",), str(i), v) for i, v in enumerate(values)])
        found = await ops.call("search", ("w",), filter={"n": {"$gte": 5}})
        assert sorted(keys(found)) == ["0", "6"]


async def test_undecided_rows_page_exactly(open_store: OpenStore) -> None:
    """Pages are exact when Python must decide some rows (strings only float() reads)."""
    async with open_store() as ops:
        values = []
        for i in range(60):
            if i % 3 == 0:
                values.append({"n": f"{i}_0"})  # Python reads "30_0" as 300.0; SQL cannot
            elif i % 3 == 1:
                values.append({"n": i})
            else:
                values.append({"n": f"x{i}"})  # never a number
        await ops.call("batch", [PutOp(("u",), f"{i:02}", v) for i, v in enumerate(values)])
        flt = {"n": {"$gt": 20}}
        expected = {
            f"{i:02}" for i in range(60) if (i % 3 == 0 and i * 10 > 20) or (i % 3 == 1 and i > 20)
        }
        everything = await ops.call("search", ("u",), filter=flt, limit=1000)
        assert set(keys(everything)) == expected
        pages = [
            keys(await ops.call("search", ("u",), filter=flt, limit=7, offset=o))
            for o in range(0, 70, 7)
        ]
        assert [k for page in pages for k in page] == keys(everything)


async def test_bad_filters_raise_clear_errors(open_store: OpenStore) -> None:
    async with open_store() as ops:
        for flt in [{"a": {"$in": [1]}}, {"a": {"$gt": "abc"}}, {"a": {"$gt": [1]}}, [1], {1: 2}]:
            with pytest.raises(InvalidFilterError) as info:
                await ops.call("search", ("f",), filter=flt)
            assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------------------------
# Namespaces
# --------------------------------------------------------------------------------------------

NAMESPACES = [
    ("a",),
    ("a", "b"),
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "c", "f"),
    ("b", "a"),
    ("b", "x", "c"),
    ("a-c",),
    ("x", "*", "v1"),
    ("users", "u1", "v1"),
    ("users", "u2", "v2"),
]

LISTINGS: list[dict[str, Any]] = [
    {},
    {"prefix": ("a",)},
    {"prefix": ("a", "b")},
    {"prefix": ("a", "*")},
    {"prefix": ("*", "b")},
    {"prefix": ("*", "*", "c")},
    {"suffix": ("c",)},
    {"suffix": ("*", "c")},
    {"suffix": ("v1",)},
    {"prefix": ("users",), "suffix": ("v1",)},
    {"prefix": ("a",), "max_depth": 2},
    {"max_depth": 1},
    {"max_depth": 0},
    {"prefix": ("a", "b"), "max_depth": 3},
    {"limit": 3},
    {"limit": 3, "offset": 2},
    {"offset": 100},
    {"prefix": ("zzz",)},
    {"suffix": ("a", "b", "c", "d", "e")},
]


# Several prefix conditions in one op (only ``batch`` takes more than one): the longest
# literal head becomes the scanned range, and the label tests it implies are left out.
CONDITIONS: list[tuple[MatchCondition, ...]] = [
    (MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("a", "b"))),
    (MatchCondition("prefix", ("a", "b")), MatchCondition("prefix", ("a", "c"))),
    (MatchCondition("prefix", ("a", "b")), MatchCondition("prefix", ("b",))),
    (MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("a", "b", "*"))),
    (MatchCondition("prefix", ("a", "*", "d")), MatchCondition("prefix", ("a", "b"))),
    (MatchCondition("prefix", ("*", "b")), MatchCondition("prefix", ("a",))),
    (MatchCondition("prefix", ("a", "b")), MatchCondition("suffix", ("b",))),
    (MatchCondition("prefix", ("a", "b")), MatchCondition("suffix", ("a", "b"))),
    (MatchCondition("prefix", ("a", "b", "c")), MatchCondition("suffix", ("c",))),
    (MatchCondition("prefix", ("a",)), MatchCondition("suffix", ("a", "*"))),
    (MatchCondition("prefix", ("a",)), MatchCondition("suffix", ("c",))),
]


async def test_list_namespaces_matches_in_memory_store(open_store: OpenStore) -> None:
    ref = InMemoryStore()
    async with open_store() as ops:
        for ns in NAMESPACES:
            ref.put(ns, "k", {"v": 1})
            await ops.call("put", ns, "k", {"v": 1})
        for kwargs in LISTINGS:
            assert await ops.call("list_namespaces", **kwargs) == ref.list_namespaces(**kwargs), (
                kwargs
            )
        listings = [
            ListNamespacesOp(match_conditions=conditions, max_depth=depth, limit=20)
            for conditions in CONDITIONS
            for depth in (None, 2)
        ]
        assert await ops.call("batch", listings) == ref.batch(listings)
        with pytest.raises(InvalidConfigError):
            await ops.call(
                "batch", [ListNamespacesOp(match_conditions=(MatchCondition("middle", ("a",)),))]
            )  # type: ignore[arg-type]


BAD_NAMESPACES: list[Any] = [(), ("a.b",), ("",), ("a", 1), ("langgraph", "x"), ("a\x00",)]


async def test_namespace_validation_matches_langgraph(open_store: OpenStore) -> None:
    ref = InMemoryStore()
    async with open_store() as ops:
        for ns in BAD_NAMESPACES:
            calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
                ("put", (ns, "k", {"v": 1}), {}),
                ("get", (ns, "k"), {}),
                ("search", (ns,), {}),
                ("delete", (ns, "k"), {}),
                ("list_namespaces", (), {"prefix": ns}),
            ]
            for name, args, kwargs in calls:
                try:
                    getattr(ref, name)(*args, **kwargs)
                    expected: Exception | None = None
                except InvalidNamespaceError as exc:
                    expected = exc
                if expected is None:
                    await ops.call(name, *args, **kwargs)
                    continue
                with pytest.raises(InvalidNamespaceError) as info:
                    await ops.call(name, *args, **kwargs)
                assert str(info.value) == str(expected), (name, ns)
        # Ops passed to batch directly are checked too: "a.b" must not address ("a", "b").
        for op in [PutOp(("a.b",), "k", {"v": 1}), GetOp(("a.b",), "k"), PutOp((), "k", {})]:
            with pytest.raises(InvalidNamespaceError):
                await ops.call("batch", [op])
        assert await ops.call("count") == 0


# --------------------------------------------------------------------------------------------
# TTL
# --------------------------------------------------------------------------------------------


async def test_expired_items_are_never_returned_before_a_sweep(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    async with open_store(ttl={"default_ttl": 0.01}) as ops:  # 0.6 seconds
        await ops.call("put", ("t", "short"), "k", {"v": 1})
        await ops.call("put", ("t", "keep"), "k", {"v": 2}, ttl=None)
        await ops.call("put", ("t", "short"), "long", {"v": 3}, ttl=10)
        await asyncio.sleep(1.0)
        assert await ops.call("get", ("t", "short"), "k") is None
        assert keys(await ops.call("search", ("t",))) == ["long", "k"]
        assert await ops.call("count", ("t",)) == 2
        await ops.call("delete", ("t", "short"), "long")
        assert await ops.call("list_namespaces") == [("t", "keep")]
        assert len(rows(admin, schema)) == 2  # the expired row is still there...
        assert await ops.admin("sweep_ttl") == 1  # ...until swept
        assert [r[0] for r in rows(admin, schema)] == ["t.keep"]
        # Writing an expired item's key starts a new item.
        await ops.call("put", ("t", "new"), "k", {"v": 4}, ttl=0.01)
        await asyncio.sleep(1.0)
        await ops.call("put", ("t", "new"), "k", {"v": 5})
        fresh = await ops.call("get", ("t", "new"), "k")
        assert fresh.value == {"v": 5} and fresh.created_at == fresh.updated_at


async def test_ttl_refresh_on_read(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    def expiry() -> datetime:
        return admin.execute(f'SELECT expires_at FROM "{schema}".lgmp_store').fetchone()[0]  # type: ignore[index]

    async with open_store(ttl={"default_ttl": 5}) as ops:
        await ops.call("put", ("r",), "k", {"v": 1})
        before = expiry()
        await asyncio.sleep(0.05)
        await ops.call("get", ("r",), "k", refresh_ttl=False)
        await ops.call("search", ("r",), refresh_ttl=False)
        assert expiry() == before
        await ops.call("get", ("r",), "k")
        after_get = expiry()
        assert after_get > before
        await asyncio.sleep(0.05)
        await ops.call("search", ("r",), filter={"v": {"$gt": 0}})
        assert expiry() > after_get
    async with open_store(ttl={"default_ttl": 5, "refresh_on_read": False}) as ops:
        stored = expiry()
        await asyncio.sleep(0.05)
        await ops.call("get", ("r",), "k")
        assert expiry() == stored
        await ops.call("get", ("r",), "k", refresh_ttl=True)
        assert expiry() > stored


async def test_refresh_on_read_never_waits_for_a_row_lock(
    open_store: OpenStore, admin: psycopg.Connection[Any], pg_url: str, schema: str
) -> None:
    """Refreshing reads skip rows another transaction holds, so they cannot deadlock.

    Concurrent searches and batch gets that refreshed their rows in no fixed order
    deadlocked (upstream's ``test_large_batches``). Here a transaction holds one row's
    lock: a search and a get that find it must still finish, refreshing the others.
    """
    async with open_store(ttl={"default_ttl": 5}) as ops:
        await ops.call("batch", [PutOp(("lock",), f"k{i}", {"i": i}, ttl=5) for i in range(20)])
        before = dict(admin.execute(f'SELECT key, expires_at FROM "{schema}".lgmp_store'))
        await asyncio.sleep(0.05)
        with psycopg.connect(pg_url) as holder:
            holder.execute(f'SELECT 1 FROM "{schema}".lgmp_store WHERE key = %s FOR UPDATE', ["k7"])
            pid = holder.info.backend_pid
            for call in (
                ops.background("search", ("lock",), limit=50),
                ops.background("batch", [GetOp(("lock",), f"k{i}") for i in (19, 7, 3)]),
            ):
                await poll(lambda c=call: c.done() or bool(blocked_by(admin, pid)), "the read")
                assert call.done(), "a refreshing read waited for another transaction's lock"
                assert call.result()
            holder.rollback()
        after = dict(admin.execute(f'SELECT key, expires_at FROM "{schema}".lgmp_store'))
        assert after["k7"] == before["k7"]  # skipped while locked
        assert all(after[k] > before[k] for k in before if k != "k7")
        # concurrent refreshing reads in opposite orders, as in test_large_batches
        names = [f"k{i}" for i in range(20)]
        calls = [
            ops.background("batch", [GetOp(("lock",), k) for k in order])
            for _ in range(10)
            for order in (names, names[::-1])
        ] + [ops.background("search", ("lock",), limit=20) for _ in range(10)]
        assert all(await asyncio.gather(*calls))


async def test_ttl_sweeper_deletes_in_bounded_batches(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    async with open_store(ttl={"default_ttl": 0.005, "sweep_interval_minutes": 0.005}) as ops:
        await ops.call("batch", [PutOp(("s",), str(i), {"i": i}, ttl=0.005) for i in range(25)])
        await asyncio.sleep(0.5)
        sizes: list[int] = []
        plans = ops.store._plans
        original = plans.sweep

        def counting(batch_size: int) -> Any:
            sizes.append(batch_size)
            return original(batch_size)

        plans.sweep = counting
        assert await ops.admin("sweep_ttl", batch_size=10) == 25
        assert sizes == [10, 10, 10]
        plans.sweep = original
        with pytest.raises(InvalidConfigError):
            await ops.admin("sweep_ttl", batch_size=0)
        await ops.call("batch", [PutOp(("s",), str(i), {"i": i}, ttl=0.005) for i in range(5)])
        await ops.admin("start_ttl_sweeper")
        await poll(lambda: not rows(admin, schema), "the sweeper to delete expired items")
        assert await ops.admin("stop_ttl_sweeper", timeout=WAIT_SECONDS) is True
    async with open_store() as ops:  # no ttl config: nothing to sweep, nothing started
        done = await ops.admin("start_ttl_sweeper")
        assert done.done()
        assert await ops.admin("stop_ttl_sweeper") is True


async def test_bad_ttl_options(open_store: OpenStore) -> None:
    for ttl in [{"default_ttl": -1}, {"default_ttl": "5"}, {"unknown": 1}, 5]:
        with pytest.raises(InvalidConfigError):
            async with open_store(ttl=ttl):
                pass
    async with open_store() as ops:
        with pytest.raises(InvalidConfigError):
            await ops.call("put", ("t",), "k", {"v": 1}, ttl=0)


# --------------------------------------------------------------------------------------------
# Optimistic concurrency
# --------------------------------------------------------------------------------------------


async def test_conditional_put_and_delete(open_store: OpenStore) -> None:
    async with open_store() as ops:
        await ops.call("put", ("c",), "k", {"v": 1}, expected_version=0)  # create only
        with pytest.raises(ConflictError, match="already exists"):
            await ops.call("put", ("c",), "k", {"v": 2}, expected_version=0)
        item = await ops.call("get", ("c",), "k")
        await ops.call("put", ("c",), "k", {"v": 2}, expected_version=item.version)
        with pytest.raises(ConflictError, match="is at version"):
            await ops.call("put", ("c",), "k", {"v": 3}, expected_version=item.version)
        with pytest.raises(ConflictError, match="does not exist"):
            await ops.call("put", ("c",), "other", {"v": 1}, expected_version=7)
        assert (await ops.call("get", ("c",), "k")).value == {"v": 2}
        # A batch with one failed condition applies nothing.
        current = (await ops.call("get", ("c",), "k")).version
        batch = [
            PutOp(("c",), "fresh", {"v": 1}),
            ConditionalPutOp(PutOp(("c",), "k", None), current + 1000),
        ]
        with pytest.raises(ConflictError):
            await ops.call("batch", batch)
        assert await ops.call("get", ("c",), "fresh") is None
        with pytest.raises(ConflictError):
            await ops.call("delete", ("c",), "k", expected_version=current + 1000)
        await ops.call("delete", ("c",), "k", expected_version=current)
        assert await ops.call("get", ("c",), "k") is None
        for bad in (-1, "3", True):
            with pytest.raises(InvalidConfigError):
                await ops.call("put", ("c",), "k", {"v": 1}, expected_version=bad)


async def test_two_writers_racing_on_one_item(
    open_store: OpenStore, pg_url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """Writer A commits while writer B waits on the row: B gets ConflictError, A's value stays."""
    async with open_store() as ops:
        await ops.call("put", ("race",), "profile", {"who": "nobody"})
        seen = (await ops.call("get", ("race",), "profile")).version
        with psycopg.connect(pg_url) as conn_a:  # not autocommit: A's write stays open
            writer_a = PostgresStore(conn_a, schema=schema)
            with conn_a.transaction():
                writer_a.put(("race",), "profile", {"who": "A"}, expected_version=seen)
                writer_b = ops.background(
                    "put", ("race",), "profile", {"who": "B"}, expected_version=seen
                )
                await poll(
                    lambda: bool(blocked_by(admin, conn_a.info.backend_pid)),
                    "B to wait on A's lock",
                )
            with pytest.raises(ConflictError):
                await asyncio.wait_for(writer_b, WAIT_SECONDS)
        assert (await ops.call("get", ("race",), "profile")).value == {"who": "A"}
        # Two creators (expected_version=0) of a new item: the second waits, then loses.
        with psycopg.connect(pg_url) as conn_a:
            writer_a = PostgresStore(conn_a, schema=schema)
            with conn_a.transaction():
                writer_a.put(("race",), "new", {"who": "A"}, expected_version=0)
                creator_b = ops.background(
                    "put", ("race",), "new", {"who": "B"}, expected_version=0
                )
                await poll(
                    lambda: bool(blocked_by(admin, conn_a.info.backend_pid)),
                    "B to wait on A's insert",
                )
            with pytest.raises(ConflictError, match="already exists"):
                await asyncio.wait_for(creator_b, WAIT_SECONDS)
        assert (await ops.call("get", ("race",), "new")).value == {"who": "A"}


async def test_concurrent_increments_lose_no_update(open_store: OpenStore) -> None:
    workers, rounds = 4, 8
    async with open_store(pool_max_size=workers) as ops:
        await ops.call("put", ("ctr",), "n", {"n": 0})
        conflicts = 0

        async def worker() -> None:
            nonlocal conflicts
            for _ in range(rounds):
                while True:
                    item = await ops.call("get", ("ctr",), "n")
                    try:
                        await ops.call(
                            "put",
                            ("ctr",),
                            "n",
                            {"n": item.value["n"] + 1},
                            expected_version=item.version,
                        )
                        break
                    except ConflictError:
                        conflicts += 1

        if ops.is_async:
            await asyncio.gather(*(worker() for _ in range(workers)))
        else:
            threads = [
                threading.Thread(target=asyncio.run, args=(worker(),)) for _ in range(workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT_SECONDS * 3)
        assert (await ops.call("get", ("ctr",), "n")).value == {"n": workers * rounds}


# --------------------------------------------------------------------------------------------
# delete_namespace / count
# --------------------------------------------------------------------------------------------


async def test_delete_namespace_and_count(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    async with open_store(index=INDEX) as ops:
        for ns in [("users", "u1"), ("users", "u1", "notes"), ("users", "u10"), ("users", "u2")]:
            await ops.call("put", ns, "a", {"text": "abc"})
            await ops.call("put", ns, "b", {"text": "def"})
        await ops.call("put", ("users", "u1"), "old", {"text": "x"}, ttl=0.001)
        await asyncio.sleep(0.2)
        assert await ops.call("count") == 8
        assert await ops.call("count", ("users", "u1")) == 4
        assert await ops.call("delete_namespace", ("users", "u1")) == 5  # expired item too
        assert await ops.call("count", ("users",)) == 4
        assert await ops.call("list_namespaces") == [("users", "u10"), ("users", "u2")]
        left = admin.execute(f'SELECT count(*) FROM "{schema}".lgmp_store_vectors').fetchone()
        assert left == (4,)
        assert await ops.call("delete_namespace", ("nothing",)) == 0
        with pytest.raises(InvalidConfigError):
            await ops.call("delete_namespace", ())
        with pytest.raises(InvalidNamespaceError):
            await ops.call("count", ("a.b",))


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


class NotJson:
    pass


BAD_VALUES: list[tuple[Any, str]] = [
    (["not", "a", "dict"], "dicts"),
    ("text", "dicts"),
    ({1: "int key"}, "keys must be strings"),
    ({"a": {"b": {(1, 2): 3}}}, r"value\['a'\]\['b'\]"),
    ({"a": float("nan")}, "NaN"),
    ({"a": [1, float("inf")]}, r"value\['a'\]\[1\]"),
    ({"a": NotJson()}, "NotJson"),
    ({"a": datetime.now()}, "datetime"),
    ({"a": "\ud800"}, "surrogate"),
    ({"a": {1, 2}}, "set"),
]


async def test_bad_values_are_refused_and_nothing_is_written(open_store: OpenStore) -> None:
    async with open_store() as ops:
        for value, message in BAD_VALUES:
            with pytest.raises(InvalidValueError, match=message) as info:
                await ops.call(
                    "batch", [PutOp(("ok",), "good", {"v": 1}), PutOp(("bad",), "k", value)]
                )
            assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
        for key in [1, None, b"bytes"]:
            with pytest.raises(InvalidValueError, match="keys must be strings"):
                await ops.call(
                    "batch", [PutOp(("ok",), "good", {"v": 1}), PutOp(("bad",), key, {})]
                )  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            await ops.call("put", ("bad",), "\udc00", {"v": 1})
        assert await ops.call("count") == 0
        await ops.call(
            "put", ("ok",), 5, {"v": 1}
        )  # put() converts keys with str(), as LangGraph's
        assert (await ops.call("get", ("ok",), "5")).value == {"v": 1}


async def test_nul_and_escape_characters_round_trip(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    value = {
        "a": "x\x00y",
        "k\x00": ["\x00", "\x01", "\x01\x00\x01", "plain"],
        "\x01": {"\x01\x01": "\x01" * 3},
        "ok": "ordinary",
    }
    async with open_store() as ops:
        for key in ["k\x00ey", "\x01", "\x00", "plain", ""]:
            await ops.call("put", ("nul", "\x01label"), key, value)
        for key in ["k\x00ey", "\x01", "\x00", "plain", ""]:
            item = await ops.call("get", ("nul", "\x01label"), key)
            assert item.key == key and item.value == value
        found = await ops.call(
            "search", ("nul",), filter={"a": "x\x00y", "k\x00": {"$ne": []}}, limit=20
        )
        assert sorted(keys(found)) == sorted(["k\x00ey", "\x01", "\x00", "plain", ""])
        assert await ops.call("search", ("nul",), filter={"a": "x\x01y"}) == []
        assert await ops.call("list_namespaces") == [("nul", "\x01label")]
        raw = admin.execute(f'SELECT value::text FROM "{schema}".lgmp_store').fetchall()
        assert all("\\u0000" not in r[0] for r in raw)


async def test_one_put_stores_what_a_batch_of_puts_stores(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    """A single put is sent as one row of scalars, several as arrays: the rows agree."""
    items: list[tuple[str, dict[str, Any], float | None]] = [
        ("plain", {"text": 'a "quoted", {braced} \\ value', "n": 1.5}, None),
        ("nul", {"a": "x\x00y", "\x01": ["\x00"]}, None),
        ("ttl", {"v": [1, None, True]}, 5.0),
        ("null", {"NULL": None}, 0.5),
    ]

    def stored(prefix: str) -> list[tuple[Any, ...]]:
        return admin.execute(
            "SELECT key, value::text, escaped, ttl_minutes, expires_at - updated_at, "
            f'created_at = updated_at FROM "{schema}".lgmp_store WHERE prefix = %s ORDER BY key',
            [prefix],
        ).fetchall()

    async with open_store() as ops:
        for key, value, ttl in items:
            await ops.call("put", ("one",), key, value, ttl=ttl)
        await ops.call("batch", [PutOp(("many",), k, v, ttl=t) for k, v, t in items])
        assert stored("one") == stored("many")
        assert len(stored("one")) == len(items)
        for key, value, _ in items:
            assert (await ops.call("get", ("one",), key)).value == value
        # Updates through either path keep created_at and replace the rest.
        await ops.call("put", ("one",), "ttl", {"v": 2}, ttl=None)
        await ops.call("put", ("one",), "null", {"v": 3})
        await ops.call(
            "batch",
            [PutOp(("many",), "ttl", {"v": 2}, ttl=None), PutOp(("many",), "null", {"v": 3})],
        )
        assert stored("one") == stored("many")
        fresh = {row[0]: row[5] for row in stored("one")}
        assert fresh == {"nul": True, "null": False, "plain": True, "ttl": False}


async def test_numbers_keep_their_type_and_value(open_store: OpenStore) -> None:
    value = {
        "floats": [0.1, 1e16, 1e17, 1.5e300, 5e-324, -2.5, 1e-7, 2.0**60, 123456789012345678.0],
        "ints": [0, -1, 2**70, 10**300],
        "bools": [True, False],
        "none": None,
    }
    async with open_store() as ops:
        await ops.call("put", ("num",), "k", value)
        back = (await ops.call("get", ("num",), "k")).value
        assert back == value
        for got, want in zip(
            back["floats"] + back["ints"], value["floats"] + value["ints"], strict=True
        ):
            assert type(got) is type(want) and got == want
        found = await ops.call("search", ("num",), filter={"floats": {"$eq": value["floats"]}})
        assert keys(found) == ["k"]


async def test_large_values_are_refused_before_writing(open_store: OpenStore) -> None:
    async with open_store(max_value_bytes=1000) as ops:
        with pytest.raises(ValueTooLargeError, match="1000 bytes") as info:
            await ops.call(
                "batch", [PutOp(("l",), "small", {"v": 1}), PutOp(("l",), "big", {"v": "x" * 2000})]
            )
        assert info.value.limit == 1000 and info.value.size > 1000
        with pytest.raises(ValueTooLargeError, match="namespace and key"):
            await ops.call("put", ("l",), "k" * 5000, {"v": 1})
        assert await ops.call("count") == 0
    async with open_store() as ops:
        limit = ops.store.max_value_bytes
        with pytest.raises(ValueTooLargeError, match=str(limit)):
            await ops.call("put", ("l",), "huge", {"v": "x" * limit})
        assert await ops.call("count") == 0


async def test_dropped_connection_mid_batch_applies_nothing(
    pg_url: str, schema: str, flavour: str, admin: psycopg.Connection[Any]
) -> None:
    """The store's backend is killed while its batch waits on a lock, after the batch had
    already deleted one item: nothing of the batch may survive."""
    if flavour == "sync":
        conn: Any = psycopg.connect(pg_url, autocommit=True)
        ops = Ops(PostgresStore(conn, schema=schema), False)
    else:
        conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
        ops = Ops(AsyncPostgresStore(conn, schema=schema), True)
    try:
        await ops.admin("setup")
        await ops.call("put", ("d",), "victim", {"v": 1})
        await ops.call("put", ("d",), "locked", {"v": 1})
        pid = conn.info.backend_pid
        with psycopg.connect(pg_url) as locker:
            locker.execute(
                f'SELECT 1 FROM "{schema}".lgmp_store WHERE key = %s FOR UPDATE', ["locked"]
            )
            task = ops.background(
                "batch",
                [
                    PutOp(("d",), "victim", None),
                    PutOp(("d",), "new", {"v": 2}),
                    PutOp(("d",), "locked", {"v": 2}),
                ],
            )
            await poll(
                lambda: pid in blocked_by(admin, locker.info.backend_pid), "the batch to wait"
            )
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            with pytest.raises(psycopg.OperationalError):
                await asyncio.wait_for(task, WAIT_SECONDS)
            locker.rollback()
        assert [(r[0], r[1], r[2]) for r in rows(admin, schema)] == [
            ("d", "locked", '{"v": 1}'),
            ("d", "victim", '{"v": 1}'),
        ]
    finally:
        closed = conn.close()
        if ops.is_async:
            await closed


async def test_pool_replaces_a_dropped_connection(
    open_store: OpenStore, admin: psycopg.Connection[Any]
) -> None:
    async with open_store(pool_min_size=1, pool_max_size=1) as ops:
        await ops.call("put", ("p",), "k", {"v": 1})
        pool = ops.store.conn
        if ops.is_async:
            async with pool.connection() as c:
                pid = c.info.backend_pid
        else:
            with pool.connection() as c:
                pid = c.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        await poll(
            lambda: (
                not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchall()
            ),
            "the backend to exit",
        )
        assert (await ops.call("get", ("p",), "k")).value == {"v": 1}


# --------------------------------------------------------------------------------------------
# Semantic search
# --------------------------------------------------------------------------------------------

DOCS: list[tuple[tuple[str, ...], str, dict[str, Any], Any]] = [
    (("docs",), "a", {"text": "aaa bbb", "kind": "x"}, None),
    (("docs",), "b", {"text": "ccc", "kind": "y"}, None),
    (("docs", "sub"), "c", {"text": "abcdef", "kind": "x"}, None),
    (("docs",), "d", {"text": "fff", "parts": [{"t": "aaaa"}, {"t": "dd"}]}, ["parts[*].t"]),
    (("docs",), "e", {"text": "aaaaaa", "kind": "x"}, False),
    (("docs",), "f", {"kind": "x"}, None),
    (("docs",), "g", {"text": "", "kind": "y"}, None),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
async def test_semantic_search_ranks_like_in_memory_store(open_store: OpenStore) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    async with open_store(index=INDEX) as ops:
        for ns, key, value, index in DOCS:
            ref.put(ns, key, value, index=index)
            await ops.call("put", ns, key, value, index=index)
        for query, flt in [("aab", None), ("ddd", None), ("abc", {"kind": "x"}), ("zzz", None)]:
            ours = await ops.call("search", ("docs",), query=query, filter=flt, limit=20)
            theirs = ref.search(("docs",), query=query, filter=flt, limit=20)
            scored = {i.key: i.score for i in theirs if i.score is not None}
            assert {i.key: i.score for i in ours if i.score is not None}.keys() == scored.keys()
            for item in ours:
                if item.score is not None:
                    want = scored[item.key]
                    # A zero query vector: InMemoryStore's numpy path divides by zero (nan),
                    # its pure-Python path says 0.0, as we do.
                    assert math.isclose(item.score, 0.0 if math.isnan(want) else want, abs_tol=1e-9)
            scores = [i.score for i in ours if i.score is not None]
            assert scores == sorted(scores, reverse=True)
            # Unscored items (index=False, no text) come after every scored one.
            assert [i.score is None for i in ours] == sorted(i.score is None for i in ours)
            assert {i.key for i in ours} == {i.key for i in theirs}
        top = await ops.call("search", ("docs",), query="aaaa", limit=1)
        assert keys(top) == ["d"]  # its best vector is "aaaa" (max over parts[*].t)
        page = await ops.call("search", ("docs",), query="aaaa", limit=2, offset=1)
        full = await ops.call("search", ("docs",), query="aaaa", limit=3)
        assert keys(page) == keys(full)[1:]
        mixed = await ops.call(
            "search", ("docs",), query="aaaa", filter={"kind": {"$ne": 5}, "text": {"$gte": 0}}
        )
        assert mixed == []
    async with open_store() as ops:  # no index: query is ignored, as InMemoryStore does
        found = await ops.call("search", ("docs",), query="aaa", limit=20)
        assert {i.key for i in found} == {k for _, k, _, _ in DOCS} and all(
            i.score is None for i in found
        )


def test_cosine_helper_matches_in_memory_store() -> None:
    query = [1.0, 2.0, 0.0, -1.0]
    vectors = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [2.0, 4.0, 0.0, -2.0],
        [-1.0, 1.0, 3.0, 0.5],
    ]
    expected = _cosine_similarity(query, vectors)
    for vector, want in zip(vectors, expected, strict=True):
        assert math.isclose(cosine(query, norm(query), vector, norm(vector)), want, abs_tol=1e-12)


async def test_bad_index_options(open_store: OpenStore) -> None:
    for index in [
        {"dims": 0, "embed": embed},
        {"dims": 3},
        {"dims": 3, "embed": embed, "fields": [1]},
    ]:
        with pytest.raises(InvalidConfigError):
            async with open_store(index=index):
                pass
    async with open_store(index={"dims": 3, "embed": embed}) as ops:  # embed returns 6 dims
        with pytest.raises(InvalidConfigError, match="6 dimensions"):
            await ops.call("put", ("v",), "k", {"text": "a"})
        assert await ops.call("count") == 0


# --------------------------------------------------------------------------------------------
# Options, setup, calling styles, graphs
# --------------------------------------------------------------------------------------------


async def test_schemas_are_isolated(open_store: OpenStore, pg_url: str) -> None:
    other = f"store_{uuid.uuid4().hex[:12]}"
    try:
        async with open_store() as ops, open_store(schema=other) as elsewhere:
            await ops.call("put", ("s",), "k", {"v": 1})
            assert await elsewhere.call("get", ("s",), "k") is None
            assert await elsewhere.call("list_namespaces") == []
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')
    for bad in ['x"; DROP TABLE y; --', "", "1abc", "a.b"]:
        with pytest.raises(InvalidConfigError):
            async with open_store(schema=bad):
                pass


def test_concurrent_setup_applies_each_migration_once(pg_url: str, schema: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with PostgresStore.from_conn_string(pg_url, schema=schema) as store:
                store.setup()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_SECONDS)
    assert errors == []
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute(f'SELECT v FROM "{schema}".lgmp_store_migrations').fetchall()
    assert versions == [(0,), (1,), (2,)]  # 1: tombstones, 2: the value index


async def test_pipeline_mode(pg_url: str, schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        store = PostgresStore(conn, schema=schema, pipeline=True)
        store.setup()
        store.batch([PutOp(("p",), str(i), {"i": i}) for i in range(5)])
        assert len(store.search(("p",), filter={"i": {"$gte": 2}})) == 3
        assert store.batch([GetOp(("p",), "1"), ListNamespacesOp()])[1] == [("p",)]


async def test_each_class_serves_the_other_calling_style(pg_url: str, schema: str) -> None:
    with PostgresStore.from_conn_string(pg_url, schema=schema) as store:
        store.setup()
        await store.aput(("x",), "k", {"v": 1})
        assert (await store.aget(("x",), "k")).value == {"v": 1}  # type: ignore[union-attr]
        assert await store.acount() == 1
    async with AsyncPostgresStore.from_conn_string(pg_url, schema=schema) as astore:
        item = await asyncio.to_thread(astore.get, ("x",), "k")
        assert item is not None and item.value == {"v": 1}
        await asyncio.to_thread(astore.put, ("x",), "k2", {"v": 2})
        assert await asyncio.to_thread(astore.count) == 2
        with pytest.raises(asyncio.InvalidStateError, match="block its own event loop"):
            astore.get(("x",), "k")


def test_wrong_connection_kind_is_refused(pg_url: str) -> None:
    with pytest.raises(InvalidConfigError, match="AsyncConnection"):
        AsyncPostgresStore(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="Connection"):
        PostgresStore("postgresql://")  # type: ignore[arg-type]


class Visits(TypedDict):
    user: str
    visits: int


def _visit(store: Any, state: Visits) -> dict[str, Any]:
    item = store.get(("users", state["user"]), "profile")
    visits = (item.value["visits"] if item else 0) + 1
    store.put(("users", state["user"]), "profile", {"visits": visits})
    return {"visits": visits}


async def test_graph_nodes_use_the_store_through_the_runtime(
    pg_url: str, schema: str, flavour: str
) -> None:
    def node(state: Visits, runtime: Runtime[None]) -> dict[str, Any]:
        return _visit(runtime.store, state)

    async def anode(state: Visits, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        item = await runtime.store.aget(("users", state["user"]), "profile")
        visits = (item.value["visits"] if item else 0) + 1
        await runtime.store.aput(("users", state["user"]), "profile", {"visits": visits})
        return {"visits": visits}

    builder = StateGraph(Visits)
    builder.add_node("visit", anode if flavour == "async" else node)
    builder.add_edge(START, "visit")
    builder.add_edge("visit", END)
    if flavour == "sync":
        with PostgresStore.from_conn_string(pg_url, schema=schema) as store:
            store.setup()
            graph = builder.compile(store=store)
            assert graph.invoke({"user": "u1", "visits": 0})["visits"] == 1
            assert graph.invoke({"user": "u1", "visits": 0})["visits"] == 2
    else:
        async with AsyncPostgresStore.from_conn_string(pg_url, schema=schema) as astore:
            await astore.setup()
            graph = builder.compile(store=astore)
            assert (await graph.ainvoke({"user": "u1", "visits": 0}))["visits"] == 1
            assert (await graph.ainvoke({"user": "u1", "visits": 0}))["visits"] == 2
    with PostgresStore.from_conn_string(pg_url, schema=schema) as reopened:  # a "restart"
        assert reopened.get(("users", "u1"), "profile").value == {"visits": 2}  # type: ignore[union-attr]
