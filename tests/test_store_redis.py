"""Behaviour, layout and fault tests for ``RedisStore`` / ``AsyncRedisStore``.

Every test runs on the machine's single-node Redis and on the session's three-master
cluster (the ``where`` parameter), most of them for both classes (``flavour``), each under
a key prefix of its own that is deleted afterwards.

The behaviour tests that ``test_store_postgres`` writes against its ``open_store`` fixture
alone (InMemoryStore parity, filters, namespaces, conditional writes, bad input, semantic
search) are imported from there and collected here again with this module's
``open_store``, so both backends pass the very same assertions. The tests below are
Redis's own: the key layout and hash slots, which scripts the hot paths send, TTL as data,
the registry protocol, cross-slot batches, erasure, and faults. They look at keys through
the store's own plans (``store._plans.shard(...)``), following the layout documented in
:mod:`langgraph_memory_plus.store.redis.plans`.

No assertion depends on speed: TTL tests sleep longer than a TTL or compare stored expiry
times, and waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import pytest
import redis
import redis.asyncio
import test_redis_saver as saver_tests
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from redis.crc import key_slot

# Backend-neutral behaviour tests, run here against Redis (see the module docstring).
from test_store_postgres import (  # noqa: F401
    INDEX,
    WAIT_SECONDS,
    OpenStore,
    Ops,
    Visits,
    _visit,
    embed,
    keys,
    numeric_truth,
    poll,
    reference_matches,
    same,
    test_bad_filters_raise_clear_errors,
    test_bad_index_options,
    test_bad_ttl_options,
    test_bad_values_are_refused_and_nothing_is_written,
    test_batch_reads_see_the_store_before_the_batch_writes,
    test_concurrent_increments_lose_no_update,
    test_conditional_put_and_delete,
    test_filtered_search_across_namespaces_like_in_memory_store,
    test_filters_agree_with_in_memory_store,
    test_large_values_are_refused_before_writing,
    test_list_namespaces_matches_in_memory_store,
    test_namespace_validation_matches_langgraph,
    test_numbers_keep_their_type_and_value,
    test_numeric_filter_compares_numbers_as_numbers,
    test_numeric_filter_skips_values_that_are_not_numbers,
    test_pagination_has_no_silent_caps,
    test_put_get_update_delete_like_in_memory,
    test_search_prefix_boundaries_and_recency_order,
    test_semantic_search_ranks_like_in_memory_store,
    test_undecided_rows_page_exactly,
    test_versions_change_on_every_write_and_never_repeat,
)

from langgraph_memory_plus.drivers.redis import Eval
from langgraph_memory_plus.errors import ConflictError, InvalidConfigError
from langgraph_memory_plus.store import ConditionalPutOp, InvalidValueError
from langgraph_memory_plus.store.filters import parse_filter
from langgraph_memory_plus.store.redis import AsyncRedisStore, RedisStore
from langgraph_memory_plus.store.redis.lua import SCRIPTS, SHARD_KINDS, SLOT_KINDS, TOMBSTONE_MS
from langgraph_memory_plus.store.redis.plans import (
    LIST_PAGE,
    RedisStorePlans,
    encode_namespace,
    filter_args,
    split_id,
)

pytestmark = pytest.mark.storage

# Fixtures shared with the Redis saver's tests: the single node / cluster choice, the
# calling style, a per-test key prefix with an admin client, private servers.
Space = saver_tests.Space
where = saver_tests.where
flavour = saver_tests.flavour
space = saver_tests.space
start_redis = saver_tests.start_redis


# --------------------------------------------------------------------------------------------
# Fixtures: stores on this test's prefix, and a look behind the store's back
# --------------------------------------------------------------------------------------------


@pytest.fixture
def open_store(space: Space, flavour: str) -> OpenStore:
    """``open_store(**options)`` opens a new store of this test's flavour on its prefix."""

    @asynccontextmanager
    async def factory(**options: Any) -> AsyncIterator[Ops]:
        options.setdefault("key_prefix", space.prefix)
        options.pop("pool_max_size", None)  # the PostgreSQL pool's; redis-py pools by itself
        if flavour == "sync":
            with RedisStore.from_conn_string(space.url, **options) as store:
                store.setup()
                yield Ops(store, False)
        else:
            async with AsyncRedisStore.from_conn_string(space.url, **options) as astore:
                await astore.setup()
                yield Ops(astore, True)

    return factory


def plans(ops: Ops) -> RedisStorePlans:
    plans: RedisStorePlans = ops.store._plans
    return plans


def shard_key(ops: Ops, namespace: tuple[str, ...], kind: str) -> bytes:
    """The key of ``kind`` of the shard holding ``namespace`` (see the plans' layout)."""
    from langgraph_memory_plus.store.redis.lua import SHARD_KINDS

    return plans(ops).shard(namespace).keys[SHARD_KINDS.index(kind)]


def registry_key(ops: Ops, kind: str) -> bytes:
    from langgraph_memory_plus.store.redis.lua import REGISTRY_KINDS

    return plans(ops).registry[REGISTRY_KINDS.index(kind)]


def registered(space: Space, ops: Ops) -> list[tuple[str, ...]]:
    members = space.admin.zrange(registry_key(ops, "shards"), 0, -1)
    return [tuple(m.decode().split("\0")) for m in members]


Hook = Callable[[Eval], None]


def intercept(ops: Ops, hook: Hook) -> list[Eval]:
    """Record every command the store sends, calling ``hook`` before each is run."""
    runner = ops.store._runner
    original = runner._execute
    seen: list[Eval] = []

    def before(command: Eval) -> None:
        seen.append(command)
        hook(command)

    if ops.is_async:

        async def run_async(command: Eval) -> Any:
            before(command)
            return await original(command)

        runner._execute = run_async
    else:

        def run_sync(command: Eval) -> Any:
            before(command)
            return original(command)

        runner._execute = run_sync
    return seen


def record(ops: Ops) -> list[Eval]:
    return intercept(ops, lambda command: None)


def scripts(seen: list[Eval]) -> Counter[str]:
    return Counter(command.script for command in seen)


