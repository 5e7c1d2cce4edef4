"""Shared fixtures: real servers, one fresh database per test run, backends as parameters.

The storage tests talk to real PostgreSQL (and, later, Redis). When a server is missing,
a developer's run skips those tests with the reason; under CI (``CI`` set) the run fails
instead, so a green CI always means the storage tests ran.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pytest

PG_ADMIN_URL = os.environ.get("LGMP_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = bool(os.environ.get("CI"))


def _service_missing(what: str, error: BaseException) -> None:
    message = f"{what} is not reachable ({error.__class__.__name__}: {error})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it", pytrace=False)
    pytest.skip(f"{message}; start it to run the storage tests")


def _with_database(url: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(url, dbname=dbname)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database for this test run, dropped at the end."""
    dbname = f"lgmp_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        _service_missing(f"PostgreSQL at {PG_ADMIN_URL}", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield _with_database(PG_ADMIN_URL, dbname)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


SaverFactory = Callable[..., AbstractContextManager[Any]]
AsyncSaverFactory = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture(params=["postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a parameterized test runs on."""
    return str(request.param)


@pytest.fixture
def saver_factory(backend: str, request: pytest.FixtureRequest) -> SaverFactory:
    """``saver_factory(**options)`` opens a *new* sync saver on the same storage.

    Opening a second one while the first is closed is how tests model a process restart.
    """
    if backend == "postgres":
        from langgraph_memory_plus import PostgresSaver

        url = request.getfixturevalue("pg_url")

        @contextmanager
        def open_pg(**options: Any) -> Iterator[Any]:
            with PostgresSaver.from_conn_string(url, **options) as saver:
                saver.setup()
                yield saver

        return open_pg
    raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
def async_saver_factory(backend: str, request: pytest.FixtureRequest) -> AsyncSaverFactory:
    """``async_saver_factory(**options)`` opens a new async saver on the same storage."""
    from contextlib import asynccontextmanager

    if backend == "postgres":
        from langgraph_memory_plus import AsyncPostgresSaver

        url = request.getfixturevalue("pg_url")

        @asynccontextmanager
        async def open_pg(**options: Any) -> AsyncIterator[Any]:
            async with AsyncPostgresSaver.from_conn_string(url, **options) as saver:
                await saver.setup()
                yield saver

        return open_pg
    raise AssertionError(f"unknown backend {backend}")
