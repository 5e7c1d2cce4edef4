"""First steps that just work: what a new user meets before their first graph runs.

- Opening on a server that cannot be reached, or that refuses the login, is a one-line
  ``MemoryConnectionError`` with the server's own reason and the password masked, on every
  entry point, instead of a 30 s wait for ``PoolTimeout``. Real servers: a closed loopback
  port, and a PostgreSQL and a Redis of this test run that require a password.
- SQLite sets itself up on first use; a missing table elsewhere is ``SetupRequiredError``.
- A misspelt option is an ``InvalidConfigError`` naming it and the valid ones, before
  anything connects; options type-check (``mypy --strict`` on a user's file).
- The package imports without its drivers, and a missing driver names its extra.

Each connection test runs under a 20 s guard that only catches a hang; how long a failure
takes is not asserted (speed is the benchmarks' business).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from backends import machine_program
from conftest import _service_missing, _stop_postgres, _unprivileged_user

import langgraph_memory_plus
from langgraph_memory_plus import (
    AsyncPostgresSaver,
    AsyncPostgresStore,
    AsyncRedisSaver,
    AsyncRedisStore,
    AsyncSqliteSaver,
    AsyncSqliteStore,
    InvalidConfigError,
    MemoryConnectionError,
    PostgresSaver,
    PostgresStore,
    RedisSaver,
    RedisStore,
    SetupRequiredError,
    SqlitePool,
    SqliteSaver,
    SqliteStore,
    from_url,
)
from langgraph_memory_plus.url import OPTIONS, UrlOptions

ROOT = Path(__file__).resolve().parent.parent
HANG_GUARD = 20.0  # seconds; only a hang gets anywhere near it
SECRET = "p/?#@:%w"  # the characters a password masker most often gets wrong
QUOTED = quote(SECRET, safe="")
CONFIG = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}

SYNC_PG = [PostgresSaver, PostgresStore]
ASYNC_PG = [AsyncPostgresSaver, AsyncPostgresStore]
SYNC_REDIS = [RedisSaver, RedisStore]
ASYNC_REDIS = [AsyncRedisSaver, AsyncRedisStore]


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def guarded(fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` on a thread; what it raised. Fails the test if it is still running
    after :data:`HANG_GUARD` seconds (a hang, not a slow failure)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    if thread.is_alive():
        pytest.fail(f"still waiting after {HANG_GUARD} s: a hang")
    return outcome[0]


def guarded_async(make: Callable[[], Awaitable[Any]]) -> BaseException | None:
    async def run() -> None:
        await asyncio.wait_for(make(), HANG_GUARD)

    return guarded(lambda: asyncio.run(run()))


def open_sync(cls: Any, url: str, **options: Any) -> Callable[[], None]:
    def enter() -> None:
        with cls.from_conn_string(url, **options):
            pass

    return enter


def open_async(cls: Any, url: str, **options: Any) -> Callable[[], Awaitable[None]]:
    async def enter() -> None:
        async with cls.from_conn_string(url, **options):
            pass

    return enter


def attempt(cls: Any, url: str, **options: Any) -> BaseException | None:
    """Enter ``cls.from_conn_string(url, **options)`` (``async with`` for an async class)
    under the hang guard; what it raised."""
    if cls.__name__.startswith("Async"):
        return guarded_async(open_async(cls, url, **options))
    return guarded(open_sync(cls, url, **options))


def assert_unreachable(error: BaseException | None, what: str, reason: str) -> str:
    """A one-line ``MemoryConnectionError`` with the server's reason, no password."""
    assert isinstance(error, MemoryConnectionError), repr(error)
    text = str(error)
    assert text.startswith(f"cannot reach {what} at "), text
    assert reason in text, text
    assert "\n" not in text
    assert SECRET not in text and QUOTED not in text and "***" in text, text
    return text


# --------------------------------------------------------------------------------------------
# Servers of this test run that require a password
# --------------------------------------------------------------------------------------------


def _postgres_bin(tool: str) -> str | None:
    try:
        bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        bindir = ""
    found = os.path.join(bindir, tool)
    return found if bindir and os.access(found, os.X_OK) else shutil.which(tool)