def shards_visited(seen: list[Eval], script: str) -> int:
    """How many shards the calls of ``script`` covered (``SHARD_KINDS`` keys per shard)."""
    from langgraph_memory_plus.store.redis.lua import SHARD_KINDS

    return sum(len(c.keys) // len(SHARD_KINDS) for c in seen if c.script == script)


# --------------------------------------------------------------------------------------------
# Key layout, hash slots and the commands hot paths send
# --------------------------------------------------------------------------------------------


async def test_keys_layout_and_hash_slots(open_store: OpenStore, space: Space) -> None:
    async with open_store(index=INDEX) as ops:
        await ops.call("put", ("users", "u1"), "a", {"text": "abc"})
        await ops.call("put", ("users", "u1", "notes"), "b", {"text": "dd"}, ttl=5)
        await ops.call("put", ("users", "u2"), "c", {"text": "e"})
        await ops.call("put", ("solo",), "d", {"text": "f"})
        found = space.scan_keys()
        assert all(key.startswith(f"{space.prefix}:store:{{".encode()) for key in found)
        tags = Counter(re.match(rb".*:store:\{([^}]*)\}:", key)[1] for key in found)  # type: ignore[index]
        # Three shards (u1 with its sub-namespace, u2, solo), the registry, and the slot
        # indexes: one for the store on a single server, one per hash slot on a cluster.
        indexes = {
            plans(ops).shard(ns).keys[-1] for ns in (("users", "u1"), ("users", "u2"), ("solo",))
        }
        assert len(tags) == 4 + len(indexes)
        assert len(indexes) == (1 if space.where == "single" else 3)
        user = ("users", "u1")
        assert space.admin.hlen(shard_key(ops, user, "items")) == 2
        assert space.admin.hlen(shard_key(ops, user, "vecs")) == 2
        assert space.admin.zcard(shard_key(ops, user, "exp")) == 1
        assert space.admin.zrange(shard_key(ops, user, "ns"), 0, -1) == [
            b"users\0u1",
            b"users\0u1\0notes",
        ]
        for namespace in (user, ("users", "u2"), ("solo",)):
            shard_keys = plans(ops).shard(namespace).keys
            if space.where == "single":  # the store's one slot index is elsewhere
                shard_keys = shard_keys[: -len(SLOT_KINDS)]
            assert len({key_slot(key) for key in shard_keys}) == 1, namespace
        assert sorted(registered(space, ops)) == [("solo",), ("users", "u1"), ("users", "u2")]
        assert len({key_slot(key) for key in plans(ops).registry}) == 1


async def test_hot_paths_read_one_shard_and_never_scan(open_store: OpenStore, where: str) -> None:
    async with open_store() as ops:
        await ops.call("batch", [PutOp(("users", f"u{i}"), "k", {"i": i}) for i in range(20)])
        seen = record(ops)
        await ops.call("get", ("users", "u3"), "k")
        await ops.call("search", ("users", "u3"), filter={"i": 3})
        await ops.call("list_namespaces", prefix=("users", "u3"))
        await ops.call("count", ("users", "u3"))
        await ops.call("put", ("users", "u3"), "k", {"i": 33})
        assert scripts(seen) == {"get": 1, "search": 1, "namespaces": 1, "count": 1, "write": 1}
        assert all(len(c.keys) == len(SHARD_KINDS) for c in seen)  # one shard, no registry
        seen.clear()
        assert len(await ops.call("search", ("users",), limit=100)) == 20
        # The first search across shards asks the registry whether every shard is in its
        # slot index (once per store); then a single server reads its one slot index
        # alone, a cluster the registry and each slot's index.
        assert scripts(seen)["registry"] == (1 if where == "single" else 2)
        assert shards_visited(seen, "search") == 20
        seen.clear()
        assert len(await ops.call("search", ("users",), limit=100)) == 20
        slots = len({plans(ops).shard(("users", f"u{i}")).group for i in range(20)})
        assert scripts(seen)["registry"] == (0 if where == "single" else 1)
        assert scripts(seen)["candidates"] == slots
        assert all(isinstance(c, Eval) for c in seen)  # never a SCAN


async def test_a_batch_is_one_script_per_hash_slot(open_store: OpenStore, where: str) -> None:
    async with open_store() as ops:
        puts = [PutOp(("users", f"u{i}"), "k", {"i": i}) for i in range(30)]
        await ops.call("batch", puts)  # enrolls the shards
        seen = record(ops)
        await ops.call("batch", [p._replace(value={"i": -1}) for p in puts])
        slots = {plans(ops).shard(p.namespace).group for p in puts}
        expected = 1 if where == "single" else len(slots)
        # Several slots also run a check pass first (see test_cross_slot_batches).
        assert scripts(seen) == {"write": expected if expected == 1 else 2 * expected}


async def test_cluster_spreads_shards_over_its_nodes(space: Space) -> None:
    if space.where != "cluster":
        return  # a single server has one node; the layout is the same
    with RedisStore.from_conn_string(space.url, key_prefix=space.prefix) as store:
        store.batch([PutOp(("users", f"u{i}"), "k", {"i": i}) for i in range(30)])
        client: Any = space.admin
        nodes = {
            client.get_node_from_key(key).name
            for key in space.scan_keys()
            if key.endswith(b":items")
        }
        assert len(nodes) == 3


# --------------------------------------------------------------------------------------------
# Filters evaluated by the search script (FILTER in the Lua scripts)
# --------------------------------------------------------------------------------------------

# Where the script's view of a value (cjson's) differs from Python's: [] and {} alike,
# integers past 2**53 and past a double, text only float() reads; and plain values.
PUSHDOWN_VALUES: list[dict[str, Any]] = [
    {"n": 12, "tag": "x", "flag": True, "nested": {"a": 1, "b": [1, 2]}, "list": [1, "two"]},
    {"n": 12.0, "tag": "y", "flag": 1, "nested": {}, "list": []},
    {"n": "12", "tag": None, "flag": 1.0, "nested": [], "list": {}},
    {"n": " 12 ", "tag": "", "flag": False, "nested": {"a": True}},
    {"n": "1_2", "tag": "x\x00z", "flag": 0, "list": [True, "two"]},
    {"n": "\u0661\u0662", "tag": "\u00e9"},
    {"n": "inf", "tag": {"k": 0}},
    {"n": "-Infinity", "tag": {"k": False}},
    {"n": "nan", "tag": {}},
    {"n": "1e400", "tag": []},
    {"n": 2**53 + 1, "tag": 2**53 + 1},
    {"n": 2**70, "tag": 2**70},
    {"n": 10**400, "tag": 1.5},
    {"n": True, "tag": 1},
    {"n": None, "tag": [1, [2, {}]]},
    {"n": [12], "tag": {"k": 0, "j": None}},
    {"n": {"v": 12}, "tag": "X"},
    {"n": "0x10", "flag": "true"},
    {"n": "\t7\n", "tag": "x"},
    {"n": "1e2", "tag": 12},
    {"n": -0.0, "tag": 0},
    {"n": 1e300, "tag": 9007199254740992.0},
    {"n": "-.5e1", "tag": [1]},
    {},
]

PUSHDOWN_FILTERS: list[dict[str, Any]] = [
    {"tag": "x"},
    {"tag": None},
    {"tag": {"$ne": None}},
    {"tag": {"$ne": "x"}},
    {"tag": 1},
    {"tag": 1.5},
    {"tag": 0},
    {"tag": 2**53 + 1},
    {"tag": {"$eq": 2**70}},
    {"tag": 9007199254740992},
    {"tag": []},
    {"tag": {}},
    {"tag": {"$eq": {}}},
    {"tag": {"$eq": []}},
    {"tag": {"$ne": []}},
    {"tag": {"k": 0}},
    {"tag": {"$eq": {"k": False, "j": None}}},
    {"tag": [1, [2, {}]]},
    {"tag": [{"$gte": 1}]},
    {"tag": "x\x00z"},
    {"tag": "\u00e9"},
    {"tag": "\ud800"},
    {"flag": True},
    {"flag": {"$ne": 1}},
    {"nested": {"a": 1}},
    {"nested": {}},
    {"nested": []},
    {"list": []},
    {"list": {"$eq": {}}},
    {"list": [1, "two"]},
    {"n": {"$gt": 10}},
    {"n": {"$gte": 12, "$lte": 12}},
    {"n": {"$lt": 0}},
    {"n": {"$gt": 1e300}},
    {"n": {"$gt": 2**53}},
    {"n": {"$gt": float("nan")}},
    {"n": {"$lt": float("inf")}},
    {"missing": None},
    {"missing": {"$ne": None}},
    {"tag": "x", "n": {"$gt": 5}},
]


def expected_matches(flt: dict[str, Any]) -> set[int]:
    """InMemoryStore's answer; where it raises, the documented rule (filters.holds)."""
    found = reference_matches(PUSHDOWN_VALUES, flt)
    return numeric_truth(PUSHDOWN_VALUES, flt) if found is None else found


async def test_filtered_pages_agree_with_in_memory_store(open_store: OpenStore) -> None:
    """The script stops a shard at offset+limit matches, past items it must leave to
    Python and expired ones: on one shard and across three, every page is the slice of
    the whole result, which is newest first and InMemoryStore's."""
    homes = [("p", "a"), ("p", "b"), ("p", "c", "d")]
    async with open_store() as ops:
        for rnd in range(2):
            for i, value in enumerate(PUSHDOWN_VALUES):
                home = homes[(i + rnd) % len(homes)]
                await ops.call("put", home, f"{rnd}-{i}", value, ttl=None)
                await ops.call("put", home, f"{rnd}-{i}-gone", value, ttl=0.002)
        await asyncio.sleep(0.5)  # the "-gone" twins have expired, unswept
        for flt in PUSHDOWN_FILTERS:
            matching = expected_matches(flt)
            for prefix in [("p",), ("p", "a"), ("p", "c")]:
                full = await ops.call("search", prefix, filter=flt, limit=1000)
                expected = {
                    f"{rnd}-{i}"
                    for rnd in range(2)
                    for i in matching
                    if homes[(i + rnd) % len(homes)][: len(prefix)] == prefix
                }
                assert set(keys(full)) == expected, (flt, prefix)
                versions = [item.version for item in full]
                assert versions == sorted(versions, reverse=True), (flt, prefix)
                pages = [
                    keys(await ops.call("search", prefix, filter=flt, limit=3, offset=offset))
                    for offset in range(0, len(full) + 3, 3)
                ]
                assert [k for page in pages for k in page] == keys(full), (flt, prefix)


async def test_filtered_search_script_sends_only_the_page(
    open_store: OpenStore, space: Space
) -> None:
    """Without modules there is no index, but the script stops at the page's matches
    and sends only them, plus the items only Python can decide, flagged for it."""
    namespace = ("u", "1")
    kinds = ["fact", "preference", "episode", "note"]
    async with open_store() as ops:
        values = [{"kind": kinds[i % 4], "n": "1_000" if i % 10 == 9 else i} for i in range(200)]
        await ops.call("batch", [PutOp(namespace, f"k{i:03}", v) for i, v in enumerate(values)])
        shard = plans(ops).shard(namespace)
        script = space.admin.register_script(SCRIPTS["search"])

        def run(flt: dict[str, Any] | None, want: int) -> list[tuple[int, bytes]]:
            """(item number, sure flag) of what the script sends back for one shard."""
            head = [0, *filter_args(parse_filter(flt)), "", want]
            entry = (shard, [encode_namespace(namespace)])
            call = plans(ops).call("search", [entry], [0], head)
            (reply,) = script(keys=call.keys, args=call.args)
            ids, sure = reply[::3], reply[2::3]
            return [(int(split_id(i)[1][1:]), f) for i, f in zip(ids, sure, strict=True)]

        facts = [i for i in reversed(range(200)) if i % 4 == 0][:10]
        assert run({"kind": "fact"}, 10) == [(i, b"1") for i in facts]
        assert run({"kind": "nothing"}, 10) == []  # read through, nothing sent
        assert run(None, 3) == [(199, b"1"), (198, b"1"), (197, b"1")]
        # "1_000" is a number to float() only: such items ride along flagged, uncounted.
        assert run({"n": {"$gt": 150}}, 5) == [
            (199, b"0"), (198, b"1"), (197, b"1"), (196, b"1"), (195, b"1"), (194, b"1")
        ]  # fmt: skip
        assert run({"n": {"$gt": 150}, "kind": "fact"}, 2) == [(196, b"1"), (192, b"1")]


def field_index(space: Space, ops: Ops, namespace: tuple[str, ...]) -> dict[bytes, int]:
    """The token counts of a shard's field index (``fv``), without its version bound."""
    found = space.admin.hgetall(shard_key(ops, namespace, "fv"))
    return {token: int(n) for token, n in found.items() if token not in (b"\x01", b"\x02")}


def slot_index_of(space: Space, ops: Ops, namespace: tuple[str, ...]) -> dict[bytes, int]:
    """A shard's members of its slot index (``ix``), token -> version bound (``iv``)."""
    shard = plans(ops).shard(namespace)
    ix, iv = shard.keys[-2:]
    found = {}
    for member in space.admin.zrange(ix, 0, -1):
        length, _, rest = member.partition(b":")
        token, path = rest[: int(length)], rest[int(length) :]
        if path == shard.path:
            found[token] = int(space.admin.hget(iv, member))
    return found


def check_slot_index(space: Space, ops: Ops, namespace: tuple[str, ...]) -> None:
    """The slot index holds the shard's tokens and itself (token ''), each bound at least
    the version of every item holding the token."""
    newest: dict[bytes, int] = {}
    for raw_id, record in space.admin.hgetall(shard_key(ops, namespace, "items")).items():
        version = int(record.split(b",")[0])
        for token in tokens_of_items_in({raw_id: record}):
            newest[token] = max(newest.get(token, 0), version)
        newest[b""] = max(newest.get(b"", 0), version)
    got = slot_index_of(space, ops, namespace)
    assert set(got) == set(newest), (got, newest)
    assert all(got[t] >= v for t, v in newest.items()), (got, newest)


def tokens_of_items(space: Space, ops: Ops, namespace: tuple[str, ...]) -> dict[bytes, int]:
    """What the field index must count, from the shard's items."""
    return tokens_of_items_in(space.admin.hgetall(shard_key(ops, namespace, "items")))


def tokens_of_items_in(items: dict[bytes, bytes]) -> dict[bytes, int]:
    """The token counts of item records (the rule of ``tokens`` in the Lua prelude:
    strings of up to 64 bytes along keys of letters and digits)."""
    counts: Counter[bytes] = Counter()
    for record in items.values():
        stack = [(json.loads(record.partition(b"\n")[2]), "")]
        while stack:
            obj, path = stack.pop()
            for key, item in obj.items():
                if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key, re.ASCII):
                    continue
                at = f"{path}.{key}" if path else key
                if isinstance(item, str) and len(item.encode()) <= 64:
                    counts[f"{at}\0{item}".encode()] += 1
                elif isinstance(item, dict):
                    stack.append((item, at))
    return dict(counts)


