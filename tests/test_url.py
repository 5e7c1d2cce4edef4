"""``from_url``: every backend from one entry point, sync and async, and its errors.

The URL and option checks need no server. Opening runs on a SQLite file and ``memory://``
everywhere, and on the test run's PostgreSQL, Redis and Redis Cluster (the ``storage``
tests; each under a schema or key prefix of its own). Unreachable servers are loopback
ports nothing listens on.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore

from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_memory_plus.checkpoint.redis import AsyncRedisSaver, RedisSaver
from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
from langgraph_memory_plus.errors import InvalidConfigError
from langgraph_memory_plus.store.postgres import AsyncPostgresStore, PostgresStore
from langgraph_memory_plus.store.sqlite import AsyncSqliteStore, SqliteStore
from langgraph_memory_plus.url import (
    ENV_VAR,
    MemoryConnectionError,
    StoreUnavailableError,
    default_path,
    from_url,
    redact,
)

CONFIG = {"configurable": {"thread_id": "t1"}}


def chat(memory: Any) -> Any:
    """A one-node chat that also counts its turns in the store."""

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=memory.checkpointer, store=memory.store)


def round_trip(memory: Any) -> None:
    """Two turns and a store item with the blocking API; their answers come back."""
    graph = chat(memory)
    graph.invoke({"messages": [("user", "one")]}, CONFIG)
    out = graph.invoke({"messages": [("user", "two")]}, CONFIG)
    assert [m.content for m in out["messages"]] == ["one", "answer 1", "two", "answer 3"]
    memory.store.put(("users", "u1"), "fact", {"text": "likes trains"})
    assert memory.store.get(("users", "u1"), "fact").value == {"text": "likes trains"}


async def around_trip(memory: Any) -> None:
    """:func:`round_trip` with the async API."""
    graph = chat(memory)
    await graph.ainvoke({"messages": [("user", "one")]}, CONFIG)
    out = await graph.ainvoke({"messages": [("user", "two")]}, CONFIG)
    assert [m.content for m in out["messages"]] == ["one", "answer 1", "two", "answer 3"]
    await memory.store.aput(("users", "u1"), "fact", {"text": "likes trains"})
    assert (await memory.store.aget(("users", "u1"), "fact")).value == {"text": "likes trains"}


def pg_as_url(conninfo: str) -> str:
    """The test run's PostgreSQL (a key=value conninfo) as a postgresql:// URL."""
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    user = parts.get("user", "postgres")
    host, port, db = parts.get("host", "127.0.0.1"), parts.get("port", 5432), parts["dbname"]
    return f"postgresql://{user}@{host}:{port}/{db}"


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# URLs and options, checked at once
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("postgresql://u@h/db", "postgres"),
        ("postgres://u@h:5432/db?sslmode=disable", "postgres"),
        ("redis://h:6379/0", "redis"),
        ("rediss://:pw@h:6380", "redis"),
        ("redis+cluster://h:7000", "redis"),
        ("rediss+cluster://h:7000", "redis"),
        ("sqlite:///memory.db", "sqlite"),
        ("sqlite://", "sqlite"),
        ("memory://", "memory"),
        ("MEMORY://", "memory"),
    ],
)
def test_every_scheme_names_its_backend(url: str, backend: str) -> None:
    memory = from_url(url)
    assert memory.backend == backend
    assert "not open" in repr(memory)


