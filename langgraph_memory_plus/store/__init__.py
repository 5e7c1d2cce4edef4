"""Stores (long-term memory, across threads): one core, a driver per backend.

Every store is a LangGraph ``BaseStore`` for ``graph.compile(store=...)``, and adds
optimistic concurrency (items carry a ``version``; ``put(..., expected_version=...)``),
``count`` and ``delete_namespace``.
"""

from .base import ConditionalPutOp
from .filters import InvalidFilterError
from .postgres import AsyncPostgresStore, PostgresStore
from .redis import AsyncRedisStore, RedisStore
from .sqlite import AsyncSqliteStore, SqliteStore
from .values import InvalidValueError, VersionedItem, VersionedSearchItem

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