async def test_the_field_index_follows_every_write(open_store: OpenStore, space: Space) -> None:
    user = ("users", "u1")
    async with open_store() as ops:

        def check() -> None:
            assert field_index(space, ops, user) == tokens_of_items(space, ops, user)
            check_slot_index(space, ops, user)

        await ops.call("put", user, "a", {"kind": "fact", "m": {"src": "doc", "l": ["x"]}})
        await ops.call("put", (*user, "notes"), "b", {"kind": "fact", "a_b": "no", "1a": "no"})
        await ops.call("put", user, "c", {"kind": "note", "long": "z" * 300, "n": 1})
        check()
        assert field_index(space, ops, user)[b"kind\0fact"] == 2
        await ops.call("put", user, "a", {"kind": "note", "m": {"src": "chat"}})  # an update
        await ops.call("delete", (*user, "notes"), "b")
        check()
        assert b"kind\0fact" not in field_index(space, ops, user)
        await ops.call("put", user, "t", {"kind": "gone"}, ttl=0.005)  # 0.3 seconds
        await asyncio.sleep(0.5)
        assert await ops.admin("sweep_ttl") == 1
        check()
        await ops.call("delete_namespace", user)
        assert space.admin.exists(shard_key(ops, user, "fv")) == 0
        assert slot_index_of(space, ops, user) == {}