@pytest.fixture(scope="module")
def password_pg_port() -> Iterator[int]:
    """A PostgreSQL on a loopback port whose role ``app`` logs in with a SCRAM password
    (``right-password``): the machine's own binaries, a temporary cluster, stopped after."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _service_missing("PostgreSQL's initdb/pg_ctl (for a password server)", FileNotFoundError())
    assert initdb and pg_ctl
    workdir = tempfile.mkdtemp(prefix="lgmp-pgauth-")
    data = os.path.join(workdir, "data")
    ids: dict[str, Any] = {}
    started = False
    try:
        pwfile = os.path.join(workdir, "pw")
        Path(pwfile).write_text("right-password\n")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            entry = _unprivileged_user()
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
            for path in (workdir, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)

        def run(*args: str) -> None:
            subprocess.run(
                args, check=True, capture_output=True, text=True, cwd=workdir, timeout=60, **ids
            )

        run(initdb, "-D", data, "-U", "app", "--auth=scram-sha-256", f"--pwfile={pwfile}",
            "-E", "UTF8", "--locale=C", "--no-sync")  # fmt: skip
        port = closed_port()
        settings = f"-c listen_addresses=127.0.0.1 -p {port} -k {workdir} -c fsync=off"
        run(pg_ctl, "-D", data, "-l", os.path.join(workdir, "log"), "-w", "-t", "30",
            "-o", settings, "start")  # fmt: skip
        started = True
        yield port
    except (OSError, KeyError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        _service_missing(f"a PostgreSQL with password login ({detail.strip()})", exc)
    finally:
        if started:
            _stop_postgres(pg_ctl, data, ids)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def password_redis_port() -> Iterator[int]:
    """A Redis on a loopback port that requires the password ``right-password``."""
    try:
        server, cli = machine_program("redis-server"), machine_program("redis-cli")
    except FileNotFoundError as error:
        _service_missing("redis-server (for a password server)", error)
    port = closed_port()
    workdir = tempfile.mkdtemp(prefix="lgmp-redisauth-")
    try:
        subprocess.run(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--requirepass",
             "right-password", "--save", "", "--appendonly", "no", "--daemonize", "yes",
             "--dir", workdir, "--logfile", os.path.join(workdir, "log")],
            check=True,
        )  # fmt: skip
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            threading.Event().wait(0.05)
        yield port
    finally:
        subprocess.run(
            [cli, "-p", str(port), "-a", "right-password", "--no-auth-warning", "shutdown",
             "nosave"],
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Unreachable servers and refused logins: every entry point, one line, the server's reason
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", SYNC_PG + ASYNC_PG, ids=lambda c: c.__name__)
def test_postgres_from_conn_string_on_a_closed_port(cls: Any) -> None:
    url = f"postgresql://app:{QUOTED}@127.0.0.1:{closed_port()}/db"
    error = attempt(cls, url)
    assert_unreachable(error, "PostgreSQL", "Connection refused")
    assert error is not None and error.__cause__ is None  # no driver text with the URL


@pytest.mark.parametrize("cls", SYNC_PG + ASYNC_PG, ids=lambda c: c.__name__)
def test_postgres_from_conn_string_with_a_wrong_password(cls: Any, password_pg_port: int) -> None:
    url = f"postgresql://app:{QUOTED}@127.0.0.1:{password_pg_port}/postgres"
    error = attempt(cls, url)
    assert_unreachable(error, "PostgreSQL", 'password authentication failed for user "app"')


def test_the_right_password_opens_the_password_server(password_pg_port: int) -> None:
    """The refusals above are about the password: the right one gets in."""
    url = f"postgresql://app:right-password@127.0.0.1:{password_pg_port}/postgres"
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        assert saver.get_tuple(CONFIG) is None


def test_postgres_keyword_conninfo_never_shows_the_password() -> None:
    conninfo = f"host=127.0.0.1 port={closed_port()} user=app password='{SECRET}' dbname=db"
    error = guarded(open_sync(PostgresSaver, conninfo))
    text = assert_unreachable(error, "PostgreSQL", "Connection refused")
    assert "password=*** " in text


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("wrong", ["port", "password"])
def test_a_pool_of_your_own_that_cannot_connect_fails_with_the_reason(
    flavour: str, wrong: str, password_pg_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PostgresSaver(pool)``: the first call reports the server's reason within seconds,
    not ``PoolTimeout`` after the pool's 30 s.

    The first borrow waits ``CONNECT_TIMEOUT`` (5 s) before asking the server itself; 1 s
    here takes the same path, and the pool's 30 s would still trip ``HANG_GUARD``."""
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    monkeypatch.setattr("langgraph_memory_plus.drivers.postgres.CONNECT_TIMEOUT", 1)
    port = closed_port() if wrong == "port" else password_pg_port
    url = f"postgresql://app:{QUOTED}@127.0.0.1:{port}/postgres"
    reason = "Connection refused" if wrong == "port" else "password authentication failed"
    if flavour == "sync":

        def call() -> None:
            with ConnectionPool(url, open=False) as pool:
                pool.open(wait=False)
                PostgresSaver(pool).get_tuple(CONFIG)

        error = guarded(call)
    else:

        async def acall() -> None:
            async with AsyncConnectionPool(url, open=False) as pool:
                await pool.open(wait=False)
                await AsyncPostgresSaver(pool).aget_tuple(CONFIG)

        error = guarded_async(acall)
    assert_unreachable(error, "PostgreSQL", reason)


