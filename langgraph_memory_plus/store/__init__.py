"""Stores (long-term memory, across threads): one core, a driver per backend.

Every store is a LangGraph ``BaseStore`` for ``graph.compile(store=...)``, and adds
optimistic concurrency (items carry a ``version``; ``put(..., expected_version=...)``),
``count`` and ``delete_namespace``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import ConditionalPutOp
from .filters import InvalidFilterError
from .values import InvalidValueError, VersionedItem, VersionedSearchItem

_BACKENDS = {  # imported on first use: each needs its driver (an extra)
    "AsyncPostgresStore": ".postgres",
    "PostgresStore": ".postgres",
    "AsyncRedisStore": ".redis",
    "RedisStore": ".redis",
    "AsyncSqliteStore": ".sqlite",
    "SqliteStore": ".sqlite",
}

if TYPE_CHECKING:
    from .postgres import AsyncPostgresStore, PostgresStore
    from .redis import AsyncRedisStore, RedisStore
    from .sqlite import AsyncSqliteStore, SqliteStore


def __getattr__(name: str) -> Any:
    module = _BACKENDS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncSqliteStore",
    "ConditionalPutOp",
    "InvalidFilterError",
    "InvalidValueError",
    "PostgresStore",
    "RedisStore",
    "SqliteStore",
    "VersionedItem",
    "VersionedSearchItem",
]