async def test_a_search_across_shards_reads_only_those_that_can_fill_its_page(
    open_store: OpenStore,
) -> None:
    """The probe skips shards lacking the filter's string; the rest are read newest
    first, and reading stops where no shard left can hold a newer match."""
    async with open_store() as ops:
        for i in range(30):
            kind = "rare" if i in (4, 17) else "common"
            await ops.call("put", ("users", f"u{i:02}"), "k", {"kind": kind, "n": i})
        seen = record(ops)
        found = await ops.call("search", ("users",), filter={"kind": "rare"})
        assert keys(found) == ["k", "k"] and [h.value["n"] for h in found] == [17, 4]
        assert shards_visited(seen, "search") == 2
        seen.clear()
        assert await ops.call("search", ("users",), filter={"kind": "none"}) == []
        assert shards_visited(seen, "search") == 0
        seen.clear()
        found = await ops.call("search", ("users",), filter={"kind": "common"}, limit=2)
        assert [h.value["n"] for h in found] == [29, 28]
        assert shards_visited(seen, "search") < 30
        seen.clear()
        found = await ops.call("search", ("users",), filter={"n": {"$gte": 27}}, limit=5)
        assert [h.value["n"] for h in found] == [29, 28, 27]
        assert shards_visited(seen, "search") == 30  # no token, too few matches to stop


@pytest.mark.parametrize("release", ["without field index", "with field index"])
async def test_a_store_of_an_earlier_release_is_indexed_at_its_first_search(
    open_store: OpenStore, space: Space, release: str
) -> None:
    """Shards written by a release without slot indexes (with or without field indexes)
    are put into them by the first search across shards, which the registry then
    remembers; the index stays right after that."""
    old = [("users", f"u{i}") for i in range(6)]
    async with open_store() as ops:
        for i, namespace in enumerate(old):
            await ops.call("put", namespace, "a", {"kind": "rare" if i == 2 else "common"})
            await ops.call("put", namespace, "b", {"kind": "common", "n": i})
        # As the earlier release left the keys: no slot index, no mark in the registry.
        for namespace in old:
            if release == "without field index":
                space.admin.delete(shard_key(ops, namespace, "fv"))
            else:
                space.admin.hdel(shard_key(ops, namespace, "fv"), b"\x02")
        for key in {k for ns in old for k in plans(ops).shard(ns).keys[-len(SLOT_KINDS) :]}:
            space.admin.delete(key)
        space.admin.delete(registry_key(ops, "indexed"))
    async with open_store() as ops:
        found = await ops.call("search", ("users",), filter={"kind": "rare"})
        assert [(h.namespace, h.key) for h in found] == [(old[2], "a")]
        for namespace in old:
            assert field_index(space, ops, namespace) == tokens_of_items(space, ops, namespace)
            check_slot_index(space, ops, namespace)
        assert space.admin.exists(registry_key(ops, "indexed")) == 1
        await ops.call("put", old[4], "c", {"kind": "rare"})
        await ops.call("put", old[2], "a", {"kind": "common"})
    async with open_store() as ops:  # a new store object asks the registry again
        seen = record(ops)
        found = await ops.call("search", ("users",), filter={"kind": "rare"})
        assert [(h.namespace, h.key) for h in found] == [(old[4], "c")]
        assert "reindex" not in scripts(seen)
        found = await ops.call("search", ("users",), filter={"kind": "common"}, limit=20)
        assert len(found) == 12


# --------------------------------------------------------------------------------------------
# TTL: expiry as data, refresh on read, the sweeper
# --------------------------------------------------------------------------------------------