def test_passwords_never_show() -> None:
    assert redact("postgresql://ada:s3cret@h:5432/db") == "postgresql://ada:***@h:5432/db"
    assert redact("redis://:s3cret@h/0") == "redis://:***@h/0"
    assert redact("postgresql://h/db?user=a&password=s3cret&sslpassword=x") == (
        "postgresql://h/db?user=a&password=***&sslpassword=***"
    )
    assert redact("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    memory = from_url("postgresql://ada:s3cret@h/db")
    assert "s3cret" not in repr(memory) and memory.url == "postgresql://ada:***@h/db"


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("mysql://ada:s3cret@h/db", {}, "unsupported URL scheme 'mysql'"),
        ("just-a-path.db", {}, "not a URL"),
        ("redis://ada:s3cret@h:port/0", {}, "bad URL"),
        ("sqlite://host/x.db", {}, "names a file, not a host"),
        ("sqlite:///x.db?colour=red", {}, "unknown option 'colour'"),
        ("memory://", {"colour": "red"}, "unknown option 'colour'"),
        ("postgresql://ada:s3cret@h/db", {"key_prefix": "p"}, "'key_prefix' does not apply"),
        ("redis://:s3cret@h/0", {"schema": "s"}, "'schema' does not apply"),
        ("memory://", {"ttl": 5}, "'ttl' does not apply"),
        ("sqlite:///x.db?ttl=never", {}, "ttl must be a number"),
        ("sqlite:///x.db", {"ttl": -1}, "ttl must be a number greater than 0"),
        ("sqlite:///x.db?keep_last=0", {}, "keep_last must be an integer >= 1"),
        ("sqlite:///x.db?keep_last=1.5", {}, "keep_last must be an integer"),
        ("sqlite:///x.db?refresh_on_read=maybe", {}, "refresh_on_read must be true or false"),
        ("sqlite:///x.db?index=abc", {}, "index cannot be given as text"),
        ("sqlite:///x.db?ttl=5&ttl=6", {}, "ttl appears twice"),
        ("postgresql://ada:s3cret@h/db?ttl=5", {"ttl": 6}, "given twice, differently"),
        ("redis://:s3cret@h/0", {"pool_min_size": 2}, "'pool_min_size' does not apply"),
    ],
)
def test_bad_urls_and_options_are_one_line_errors_without_the_password(
    url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message) as info:
        from_url(url, **options)
    text = str(info.value)
    assert "\n" not in text and "s3cret" not in text
    assert isinstance(info.value, ValueError)


def test_the_same_option_by_url_or_argument() -> None:
    by_url = from_url("sqlite:///x.db?ttl=90&keep_last=3&refresh_on_read=yes&setup=0")
    by_args = from_url("sqlite:///x.db", ttl=90, keep_last=3, refresh_on_read=True, setup=False)
    assert by_url._options == by_args._options
    both = from_url("sqlite:///x.db?ttl=90", ttl=90.0)  # the same value twice is fine
    assert both._options == {"ttl": 90.0}


def test_prepare_threshold_parses_off_for_pgbouncer() -> None:
    by_url = from_url("postgresql://u@h/db?prepare_threshold=none")
    assert by_url._options == {"prepare_threshold": None}
    assert from_url("postgresql://u@h/db", prepare_threshold=None)._options == by_url._options
    assert from_url("postgresql://u@h/db?prepare_threshold=2")._options == {"prepare_threshold": 2}
    with pytest.raises(InvalidConfigError, match="prepare_threshold"):
        from_url("postgresql://u@h/db?prepare_threshold=-1")
    with pytest.raises(InvalidConfigError, match="does not apply"):
        from_url("sqlite:///x.db", prepare_threshold=None)


def test_driver_parameters_stay_in_the_url_exactly_as_written() -> None:
    memory = from_url("postgresql://u@h/db?ttl=5&options=-c%20search_path%3Dx&schema=app")
    assert memory._target == "postgresql://u@h/db?options=-c%20search_path%3Dx"
    assert memory._options == {"ttl": 5.0, "schema": "app"}