async def _first_call(instance: Any) -> None:
    if "Saver" in type(instance).__name__:
        result = instance.aget_tuple(CONFIG) if type(instance) is AsyncRedisSaver else None
        if result is None:
            instance.get_tuple(CONFIG)
    else:
        result = instance.aget(("a",), "k") if type(instance) is AsyncRedisStore else None
        if result is None:
            instance.get(("a",), "k")
    if result is not None:
        await result


@pytest.mark.parametrize("cls", SYNC_REDIS + ASYNC_REDIS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("wrong", ["port", "password"])
def test_a_redis_client_of_your_own_that_cannot_connect_fails_with_the_reason(
    cls: Any, wrong: str, password_redis_port: int
) -> None:
    """``RedisSaver(client)``: the first call is the one-line error ``from_conn_string``
    gives (where, password masked, and why), not redis-py's own; later calls are as before."""
    import redis
    import redis.asyncio

    port = closed_port() if wrong == "port" else password_redis_port
    make = redis.asyncio.Redis if cls in ASYNC_REDIS else redis.Redis
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    retry = (AsyncRetry if cls in ASYNC_REDIS else Retry)(NoBackoff(), 0)
    client = make(
        host="127.0.0.1",
        port=port,
        password=SECRET,
        socket_connect_timeout=2,
        retry=retry,  # redis-py's default retries only make the test slow
    )
    reason = "Error 111 connecting to 127.0.0.1" if wrong == "port" else "invalid username-password"

    async def main() -> None:
        instance = cls(client, key_prefix=f"lgmp-first-{uuid.uuid4().hex}")
        try:
            await _first_call(instance)
        finally:
            closing = client.aclose() if cls in ASYNC_REDIS else client.close()
            if closing is not None:
                await closing

    error = guarded(lambda: asyncio.run(main()))
    text = assert_unreachable(error, "Redis", reason)
    assert f"127.0.0.1:{port}/0" in text


def test_a_redis_client_of_your_own_that_works_is_left_as_it_is(password_redis_port: int) -> None:
    import redis

    client = redis.Redis(port=password_redis_port, password="right-password")
    saver = RedisSaver(client, key_prefix=f"lgmp-first-{uuid.uuid4().hex}")
    assert saver.get_tuple(CONFIG) is None
    client.config_set("requirepass", "changed")  # a later failure is redis-py's, untouched
    try:
        client.connection_pool.disconnect()
        with pytest.raises(redis.AuthenticationError):
            saver.get_tuple(CONFIG)
    finally:
        redis.Redis(port=password_redis_port, password="changed").config_set(
            "requirepass", "right-password"
        )
        client.close()


@pytest.mark.parametrize("cls", SYNC_REDIS + ASYNC_REDIS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_redis_from_conn_string_on_a_closed_port(cls: Any, scheme: str) -> None:
    url = f"{scheme}://:{QUOTED}@127.0.0.1:{closed_port()}"
    error = attempt(cls, url)
    assert_unreachable(error, "Redis", "Error 111 connecting to 127.0.0.1")  # ECONNREFUSED


@pytest.mark.parametrize("cls", SYNC_REDIS + ASYNC_REDIS, ids=lambda c: c.__name__)
def test_redis_from_conn_string_with_a_wrong_password(cls: Any, password_redis_port: int) -> None:
    url = f"redis://:{QUOTED}@127.0.0.1:{password_redis_port}/0"
    error = attempt(cls, url)
    assert_unreachable(error, "Redis", "invalid username-password pair")


def test_redis_without_the_password_it_requires(password_redis_port: int) -> None:
    error = guarded(open_sync(RedisSaver, f"redis://127.0.0.1:{password_redis_port}/0"))
    assert isinstance(error, MemoryConnectionError)
    assert "password required" in str(error) and "HELLO" not in str(error), str(error)
    assert "\n" not in str(error)


def test_the_right_redis_password_gets_in(password_redis_port: int) -> None:
    url = f"redis://:right-password@127.0.0.1:{password_redis_port}/0"
    with RedisSaver.from_conn_string(url, key_prefix=f"lgmp-first-{uuid.uuid4().hex}") as saver:
        assert saver.get_tuple(CONFIG) is None


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_from_url_with_a_wrong_password(
    flavour: str, backend: str, password_pg_port: int, password_redis_port: int
) -> None:
    if backend == "postgres":
        url = f"postgresql://app:{QUOTED}@127.0.0.1:{password_pg_port}/postgres"
        what, reason = "PostgreSQL", "password authentication failed"
    else:
        url = f"redis://:{QUOTED}@127.0.0.1:{password_redis_port}/0"
        what, reason = "Redis", "invalid username-password pair"

    def enter() -> None:
        with from_url(url):
            pass

    async def aenter() -> None:
        async with from_url(url):
            pass

    error = guarded(enter) if flavour == "sync" else guarded_async(aenter)
    assert_unreachable(error, what, reason)


# --------------------------------------------------------------------------------------------
# Setting up: SQLite on first use; elsewhere a missing table says to run setup()
# --------------------------------------------------------------------------------------------


def test_sqlite_sets_itself_up_on_first_use(tmp_path: Path) -> None:
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    builder: StateGraph[State] = StateGraph(State)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    path = tmp_path / "memory.db"
    with SqliteSaver.from_conn_string(path) as saver, SqliteStore.from_conn_string(path) as store:
        graph = builder.compile(checkpointer=saver, store=store)  # no setup() anywhere
        assert graph.invoke({"n": 1}, CONFIG) == {"n": 2}
        store.put(("users", "u1"), "profile", {"name": "Ada"})
    with SqliteSaver.from_conn_string(path) as saver, SqliteStore.from_conn_string(path) as store:
        assert builder.compile(checkpointer=saver).get_state(CONFIG).values == {"n": 2}
        item = store.get(("users", "u1"), "profile")
        assert item is not None and item.value == {"name": "Ada"}


def test_sqlite_sets_up_a_connection_of_your_own_and_the_async_classes(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "own.db", check_same_thread=False, isolation_level=None)
    try:
        SqliteStore(conn).put(("a",), "k", {"v": 1})
        assert SqliteSaver(conn).get_tuple(CONFIG) is None
    finally:
        conn.close()

    async def main() -> None:
        async with AsyncSqliteStore.from_conn_string(tmp_path / "async.db") as store:
            await store.aput(("a",), "k", {"v": 2})
            item = await store.aget(("a",), "k")
            assert item is not None and item.version >= 1
        async with AsyncSqliteSaver.from_conn_string(tmp_path / "async.db") as saver:
            assert await saver.aget_tuple(CONFIG) is None

    asyncio.run(main())


def test_sqlite_a_table_dropped_behind_its_back_says_run_setup(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SqliteStore.from_conn_string(path) as store:
        store.put(("a",), "k", {"v": 1})
        tables = [
            name
            for (name,) in sqlite3.connect(path).execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'lgmp_store%'"
            )
        ]
        assert tables
        with contextlib.closing(sqlite3.connect(path)) as other:
            for name in tables:
                other.execute(f'DROP TABLE "{name}"')
            other.commit()
        with pytest.raises(SetupRequiredError, match=r"run SqliteStore\.setup\(\)") as info:
            store.get(("a",), "k")
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)


@pytest.mark.storage
@pytest.mark.parametrize("cls", SYNC_PG, ids=lambda c: c.__name__)
def test_postgres_without_setup_says_run_setup(cls: Any, pg_url: str) -> None:
    import psycopg

    schema = f"lgmp_nosetup_{uuid.uuid4().hex[:8]}"
    with cls.from_conn_string(pg_url, schema=schema) as instance:
        with pytest.raises(SetupRequiredError, match=rf"run {cls.__name__}\.setup\(\)") as info:
            if cls is PostgresSaver:
                instance.get_tuple(CONFIG)
            else:
                instance.get(("a",), "k")
        assert isinstance(info.value.__cause__, psycopg.errors.UndefinedTable)
        assert "\n" not in str(info.value)
        instance.setup()  # and then it works
        found = instance.get_tuple(CONFIG) if cls is PostgresSaver else instance.get(("a",), "k")
        assert found is None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.mark.storage
def test_postgres_async_without_setup_says_run_setup(pg_url: str) -> None:
    async def main() -> None:
        schema = f"lgmp_nosetup_{uuid.uuid4().hex[:8]}"
        async with AsyncPostgresStore.from_conn_string(pg_url, schema=schema) as store:
            with pytest.raises(SetupRequiredError, match=r"AsyncPostgresStore\.setup\(\)"):
                await store.aget(("a",), "k")
        async with AsyncPostgresSaver.from_conn_string(pg_url, schema=schema) as saver:
            with pytest.raises(SetupRequiredError, match=r"AsyncPostgresSaver\.setup\(\)"):
                await saver.aget_tuple(CONFIG)

    asyncio.run(main())


@pytest.mark.storage
@pytest.mark.parametrize(
    "cls", [*SYNC_PG, AsyncPostgresSaver, AsyncPostgresStore], ids=lambda c: c.__name__
)
def test_postgres_on_an_older_schema_says_run_setup(cls: Any, pg_url: str) -> None:
    """Every table and column there, but the last migration missing (an older release's
    ``setup()``): the first call refuses with the versions, before writing anything."""
    import psycopg

    schema = f"lgmp_oldschema_{uuid.uuid4().hex[:8]}"
    table = "lgmp_checkpoint_migrations" if "Saver" in cls.__name__ else "lgmp_store_migrations"

    def call(instance: Any) -> Any:
        if "Saver" in cls.__name__:
            return (
                instance.aget_tuple(CONFIG)
                if cls is AsyncPostgresSaver
                else instance.get_tuple(CONFIG)
            )
        return (
            instance.aget(("a",), "k") if cls is AsyncPostgresStore else instance.get(("a",), "k")
        )

    async def main() -> None:
        is_async = cls.__name__.startswith("Async")

        async def run(result: Any) -> Any:
            return (await result) if is_async else result

        async def opened(work: Callable[[Any], Any]) -> None:
            if is_async:
                async with cls.from_conn_string(pg_url, schema=schema) as instance:
                    await work(instance)
            else:
                with cls.from_conn_string(pg_url, schema=schema) as instance:
                    await work(instance)

        async def set_up(instance: Any) -> None:
            await run(instance.setup())

        await opened(set_up)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            latest = conn.execute(f'SELECT max(v) FROM "{schema}".{table}').fetchone()[0]
            conn.execute(f'DELETE FROM "{schema}".{table} WHERE v = %s', (latest,))

        async def refused_then_migrated(instance: Any) -> None:
            with pytest.raises(SetupRequiredError, match=rf"run {cls.__name__}\.setup\(\)") as info:
                await run(call(instance))
            text = str(info.value)
            at = f"schema version {latest - 1}" if latest else "no recorded schema version"
            assert f"are at {at}," in text and f"needs {latest};" in text
            await run(instance.setup())  # migrates the one missing version; then it works
            assert await run(call(instance)) is None

        await opened(refused_then_migrated)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert conn.execute(f'SELECT max(v) FROM "{schema}".{table}').fetchone()[0] == latest
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')

    asyncio.run(main())


# --------------------------------------------------------------------------------------------
# Options: a typo is named, with the valid ones, before anything connects
# --------------------------------------------------------------------------------------------


UNREACHABLE_URLS = {
    "postgres": "postgresql://app:pw@127.0.0.1:{port}/db",
    "redis": "redis://127.0.0.1:{port}/0",
}
EVERY_CLASS = [
    (PostgresSaver, "postgres"),
    (AsyncPostgresSaver, "postgres"),
    (PostgresStore, "postgres"),
    (AsyncPostgresStore, "postgres"),
    (RedisSaver, "redis"),
    (AsyncRedisSaver, "redis"),
    (RedisStore, "redis"),
    (AsyncRedisStore, "redis"),
    (SqliteSaver, "sqlite"),
    (AsyncSqliteSaver, "sqlite"),
    (SqliteStore, "sqlite"),
    (AsyncSqliteStore, "sqlite"),
]


@pytest.mark.parametrize(("cls", "backend"), EVERY_CLASS, ids=lambda c: getattr(c, "__name__", c))
def test_a_misspelt_from_conn_string_option_is_named_before_connecting(
    cls: Any, backend: str, tmp_path: Path
) -> None:
    typo, meant = ("keeplast", "keep_last") if "Saver" in cls.__name__ else ("tll", "ttl")
    url = UNREACHABLE_URLS.get(backend, str(tmp_path / "x.db")).format(port=closed_port())
    error = attempt(cls, url, **{typo: 3})
    assert isinstance(error, InvalidConfigError), repr(error)  # not "cannot reach"
    text = str(error)
    assert text.startswith(f"{cls.__name__}.from_conn_string got an unknown option {typo!r}")
    assert f"did you mean {meant!r}" in text and "its options are" in text
    assert "_" + backend.capitalize() not in text  # no private class in sight


def test_a_misspelt_constructor_option_names_the_public_class(tmp_path: Path) -> None:
    import redis

    with SqlitePool(tmp_path / "x.db") as pool:
        with pytest.raises(InvalidConfigError, match=r"^SqliteSaver got an unknown option"):
            SqliteSaver(pool, keeplast=2)  # type: ignore[call-arg]
        with pytest.raises(InvalidConfigError, match=r"its options are index, ttl"):
            SqliteStore(pool, indx={})  # type: ignore[call-arg]
    client = redis.Redis(port=closed_port())  # constructing connects to nothing
    with pytest.raises(InvalidConfigError, match=r"'shard_depth'"):
        RedisStore(client, shard_dpth=2)  # type: ignore[call-arg]
    from psycopg_pool import ConnectionPool

    pool_ = ConnectionPool("postgresql://127.0.0.1:1/db", open=False)
    with pytest.raises(InvalidConfigError, match=r"^PostgresSaver got an unknown option 'shema'"):
        PostgresSaver(pool_, shema="x")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql://app:pw@127.0.0.1:{port}/db?sslmod=require", "sslmod"),
        ("redis://127.0.0.1:{port}/0?socket_timout=1", "socket_timout"),
        ("redis+cluster://127.0.0.1:{port}?colour=red", "colour"),
    ],
)
def test_an_unknown_url_parameter_is_named_not_a_connection_error(url: str, name: str) -> None:
    url = url.format(port=closed_port())
    with pytest.raises(InvalidConfigError, match=rf"unknown option {name!r}") as info:
        from_url(url)
    assert "sslmode" in str(info.value) or "socket_timeout" in str(info.value)
    cls = PostgresSaver if url.startswith("postgresql") else RedisSaver
    error = guarded(open_sync(cls, url))
    assert isinstance(error, InvalidConfigError), repr(error)
    assert repr(name)[1:-1] in str(error)