async def test_expired_items_are_never_returned_before_a_sweep(
    open_store: OpenStore, space: Space
) -> None:
    async with open_store(ttl={"default_ttl": 0.005}) as ops:  # 0.3 seconds
        await ops.call("put", ("t", "short"), "k", {"v": 1})
        await ops.call("put", ("t", "keep"), "k", {"v": 2}, ttl=None)
        await ops.call("put", ("t", "short"), "long", {"v": 3}, ttl=10)
        await ops.call("put", ("t", "short", "deep"), "k", {"v": 4})
        await asyncio.sleep(0.5)
        assert await ops.call("get", ("t", "short"), "k") is None
        assert keys(await ops.call("search", ("t",))) == ["long", "k"]
        assert await ops.call("count", ("t",)) == 2
        assert await ops.call("list_namespaces") == [("t", "keep"), ("t", "short")]
        await ops.call("delete", ("t", "short"), "long")
        assert await ops.call("list_namespaces") == [("t", "keep")]
        items = shard_key(ops, ("t", "short"), "items")
        assert space.admin.hlen(items) == 2  # the expired items are still stored...
        assert await ops.admin("sweep_ttl") == 2  # ...until swept
        assert space.admin.exists(items) == 0
        assert registered(space, ops) == [("t", "keep")]  # the emptied shard is closed
        # Writing an expired item's key starts a new item.
        await ops.call("put", ("t", "new"), "k", {"v": 4}, ttl=0.005)
        await asyncio.sleep(0.5)
        await ops.call("put", ("t", "new"), "k", {"v": 5})
        fresh = await ops.call("get", ("t", "new"), "k")
        assert fresh.value == {"v": 5} and fresh.created_at == fresh.updated_at


REFRESH_CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], bool]] = [
    ("get", (("r",), "k"), {"refresh_ttl": False}, False),
    ("search", (("r",),), {"refresh_ttl": False}, False),
    ("get", (("r",), "k"), {}, True),
    ("search", (("r",),), {"filter": {"v": {"$gt": 0}}}, True),
    ("search", (("r",),), {"filter": {"v": {"$lt": 0}}}, False),  # not on the page
    ("search", (("r",),), {"limit": 1}, False),  # the page holds only the newer k2
    ("get", (("r",), "k"), {"refresh_ttl": True}, True),
]