def test_outside_the_block_there_is_nothing_to_use(tmp_path: Path) -> None:
    memory = from_url(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(InvalidConfigError, match="'with'"):
        memory.checkpointer  # noqa: B018
    with memory:
        with pytest.raises(InvalidConfigError, match="already open"), memory:
            pass
        assert memory.checkpointer is not None
    with pytest.raises(InvalidConfigError, match="'with'"):
        memory.store  # noqa: B018


# --------------------------------------------------------------------------------------------
# No server: SQLite and memory://
# --------------------------------------------------------------------------------------------


def test_no_url_means_the_env_var_then_a_file_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = tmp_path / "data" / "langgraph-memory-plus" / "memory.db"
    assert default_path() == expected
    with from_url() as memory:  # creates the directory
        assert memory.backend == "sqlite" and memory.url == f"sqlite:///{expected}"
        round_trip(memory)
    with from_url() as memory:  # a "new process" finds what the first one stored
        state = chat(memory).get_state(CONFIG)
        assert len(state.values["messages"]) == 4
        assert memory.store.get(("users", "u1"), "fact") is not None
    monkeypatch.setenv("XDG_DATA_HOME", "relative/is/ignored")
    assert (
        default_path() == Path.home() / ".local" / "share" / "langgraph-memory-plus" / "memory.db"
    )
    monkeypatch.setenv(ENV_VAR, "memory://")
    assert from_url().backend == "memory"


def test_sqlite_sync_with_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/opts.db?keep_last=1&ttl=60&pool_max_size=2&busy_timeout=5"
    with from_url(url) as memory:
        assert isinstance(memory.checkpointer, SqliteSaver)
        assert isinstance(memory.store, SqliteStore)
        assert memory.checkpointer.conn is memory.store.conn  # one pool for both
        assert memory.checkpointer.conn.max_size == 2  # type: ignore[union-attr]
        assert memory.checkpointer.settings.keep_last == 1  # type: ignore[attr-defined]
        assert memory.checkpointer.settings.ttl_seconds == 3600  # type: ignore[attr-defined]
        assert memory.store.ttl_config == {"default_ttl": 60.0, "refresh_on_read": True}
        round_trip(memory)
        assert len(list(memory.checkpointer.list(CONFIG))) == 1
        saver = memory.checkpointer
    with pytest.raises(InvalidConfigError, match="closed"):  # leaving the block closed it
        saver.get_tuple(CONFIG)


async def test_sqlite_async(tmp_path: Path) -> None:
    async with from_url(f"sqlite:///{tmp_path}/a.db", refresh_on_read=False, ttl=5) as memory:
        assert isinstance(memory.checkpointer, AsyncSqliteSaver)
        assert isinstance(memory.store, AsyncSqliteStore)
        assert memory.store.ttl_config == {"default_ttl": 5.0, "refresh_on_read": False}
        await around_trip(memory)


def test_setup_false_leaves_the_database_alone(tmp_path: Path) -> None:
    path = tmp_path / "untouched.db"
    with from_url(f"sqlite:///{path}", setup=False):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


async def test_memory_url_uses_langgraphs_in_memory_classes() -> None:
    with from_url("memory://") as memory:
        assert isinstance(memory.checkpointer, InMemorySaver)
        assert isinstance(memory.store, InMemoryStore)
        round_trip(memory)
    async with from_url("memory://") as memory:
        await around_trip(memory)


def test_an_unusable_sqlite_file_is_a_clear_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/x.db"
    with (
        pytest.raises(MemoryConnectionError, match="cannot reach the SQLite database") as info,
        from_url(url),
    ):
        pass
    assert str(info.value).startswith(f"cannot reach the SQLite database at {url}: ")
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------------------------


@pytest.mark.storage
def test_postgres_sync_shares_one_pool(pg_url: str) -> None:
    schema = f"url_{uuid.uuid4().hex[:12]}"
    try:
        url = pg_as_url(pg_url)
        with from_url(url, schema=schema, pool_max_size=3, keep_last=2) as memory:
            assert isinstance(memory.checkpointer, PostgresSaver)
            assert isinstance(memory.store, PostgresStore)
            assert memory.checkpointer.conn is memory.store.conn
            assert memory.checkpointer.conn.max_size == 3  # type: ignore[union-attr]
            with memory.checkpointer.conn.connection() as conn:  # type: ignore[union-attr]
                assert conn.prepare_threshold == 0  # prepared on first use unless asked
            round_trip(memory)
            assert len(list(memory.checkpointer.list(CONFIG))) == 2
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.storage
async def test_postgres_async(pg_url: str) -> None:
    schema = f"url_{uuid.uuid4().hex[:12]}"
    try:
        url = f"{pg_as_url(pg_url)}?schema={schema}&prepare_threshold=off"
        async with from_url(url) as memory:
            assert isinstance(memory.checkpointer, AsyncPostgresSaver)
            assert isinstance(memory.store, AsyncPostgresStore)
            async with memory.checkpointer.conn.connection() as conn:  # type: ignore[union-attr]
                assert conn.prepare_threshold is None  # PgBouncer in transaction mode
            await around_trip(memory)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _redis_keys_gone(url: str, prefix: str) -> None:
    import redis

    with redis.Redis.from_url(url) as client:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)


