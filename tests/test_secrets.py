"""Passwords never reach an error, a repr or a log line, whatever characters they hold.

A password with an unencoded ``/``, ``?`` or ``#`` moves the end of the URL's authority, so
``urlsplit`` and libpq read part of it as a port or host and quote it in their errors; an
unencoded ``%`` makes libpq quote it too. Every entry point is tried with passwords holding
each of ``/?#@:%`` and digits: ``from_url``, each class's ``from_conn_string``, a bad host,
a bad database, a bad option.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import langgraph_memory_plus as m
from langgraph_memory_plus.errors import InvalidConfigError, PoolTimeoutError
from langgraph_memory_plus.url import MemoryConnectionError, from_url, redact

SECRET = "S3cr3t"
PASSWORDS = [f"{SECRET}{c}x9" for c in "/?#@:%"] + [f"{SECRET}0123", f"12/{SECRET}"]
TEMPLATES = [
    "postgresql://app:{pw}@127.0.0.1:1/db",
    "postgresql://app:{pw}@127.0.0.1:1/db?sslmode=disable&keep_last=3",
    "redis://app:{pw}@127.0.0.1:1/0",
    "redis://:{pw}@127.0.0.1:1/abc",
    "redis+cluster://:{pw}@127.0.0.1:1",
    "rediss://app:{pw}@127.0.0.1:1/0?ttl=5",
    "sqlite://app:{pw}@host/x.db",
]


def leaks(text: str) -> bool:
    return SECRET in text


def assert_clean(exc: BaseException) -> None:
    """No password in the message, the cause or the context of ``exc``."""
    seen: BaseException | None = exc
    while seen is not None:
        assert not leaks(str(seen)) and not leaks(repr(seen)), repr(seen)
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("template", TEMPLATES)
def test_redact_masks_up_to_the_last_at(template: str, password: str) -> None:
    url = template.format(pw=password)
    assert not leaks(redact(url))
    try:
        memory = from_url(url)
    except InvalidConfigError as exc:
        assert_clean(exc)
        assert "\n" not in str(exc)
    else:
        assert not leaks(repr(memory)) and not leaks(memory.url)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("template", TEMPLATES[:5])
def test_entering_fails_without_the_password(
    template: str, password: str, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = template.format(pw=password)

    async def enter() -> None:
        async with from_url(url):
            pass

    with caplog.at_level(logging.DEBUG), pytest.raises(MemoryConnectionError) as info:
        try:
            if flavour == "async":
                asyncio.run(enter())
            else:
                with from_url(url):
                    pass
        except InvalidConfigError as exc:  # refused before connecting: as good
            assert_clean(exc)
            raise MemoryConnectionError("refused") from None
    assert_clean(info.value)
    assert not leaks(caplog.text)


def test_a_libpq_keyword_string_is_not_echoed() -> None:
    dsn = f"host=127.0.0.1 user=app password={SECRET}/x dbname=db"
    with pytest.raises(InvalidConfigError) as info:
        from_url(dsn)
    assert_clean(info.value)
    assert "password=***" in str(info.value)
    quoted = f"host=h password='{SECRET} x' dbname=db"
    assert not leaks(redact(quoted))


def test_unencoded_characters_are_an_error_that_says_how_to_encode() -> None:
    with pytest.raises(InvalidConfigError, match="percent-encode") as info:
        from_url(f"postgresql://app:{SECRET}/x@db.example/db")
    assert_clean(info.value)
    assert str(info.value).count("***") == 1
    assert "postgresql://app:***@db.example/db" in str(info.value)


PG_CLASSES = ["PostgresSaver", "PostgresStore", "AsyncPostgresSaver", "AsyncPostgresStore"]
REDIS_CLASSES = ["RedisSaver", "RedisStore", "AsyncRedisSaver", "AsyncRedisStore"]


async def _open(cls: Any, url: str) -> None:
    if cls.__name__.startswith("Async"):
        async with cls.from_conn_string(url):
            pass
    else:
        with cls.from_conn_string(url):
            pass


MISREAD = [pw for pw in PASSWORDS if pw[len(SECRET)] in "/?#@%" or "/" in pw]


@pytest.mark.parametrize("password", MISREAD)
@pytest.mark.parametrize("name", PG_CLASSES + REDIS_CLASSES)
def test_from_conn_string_fails_without_the_password(
    name: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Only URLs a parser misreads: they fail before any connection is tried."""
    cls = getattr(m, name)
    scheme = "postgresql" if "Postgres" in name else "redis"
    url = f"{scheme}://app:{password}@127.0.0.1:1/0"
    with caplog.at_level(logging.DEBUG), pytest.raises(InvalidConfigError) as info:
        asyncio.run(_open(cls, url))
    assert_clean(info.value)
    assert not leaks(caplog.text)


