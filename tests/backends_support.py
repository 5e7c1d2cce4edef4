"""Opening a saver or a store on any backend, each test in a space of its own.

For the tests that run the same scenario on every backend (``BACKENDS`` in conftest):
PostgreSQL gets a fresh schema, Redis (single node and cluster) a fresh key prefix, SQLite
a file in the test's ``tmp_path``. ``space.where`` says which, for tests that then reach
into the storage directly.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Space:
    backend: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)


def space_for(backend: str, request: pytest.FixtureRequest) -> Space:
    name = f"t{uuid.uuid4().hex[:10]}"
    if backend == "postgres":
        return Space(backend, request.getfixturevalue("pg_url"), {"schema": name})
    if backend == "redis":
        prefix = f"{request.getfixturevalue('redis_prefix')}-{name}"
        return Space(backend, request.getfixturevalue("redis_url"), {"key_prefix": prefix})
    if backend == "redis-cluster":
        url = request.getfixturevalue("redis_cluster_url")
        return Space(backend, url, {"key_prefix": f"lgmp-test-{name}"})
    if backend == "sqlite":
        return Space(backend, str(request.getfixturevalue("tmp_path") / f"{name}.db"))
    raise AssertionError(backend)


def _classes(backend: str, is_async: bool) -> tuple[Any, Any]:
    import langgraph_memory_plus as m

    base = {"postgres": "Postgres", "sqlite": "Sqlite"}.get(backend, "Redis")
    prefix = "Async" if is_async else ""
    return getattr(m, f"{prefix}{base}Saver"), getattr(m, f"{prefix}{base}Store")


@contextmanager
def open_sync(space: Space, kind: str, **options: Any) -> Iterator[Any]:
    """A blocking saver (``kind="saver"``) or store on ``space``, set up."""
    cls = _classes(space.backend, False)[kind == "store"]
    with cls.from_conn_string(space.url, **{**space.options, **options}) as obj:
        obj.setup()
        yield obj


@asynccontextmanager
async def open_async(space: Space, kind: str, **options: Any) -> AsyncIterator[Any]:
    """An async saver or store on ``space``, set up."""
    cls = _classes(space.backend, True)[kind == "store"]
    async with cls.from_conn_string(space.url, **{**space.options, **options}) as obj:
        await obj.setup()
        yield obj