@pytest.mark.storage
def test_redis_sync(redis_url: str) -> None:
    from langgraph_memory_plus.store.redis import RedisStore

    prefix = f"lgmp-url-{uuid.uuid4().hex[:8]}"
    try:
        with from_url(f"{redis_url}?key_prefix={prefix}", pool_max_size=4) as memory:
            assert isinstance(memory.checkpointer, RedisSaver)
            assert isinstance(memory.store, RedisStore)
            assert memory.checkpointer.client is memory.store.client  # type: ignore[attr-defined]
            round_trip(memory)
    finally:
        _redis_keys_gone(redis_url, prefix)


@pytest.mark.storage
async def test_redis_async_and_cluster(redis_url: str, redis_cluster_url: str) -> None:
    prefix = f"lgmp-url-{uuid.uuid4().hex[:8]}"
    try:
        async with from_url(redis_url, key_prefix=prefix) as memory:
            assert isinstance(memory.checkpointer, AsyncRedisSaver)
            await around_trip(memory)
        with from_url(redis_cluster_url, key_prefix=prefix) as memory:
            graph = chat(memory)
            graph.invoke({"messages": [("user", "hi")]}, CONFIG)
            assert len(graph.get_state(CONFIG).values["messages"]) == 2
            memory.checkpointer.delete_thread("t1")
    finally:
        _redis_keys_gone(redis_url, prefix)


@pytest.mark.storage
def test_redis_without_a_store_module_still_opens_the_checkpointer(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph_memory_plus.store.redis", None)
    prefix = f"lgmp-url-{uuid.uuid4().hex[:8]}"
    try:
        with from_url(redis_url, key_prefix=prefix) as memory:
            with pytest.raises(StoreUnavailableError, match="no Redis store") as info:
                memory.store  # noqa: B018
            assert isinstance(info.value, NotImplementedError)
            memory.checkpointer.put(  # the checkpointer works as usual
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                {
                    "v": 4,
                    "id": "1",
                    "ts": "",
                    "channel_values": {},
                    "channel_versions": {},
                    "versions_seen": {},
                },  # type: ignore[typeddict-item]
                {},
                {},
            )
            assert memory.checkpointer.get_tuple({"configurable": {"thread_id": "t"}})
    finally:
        _redis_keys_gone(redis_url, prefix)


@pytest.mark.parametrize(
    ("template", "what"),
    [
        ("postgresql://ada:s3cret@127.0.0.1:{port}/db", "PostgreSQL"),
        ("redis://ada:s3cret@127.0.0.1:{port}/0", "Redis"),
        ("redis+cluster://:s3cret@127.0.0.1:{port}", "Redis"),
    ],
)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_unreachable_servers_are_one_line_errors_without_the_password(
    template: str, what: str, flavour: str
) -> None:
    url = template.format(port=closed_port())

    async def enter() -> None:
        async with from_url(url):
            pass

    with pytest.raises(MemoryConnectionError) as info:
        if flavour == "async":
            asyncio.run(enter())
        else:
            with from_url(url):
                pass
    text = str(info.value)
    assert text.startswith(f"cannot reach {what} at {redact(url)}: ")
    assert "***" in text and "s3cret" not in text and "\n" not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