@pytest.mark.parametrize("name", REDIS_CLASSES)
def test_a_redis_database_must_be_a_number(name: str) -> None:
    with pytest.raises(InvalidConfigError, match="must be a number"):
        asyncio.run(_open(getattr(m, name), "redis://127.0.0.1:6379/abc"))
    with pytest.raises(InvalidConfigError, match="must be a number"):
        from_url(f"redis://:{SECRET}@127.0.0.1:6379/abc")
    with pytest.raises(InvalidConfigError, match="must be a number"):
        from_url("redis://127.0.0.1:6379?db=x")
    with pytest.raises(InvalidConfigError, match="only database 0"):
        from_url("redis+cluster://127.0.0.1:7000/3")
    assert from_url("redis://127.0.0.1:6379/12").backend == "redis"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_wrong_password_on_a_real_server(
    flavour: str, pg_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The servers reject the user or password; the errors and logs never show it."""
    import psycopg

    parts = psycopg.conninfo.conninfo_to_dict(pg_url)
    for password in PASSWORDS:
        from urllib.parse import quote

        pw = quote(password, safe="")
        for url in (
            f"postgresql://nobody:{pw}@{parts.get('host', '127.0.0.1')}:"
            f"{parts.get('port', 5432)}/{parts['dbname']}",
            f"postgresql://postgres:{pw}@127.0.0.1:{parts.get('port', 5432)}/no_such_db",
            redis_url.replace("redis://", f"redis://nobody:{pw}@"),
        ):
            with caplog.at_level(logging.DEBUG), pytest.raises(MemoryConnectionError) as info:
                if flavour == "sync":
                    with from_url(url):
                        pass
                else:

                    async def enter(url: str = url) -> None:
                        async with from_url(url):
                            pass

                    asyncio.run(enter())
            assert_clean(info.value)
            assert not leaks(caplog.text)


def test_reprs_show_no_password(redis_url: str) -> None:
    url = redis_url.replace("redis://", f"redis://:{SECRET}%2F@")
    memory = from_url(url)
    assert not leaks(repr(memory))
    client = m.RedisSaver  # noqa: F841  (the classes keep no URL of their own)
    from langgraph_memory_plus.drivers.redis import sync_client_from_url

    opened = sync_client_from_url(url)
    try:
        assert not leaks(repr(opened)) and not leaks(repr(opened.connection_pool))
        saver = m.RedisSaver(opened)
        assert not leaks(repr(saver))
    finally:
        opened.close()


# -- pool limits (item 5): bounded waits with an error naming the options ---------------


def test_a_full_redis_pool_waits_then_names_its_options(redis_url: str) -> None:
    with m.RedisSaver.from_conn_string(redis_url, pool_max_size=2, pool_timeout=0.2) as saver:
        pool = saver.client.connection_pool
        held = [pool.get_connection(), pool.get_connection()]
        try:
            with pytest.raises(PoolTimeoutError, match=r"pool_timeout=0\.2 .*pool_max_size=2"):
                saver.get_tuple({"configurable": {"thread_id": "t"}})
        finally:
            for conn in held:
                pool.release(conn)
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None


async def test_a_full_async_redis_pool_waits_then_names_its_options(redis_url: str) -> None:
    async with m.AsyncRedisSaver.from_conn_string(
        redis_url, pool_max_size=1, pool_timeout=0.2
    ) as saver:
        pool = saver.client.connection_pool
        held = await pool.get_connection()
        try:
            with pytest.raises(PoolTimeoutError, match="pool_timeout"):
                await saver.aget_tuple({"configurable": {"thread_id": "t"}})
        finally:
            await pool.release(held)
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None


async def test_a_full_async_cluster_gate_waits_then_names_its_options(
    redis_cluster_url: str,
) -> None:
    from langgraph_memory_plus.drivers.redis import _GATES

    async with m.AsyncRedisSaver.from_conn_string(
        redis_cluster_url, pool_max_size=1, pool_timeout=0.2
    ) as saver:
        gate = _GATES[saver.client][0]
        await gate.acquire()
        try:
            with pytest.raises(PoolTimeoutError, match="pool_timeout"):
                await saver.aget_tuple({"configurable": {"thread_id": "t"}})
        finally:
            gate.release()
        results = await asyncio.gather(
            *(saver.aget_tuple({"configurable": {"thread_id": f"t{i}"}}) for i in range(50))
        )
        assert results == [None] * 50


def test_pool_options_from_url() -> None:
    with pytest.raises(InvalidConfigError, match="pool_timeout"):
        from_url("redis://h/0?pool_timeout=-1")
    with pytest.raises(InvalidConfigError, match="does not apply"):
        from_url("postgresql://h/db", pool_timeout=3)  # psycopg's pool has its own
    assert from_url("sqlite:///x.db?pool_timeout=3").backend == "sqlite"
    assert from_url("redis://h/0?pool_timeout=2&pool_max_size=5").backend == "redis"