@pytest.mark.storage
def test_driver_parameters_still_pass_through(pg_url: str) -> None:
    import psycopg

    url = psycopg.conninfo.make_conninfo(pg_url, application_name="lgmp-first-steps")
    with PostgresSaver.from_conn_string(url) as saver:
        pool = saver.conn  # the pool's connections carry the parameter
        with pool.connection() as conn:  # type: ignore[union-attr]
            name = conn.execute("SHOW application_name").fetchone()
        assert name == ("lgmp-first-steps",)


def test_from_url_typed_options_are_its_options() -> None:
    assert set(UrlOptions.__annotations__) == set(OPTIONS)


# --------------------------------------------------------------------------------------------
# Types a user's code sees, and what the package imports
# --------------------------------------------------------------------------------------------


USER_CODE = """
    import asyncio
    from collections.abc import Callable
    from concurrent.futures import Future

    from langgraph_memory_plus.observability import MemoryEvent
    from langgraph_memory_plus import (
        PostgresSaver, SqliteSaver, SqliteStore, VersionedItem, from_url,
    )

    def read(store: SqliteStore) -> int:
        item = store.get(("users", "u1"), "profile")
        assert item is not None
        store.put(("users", "u1"), "profile", {**item.value}, expected_version=item.version)
        typed: VersionedItem = item
        return typed.version

    async def aread(store: SqliteStore) -> int:
        item = await store.aget(("users", "u1"), "profile")
        return 0 if item is None else item.version

    def open_both() -> None:
        with SqliteSaver.from_conn_string("m.db", keep_last=3, busy_timeout=5.0) as saver:
            saver.get_tuple({"configurable": {"thread_id": "t"}})
        with PostgresSaver.from_conn_string("postgresql://h/db", pool_max_size=4) as pg:
            pg.setup()
        with from_url("sqlite:///m.db", ttl=60, keep_last=2) as memory:
            memory.checkpointer

    def day_two(log: Callable[[MemoryEvent], None]) -> int:
        with from_url("sqlite:///m.db", checkpoint_ttl=10080, listeners=[log]) as memory:
            found = memory.checkpointer.threads.search(metadata={"user_id": "u1"}, limit=10)
            memory.checkpointer.threads.count(metadata={"user_id": "u1"})
            swept: int = memory.checkpointer.sweep_expired()
            sweeper: Future[None] = memory.store.start_ttl_sweeper()
            sweeper.cancel()
            memory.store.stop_ttl_sweeper()
            return swept + len(found)

    async def aday_two() -> int:
        async with from_url("sqlite:///m.db", store_ttl=60) as memory:
            found = await memory.checkpointer.threads.asearch(limit=10)
            task: asyncio.Future[None] = await memory.store.start_ttl_sweeper()
            task.cancel()
            await memory.store.stop_ttl_sweeper()
            return await memory.checkpointer.asweep_expired() + len(found)
"""
USER_TYPOS = """
    from langgraph_memory_plus import SqliteSaver, from_url

    with SqliteSaver.from_conn_string("m.db", keeplast=3) as saver:
        pass
    from_url("sqlite:///m.db", tll=60)
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    user = tmp_path / "user_code.py"
    user.write_text(textwrap.dedent(code))
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout, not an installed copy
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(user)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip


def test_user_code_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    result = _mypy(tmp_path, USER_CODE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_flags_a_misspelt_option(tmp_path: Path) -> None:
    result = _mypy(tmp_path, USER_TYPOS)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"keeplast"' in result.stdout and '"tll"' in result.stdout, result.stdout


def test_every_public_name_imports_and_is_listed() -> None:
    exports = langgraph_memory_plus._EXPORTS  # type: ignore[attr-defined]
    assert sorted(langgraph_memory_plus.__all__) == sorted(exports)
    for name in langgraph_memory_plus.__all__:
        assert getattr(langgraph_memory_plus, name) is not None
    assert set(langgraph_memory_plus.__all__) <= set(dir(langgraph_memory_plus))
    with pytest.raises(AttributeError):
        langgraph_memory_plus.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_importing_the_package_and_sqlite_imports_no_driver() -> None:
    result = _python(
        """
        import sys
        import langgraph_memory_plus
        from langgraph_memory_plus import SqliteSaver, SqliteStore, from_url, VersionedItem
        with from_url("sqlite://") as memory:
            memory.store.put(("a",), "k", {"v": 1})
        print(sorted(m for m in ("psycopg", "psycopg_pool", "redis") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("blocked", "name", "extra"),
    [
        ("psycopg", "PostgresSaver", "postgres"),
        ("psycopg_pool", "AsyncPostgresStore", "postgres"),
        ("redis", "RedisStore", "redis"),
    ],
)
def test_a_missing_driver_names_its_extra(blocked: str, name: str, extra: str) -> None:
    result = _python(
        f"""
        import sys
        sys.modules[{blocked!r}] = None  # as if it were not installed
        try:
            from langgraph_memory_plus import {name}
        except ImportError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert f"pip install 'langgraph-memory-plus[{extra}]'" in result.stdout, result.stdout
    assert repr(blocked) in result.stdout


def test_from_url_without_the_driver_names_the_extra() -> None:
    result = _python(
        """
        import sys
        sys.modules["psycopg"] = None
        from langgraph_memory_plus import from_url
        try:
            from_url("postgresql://h/db")
        except ImportError as exc:
            print(exc)
        """
    )
    assert "langgraph-memory-plus[postgres]" in result.stdout, result.stdout + result.stderr


def test_the_package_logger_has_a_null_handler() -> None:
    import logging

    handlers = logging.getLogger("langgraph_memory_plus").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