async def test_ttl_refresh_on_read(open_store: OpenStore, space: Space) -> None:
    """The item's expiry score moves exactly when a read returns it with refresh on."""
    async with open_store(ttl={"default_ttl": 5}) as ops:
        await ops.call("put", ("r",), "k", {"v": 1})
        await ops.call("put", ("r",), "k2", {"v": 2}, ttl=None)
        exp = shard_key(ops, ("r",), "exp")
        assert space.admin.zrange(exp, 0, -1) == [b"r\0\0k"]  # k2 has no TTL

        async def moves(store: Ops, name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
            before = space.admin.zscore(exp, b"r\0\0k")
            await asyncio.sleep(0.01)
            await store.call(name, *args, **kw)
            return bool(space.admin.zscore(exp, b"r\0\0k") != before)

        for name, args, kwargs, expected in REFRESH_CASES:
            assert await moves(ops, name, args, kwargs) == expected, (name, kwargs)
    async with open_store(ttl={"default_ttl": 5, "refresh_on_read": False}) as ops:
        assert await moves(ops, "get", (("r",), "k"), {}) is False
        assert await moves(ops, "search", (("r",),), {}) is False
        assert await moves(ops, "get", (("r",), "k"), {"refresh_ttl": True}) is True


async def test_ttl_sweeper_deletes_in_bounded_batches(open_store: OpenStore, space: Space) -> None:
    async with open_store(ttl={"default_ttl": 0.005, "sweep_interval_minutes": 0.005}) as ops:
        spaces = [("s", f"n{i}") for i in range(5)]
        await ops.call(
            "batch", [PutOp(spaces[i % 5], str(i), {"i": i}, ttl=0.005) for i in range(25)]
        )
        await ops.call("put", ("s", "n0"), "forever", {"i": -1}, ttl=None)
        await asyncio.sleep(0.5)
        seen = record(ops)
        assert await ops.admin("sweep_ttl", batch_size=10) == 25
        budgets = [int(c.args[0]) for c in seen if c.script == "sweep"]
        assert budgets and all(b <= 10 for b in budgets)
        assert registered(space, ops) == [("s", "n0")]  # the others were emptied and closed
        with pytest.raises(InvalidConfigError):
            await ops.admin("sweep_ttl", batch_size=0)
        await ops.call("batch", [PutOp(("s", "n9"), str(i), {"i": i}, ttl=0.005) for i in range(5)])
        await ops.admin("start_ttl_sweeper")
        await poll(lambda: not space.admin.exists(shard_key(ops, ("s", "n9"), "items")), "sweep")
        assert await ops.admin("stop_ttl_sweeper", timeout=WAIT_SECONDS) is True
        assert await ops.call("count") == 1
    async with open_store() as ops:  # no ttl config: nothing to sweep, nothing started
        done = await ops.admin("start_ttl_sweeper")
        assert done.done()
        assert await ops.admin("stop_ttl_sweeper") is True


# --------------------------------------------------------------------------------------------
# The registry protocol (see "Registration and the sweeper's hints" in the plans)
# --------------------------------------------------------------------------------------------


def on_nth_write(n: int, action: Callable[[], None]) -> Hook:
    """A hook that runs ``action`` just before the store's ``n``-th write script."""
    count = 0

    def hook(command: Eval) -> None:
        nonlocal count
        if command.script == "write":
            count += 1
            if count == n:
                action()

    return hook


async def test_a_shard_closed_while_a_writer_enrolls_it_stays_registered(
    open_store: OpenStore, space: Space
) -> None:
    """The writer enrolls, a delete_namespace empties, closes and unregisters the shard
    before the writer's second attempt: the writer must enroll again, not write into an
    unregistered shard that list_namespaces would never see."""
    with RedisStore.from_conn_string(space.url, key_prefix=space.prefix) as other:
        async with open_store() as ops:
            await ops.call("put", ("users", "u9"), "old", {"v": 0})
            await ops.call("delete", ("users", "u9"), "old")  # closes the emptied shard
            assert registered(space, ops) == []  # the next put must enroll it
            ran: list[int] = []
            seen = intercept(
                ops,
                on_nth_write(2, lambda: ran.append(other.delete_namespace(("users", "u9")))),
            )
            await ops.call("put", ("users", "u9"), "new", {"v": 1})
            assert ran == [0] and scripts(seen) == {"write": 3, "enroll": 2}
            assert await ops.call("list_namespaces") == [("users", "u9")]
            assert registered(space, ops) == [("users", "u9")]


async def test_a_sweep_between_enrolment_and_write_keeps_the_due_hint(
    open_store: OpenStore, space: Space
) -> None:
    """Same race with a TTL item: the sweeper closes the (still empty) shard; the item
    written afterwards must still be found and deleted by a later sweep."""
    with RedisStore.from_conn_string(space.url, key_prefix=space.prefix) as other:
        async with open_store() as ops:
            swept: list[int] = []
            intercept(ops, on_nth_write(2, lambda: swept.append(other.sweep_ttl())))
            await ops.call("put", ("t", "u1"), "k", {"v": 1}, ttl=0.002)
            assert swept == [0]
            assert registered(space, ops) == [("t", "u1")]
            assert space.admin.zscore(registry_key(ops, "due"), b"t\0u1") is not None
            await asyncio.sleep(0.3)
            assert other.sweep_ttl() == 1
            assert registered(space, ops) == []
            assert space.admin.zcard(registry_key(ops, "due")) == 0


# --------------------------------------------------------------------------------------------
# Optimistic concurrency and cross-slot batches
# --------------------------------------------------------------------------------------------


async def test_two_writers_racing_on_one_item(open_store: OpenStore) -> None:
    async with open_store() as ops, open_store() as rival:
        await ops.call("put", ("race",), "profile", {"who": "nobody"})
        seen = (await ops.call("get", ("race",), "profile")).version
        await rival.call("put", ("race",), "profile", {"who": "A"}, expected_version=seen)
        with pytest.raises(ConflictError, match="is at version"):
            await ops.call("put", ("race",), "profile", {"who": "B"}, expected_version=seen)
        assert (await ops.call("get", ("race",), "profile")).value == {"who": "A"}
        await rival.call("put", ("race",), "new", {"who": "A"}, expected_version=0)
        with pytest.raises(ConflictError, match="already exists"):
            await ops.call("put", ("race",), "new", {"who": "B"}, expected_version=0)


async def test_concurrent_writers_keep_the_slot_index_right(
    open_store: OpenStore, space: Space
) -> None:
    """Two stores writing, rewriting (changing the filtered field) and deleting items of
    the same shards at once, and a sweep and a delete_namespace among them: afterwards
    every shard's slot index entries match its items, and searches across shards find
    what the items say."""
    users = [("users", f"u{i}") for i in range(12)]

    async def writer(ops: Ops, me: int) -> None:
        for round_ in range(30):
            for j, namespace in enumerate(users):
                kind = ("fact", "note", "rare")[(me + round_ + j) % 3]
                key = f"k{(round_ + j) % 4}"
                if (round_ + j + me) % 5 == 0:
                    await ops.background("delete", namespace, key)  # threads: sync too
                else:
                    ttl = 0.002 if (round_ + me) % 7 == 0 else None
                    await ops.background("put", namespace, key, {"kind": kind, "w": me}, ttl=ttl)

    async with open_store() as ops, open_store() as rival:
        await asyncio.gather(
            writer(ops, 0),
            writer(rival, 1),
            ops.admin("sweep_ttl"),
            rival.background("delete_namespace", users[3]),
        )
        await asyncio.sleep(0.2)
        await ops.admin("sweep_ttl")
        for namespace in users:
            assert field_index(space, ops, namespace) == tokens_of_items(space, ops, namespace)
            check_slot_index(space, ops, namespace)
        everything = await ops.call("search", ("users",), limit=1000)
        for kind in ("fact", "note", "rare"):
            found = await rival.call("search", ("users",), filter={"kind": kind}, limit=1000)
            assert sorted((h.namespace, h.key) for h in found) == sorted(
                (h.namespace, h.key) for h in everything if h.value["kind"] == kind
            )


def two_slots(ops: Ops) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two namespaces whose shards are in different script groups (hash slots)."""
    first = ("users", "a")
    for i in range(100):
        other = ("users", f"b{i}")
        if plans(ops).shard(other).group != plans(ops).shard(first).group:
            return first, other
    raise AssertionError("no second slot found")


async def test_cross_slot_batches_apply_all_or_nothing(open_store: OpenStore, space: Space) -> None:
    async with open_store() as ops:
        if space.where == "single":
            # One server: any batch is one script, checked before its first write.
            batch = [PutOp(("users", f"u{i}"), "k", {"i": i}) for i in range(10)]
            seen = record(ops)
            with pytest.raises(ConflictError):
                await ops.call("batch", [*batch, ConditionalPutOp(batch[0], 42)])
            assert scripts(seen) == {"write": 1}
            assert await ops.call("count") == 0
            return
        first, second = two_slots(ops)
        await ops.call("put", first, "x", {"v": "old"})
        await ops.call("put", second, "y", {"v": "old"})
        version = (await ops.call("get", second, "y")).version
        batch: list[Any] = [
            PutOp(first, "x", {"v": "new"}),
            PutOp(first, "fresh", {"v": "new"}),
            ConditionalPutOp(PutOp(second, "y", {"v": "new"}), version + 1),
        ]
        # A stale condition on the second slot: found by the check pass, nothing written.
        with pytest.raises(ConflictError):
            await ops.call("batch", batch)
        batch[2] = ConditionalPutOp(PutOp(second, "y", {"v": "new"}), version)
        # A rival writes between the check pass and the second slot's write: the first
        # slot's writes are undone before ConflictError is raised.
        with RedisStore.from_conn_string(space.url, key_prefix=space.prefix) as rival:
            intercept(ops, on_nth_write(4, lambda: rival.put(second, "y", {"v": "rival"})))
            with pytest.raises(ConflictError):
                await ops.call("batch", batch)
        assert (await ops.call("get", first, "x")).value == {"v": "old"}
        assert await ops.call("get", first, "fresh") is None
        assert (await ops.call("get", second, "y")).value == {"v": "rival"}
        version = (await ops.call("get", second, "y")).version
        batch[2] = ConditionalPutOp(PutOp(second, "y", {"v": "new"}), version)

        # The connection fails before the second slot's script: the error reaches the
        # caller, and the first slot's writes are undone.
        def fail() -> None:
            raise redis.ConnectionError("lost the connection (injected)")

        intercept(ops, on_nth_write(4, fail))
        with pytest.raises(redis.ConnectionError, match="injected"):
            await ops.call("batch", batch)
        assert (await ops.call("get", first, "x")).value == {"v": "old"}
        assert await ops.call("get", first, "fresh") is None
        assert (await ops.call("get", second, "y")).value == {"v": "rival"}
        intercept(ops, lambda command: None)
        await ops.call("batch", batch)
        assert (await ops.call("get", first, "fresh")).value == {"v": "new"}
        assert (await ops.call("get", second, "y")).value == {"v": "new"}


# --------------------------------------------------------------------------------------------
# delete_namespace, count, list_namespaces at scale, other shard depths
# --------------------------------------------------------------------------------------------


def dump(space: Space) -> bytes:
    """Every key name and stored byte under the test's prefix, concatenated."""
    admin: Any = space.admin
    out = []
    for key in space.scan_keys():
        out.append(key)
        kind = admin.type(key)
        if kind == b"hash":
            out.extend(b for pair in admin.hgetall(key).items() for b in pair)
        elif kind == b"zset":
            out.extend(admin.zrange(key, 0, -1))
        elif kind == b"string":
            out.append(admin.get(key))
    return b"|".join(out)


async def test_delete_namespace_count_and_erasure(open_store: OpenStore, space: Space) -> None:
    async with open_store(index=INDEX) as ops:
        for ns in [("users", "u1"), ("users", "u1", "notes"), ("users", "u10"), ("users", "u2")]:
            await ops.call("put", ns, "a", {"text": "abc", "name": f"secret:{ns[1]}:"})
            await ops.call("put", ns, "b", {"text": "def"}, ttl=10)
        await ops.call("put", ("users", "u1"), "old", {"text": "x"}, ttl=0.001)
        await asyncio.sleep(0.2)
        assert await ops.call("count") == 8
        assert await ops.call("count", ("users", "u1")) == 4
        assert await ops.call("count", ("users", "u1", "notes")) == 2
        # Deleting below a shard keeps the rest of it.
        assert await ops.call("delete_namespace", ("users", "u1", "notes")) == 2
        assert await ops.call("count", ("users", "u1")) == 2
        assert await ops.call("delete_namespace", ("users", "u1")) == 3  # expired item too
        assert await ops.call("count", ("users",)) == 4
        assert await ops.call("list_namespaces") == [("users", "u10"), ("users", "u2")]
        stored = dump(space)
        assert b"secret:u1:" not in stored and b"secret:u2:" in stored
        assert re.search(rb"u1(?!0)", stored) is None  # no label, value, or index entry
        assert await ops.call("delete_namespace", ("nothing",)) == 0
        assert await ops.call("delete_namespace", ("users",)) == 4
        assert await ops.call("count") == 0 and registered(space, ops) == []
        with pytest.raises(InvalidConfigError):
            await ops.call("delete_namespace", ())
        with pytest.raises(InvalidNamespaceError):
            await ops.call("count", ("a.b",))


async def test_storage_returns_to_zero_when_every_item_is_gone(
    open_store: OpenStore, space: Space
) -> None:
    """Deleting the last items (one by one, in a batch, by delete_namespace) or letting
    them expire and sweeping them leaves no key behind, the registry's included, but
    each closed shard's meta hash, which expires: nothing stays forever. A shard
    written again is enrolled with a later epoch than any it had."""

    def only_tombstones() -> None:
        left = {key: space.admin.pttl(key) for key in space.scan_keys()}
        assert left, "closed shards keep a tombstone"
        assert all(k.endswith(b":meta") and 0 < t <= TOMBSTONE_MS for k, t in left.items()), left

    def epoch(namespace: tuple[str, ...]) -> int:
        return int(space.admin.hget(registry_key(ops, "epoch"), encode_namespace(namespace)))

    namespaces = [("users", "u1"), ("users", "u1", "notes"), ("users", "u2"), ("solo",)]
    async with open_store(index=INDEX) as ops:
        for namespace in namespaces:
            await ops.call("put", namespace, "a", {"text": "abc"})
            await ops.call("put", namespace, "b", {"text": "def"}, ttl=10)
        first = epoch(("users", "u1"))
        for namespace in namespaces[:2]:
            await ops.call("delete", namespace, "a")
            await ops.call("delete", namespace, "b")
        await ops.call("batch", [PutOp(ns, k, None) for ns in namespaces[2:] for k in "ab"])
        only_tombstones()
        assert await ops.call("list_namespaces") == [] and await ops.call("count") == 0

        await ops.call("put", ("users", "u1"), "c", {"text": "abc"})
        assert registered(space, ops) == [("users", "u1")]
        assert epoch(("users", "u1")) > first
        assert await ops.call("delete_namespace", ("users",)) == 1
        only_tombstones()

        await ops.call("put", ("users", "u3"), "t", {"text": "abc"}, ttl=0.002)
        await ops.call("put", ("users", "u3", "x"), "t", {"text": "abc"}, ttl=0.002)
        await asyncio.sleep(0.3)
        assert await ops.admin("sweep_ttl") == 2
        only_tombstones()
        assert (await ops.call("search", ("users",), query="abc")) == []


async def test_list_namespaces_stops_early_and_skips_folded_subtrees(
    open_store: OpenStore,
) -> None:
    async with open_store() as ops:
        puts = [PutOp((root, f"u{i:03}"), "k", {"i": i}) for root in "st" for i in range(150)]
        await ops.call("batch", puts)
        seen = record(ops)
        first = await ops.call("list_namespaces", limit=3)
        assert first == [("s", "u000"), ("s", "u001"), ("s", "u002")]
        assert shards_visited(seen, "namespaces") <= LIST_PAGE
        seen.clear()
        assert await ops.call("list_namespaces", max_depth=1) == [("s",), ("t",)]
        assert shards_visited(seen, "namespaces") <= 2 * LIST_PAGE
        seen.clear()
        found = await ops.call("list_namespaces", prefix=("t",), limit=500, offset=140)
        assert found == [("t", f"u{i:03}") for i in range(140, 150)]


@pytest.mark.parametrize("depth", [1, 3])
async def test_other_shard_depths_agree_with_in_memory_store(
    open_store: OpenStore, depth: int
) -> None:
    ref = InMemoryStore()
    namespaces = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d"), ("b", "x", "y")]
    async with open_store(shard_depth=depth) as ops:
        for i, ns in enumerate(namespaces):
            for store in (ops, Ops(ref, False)):
                await store.call("put", ns, "k", {"i": i})
                await store.call("put", ns, "j", {"i": -i})
        for prefix in [(), ("a",), ("a", "b"), ("a", "b", "c"), ("b", "x"), ("z",)]:
            same(await ops.call("search", prefix, limit=50), ref.search(prefix, limit=50))
            filtered = await ops.call("search", prefix, filter={"i": {"$gte": 1}}, limit=50)
            same(filtered, ref.search(prefix, filter={"i": {"$gte": 1}}, limit=50))
            assert await ops.call("list_namespaces", prefix=prefix) == ref.list_namespaces(
                prefix=prefix
            )
        for max_depth in (1, 2, 3):
            listed = await ops.call("list_namespaces", max_depth=max_depth)
            assert listed == ref.list_namespaces(max_depth=max_depth)
        assert await ops.call("delete_namespace", ("a", "b")) == 6
        assert await ops.call("list_namespaces") == [("a",), ("b", "x", "y")]


async def test_nul_and_odd_characters_round_trip(open_store: OpenStore) -> None:
    value = {"a": "x\x00y", "k\x00": ["\x00", "\x01"], "{}": "}{", "ok": "ordinary"}
    names = ["k\x00ey", "\x00", "\x00\x00", "plain", "", "{tag}", "é\U0001f600"]
    async with open_store() as ops:
        for key in names:
            await ops.call("put", ("nul", "\x01label", "{x}"), key, value)
        for key in names:
            item = await ops.call("get", ("nul", "\x01label", "{x}"), key)
            assert item.key == key and item.value == value
        found = await ops.call("search", ("nul",), filter={"a": "x\x00y"}, limit=20)
        assert sorted(keys(found)) == sorted(names)
        assert await ops.call("list_namespaces") == [("nul", "\x01label", "{x}")]


# --------------------------------------------------------------------------------------------
# Options, clients, calling styles, faults, graphs
# --------------------------------------------------------------------------------------------


async def test_options_and_clients_are_checked(open_store: OpenStore, space: Space) -> None:
    for bad in [{"key_prefix": ""}, {"key_prefix": "a{b}"}, {"key_prefix": "a\x00"}]:
        with pytest.raises(InvalidConfigError, match="key_prefix"):
            async with open_store(**bad):
                pass
    for depth in [0, -1, True, "2"]:
        with pytest.raises(InvalidConfigError, match="shard_depth"):
            async with open_store(shard_depth=depth):
                pass
    with pytest.raises(InvalidConfigError, match="decode_responses"):
        RedisStore(redis.Redis(decode_responses=True))
    with pytest.raises(InvalidConfigError, match="Redis"):
        AsyncRedisStore(redis.Redis())
    with pytest.raises(InvalidConfigError, match="Redis"):
        RedisStore(redis.asyncio.Redis())
    async with open_store() as ops, open_store(key_prefix=space.prefix + "-other") as other:
        await ops.call("put", ("p",), "k", {"v": 1})
        assert await other.call("get", ("p",), "k") is None
        assert await other.call("list_namespaces") == []
        assert await other.call("search", ()) == []


async def test_each_class_serves_the_other_calling_style(open_store: OpenStore) -> None:
    """The sync class awaited (it runs in a worker thread), the async class called from
    another thread (it runs on its loop), and refused on its own loop (a deadlock)."""
    async with open_store() as ops:
        other = Ops(ops.store, not ops.is_async)
        run = other.call if other.is_async else other.background
        await run("put", ("x",), "k", {"v": 1})
        assert (await run("get", ("x",), "k")).value == {"v": 1}
        assert await run("count") == 1
        assert (await ops.call("get", ("x",), "k")).value == {"v": 1}
        if ops.is_async:
            with pytest.raises(asyncio.InvalidStateError, match="block its own event loop"):
                await other.call("get", ("x",), "k")


async def test_a_dropped_connection_applies_a_batch_whole_or_not_at_all(
    start_redis: Callable[..., Any], flavour: str
) -> None:
    """One server: every batch is one script, so a connection killed around it leaves the
    batch applied entirely or not at all (redis-py's sync client retries the call, its
    async client reports the error); the next call reconnects. A stopped server gives a
    clear ConnectionError."""
    server = start_redis()
    admin = server.admin()
    if flavour == "sync":
        ops = Ops(RedisStore(redis.Redis.from_url(server.url())), False)
    else:
        ops = Ops(AsyncRedisStore(redis.asyncio.Redis.from_url(server.url())), True)
    batch = [PutOp(("users", f"u{i}"), "k", {"i": i}) for i in range(20)]
    await ops.call("batch", batch)
    for value in (-1, -2):
        admin.client_kill_filter(_type="normal", skipme=True)
        with suppress(redis.ConnectionError):
            await ops.call("batch", [p._replace(value={"i": value}) for p in batch])
        found = {item.value["i"] for item in await ops.call("search", ("users",), limit=50)}
        assert len(found) == 1 or found == set(range(20)), found
    server.stop()
    with pytest.raises(redis.ConnectionError):
        await ops.call("batch", [p._replace(value={"i": -3}) for p in batch])
    closed = ops.store.client.aclose() if ops.is_async else ops.store.client.close()
    if ops.is_async:
        await closed


def visit(state: Visits, runtime: Runtime[None]) -> dict[str, Any]:
    return _visit(runtime.store, state)


async def test_graph_nodes_use_the_store_through_the_runtime(open_store: OpenStore) -> None:
    """A node reads and writes the store through its runtime. Under ``ainvoke`` the sync
    node runs in a worker thread, so on the async store it reaches the store's loop from
    there; its ``a*`` methods are covered by every other test."""
    builder = StateGraph(Visits)
    builder.add_node("visit", visit)
    builder.add_edge(START, "visit")
    builder.add_edge("visit", END)
    async with open_store() as ops:
        graph = builder.compile(store=ops.store)
        for expected in (1, 2):
            state = {"user": "u1", "visits": 0}
            result = await graph.ainvoke(state) if ops.is_async else graph.invoke(state)
            assert result["visits"] == expected
    async with open_store() as reopened:  # a "restart"
        item = await reopened.call("get", ("users", "u1"), "profile")
        assert item.value == {"visits": 2}


def test_bad_values_refused_before_any_script(space: Space) -> None:
    with RedisStore.from_conn_string(space.url, key_prefix=space.prefix) as store:
        ops = Ops(store, False)
        seen = record(ops)
        for bad in [PutOp(("ok",), "k", ["list"]), PutOp(("ok",), 5, {}), GetOp(("ok",), 5)]:  # type: ignore[arg-type]
            with pytest.raises(InvalidValueError):
                store.batch([PutOp(("ok",), "good", {"v": 1}), bad])
        with pytest.raises(InvalidNamespaceError):
            store.batch([SearchOp(("a.b",)), ListNamespacesOp()])
        assert seen == [] and space.scan_keys() == set()
