"""langgraph-memory-plus: production memory for LangGraph agents.

One entry point for every backend (PostgreSQL, Redis, SQLite)::

    from langgraph_memory_plus import from_url

    with from_url("postgresql://...") as memory:  # no URL: a local SQLite file
        graph = builder.compile(checkpointer=memory.checkpointer, store=memory.store)

or the backend classes directly (``PostgresSaver``, ``RedisStore``, ...).

Every name below is imported on first use, so ``import langgraph_memory_plus`` is cheap and
a backend's driver (psycopg, redis-py) is imported only when that backend is used; a
driver that is not installed is an ``ImportError`` naming the extra to install
(``pip install 'langgraph-memory-plus[postgres]'``).

Log records go to the ``langgraph_memory_plus`` logger and its children; the package adds
only a ``NullHandler``, so where they go is the application's choice.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

_EXPORTS = {
    "AsyncPostgresSaver": ".checkpoint.postgres",
    "AsyncPostgresStore": ".store.postgres",
    "AsyncRedisSaver": ".checkpoint.redis",
    "AsyncRedisStore": ".store.redis",
    "AsyncSqliteSaver": ".checkpoint.sqlite",
    "AsyncSqliteStore": ".store.sqlite",
    "AsyncMemory": ".url",
    "ConflictError": ".errors",
    "CorruptDataError": ".errors",
    "Encryption": ".encryption",
    "EncryptionError": ".encryption",
    "FenceHeldError": ".errors",
    "FenceOptions": ".checkpoint.fence",
    "FencedWriteError": ".errors",
    "InvalidConfigError": ".errors",
    "Lease": ".checkpoint.fence",
    "Memory": ".url",
    "MemoryConnectionError": ".errors",
    "MemoryPlusError": ".errors",
    "PostgresSaver": ".checkpoint.postgres",
    "PostgresStore": ".store.postgres",
    "PreferenceLearner": ".nodes",
    "PoolTimeoutError": ".errors",
    "ProfileInjector": ".nodes",
    "RedisSaver": ".checkpoint.redis",
    "RedisStore": ".store.redis",
    "Rule": ".nodes",
    "Scanner": ".nodes",
    "SetupRequiredError": ".errors",
    "Source": ".nodes",
    "SqlitePool": ".drivers.sqlite",
    "SqliteSaver": ".checkpoint.sqlite",
    "SqliteStore": ".store.sqlite",
    "SyncMemory": ".url",
    "Summarizer": ".messages",
    "TTLConfig": ".checkpoint.config",
    "Trimmer": ".messages",
    "TurnWindow": ".messages",
    "UrlOptions": ".url",
    "ValueTooLargeError": ".errors",
    "VersionedItem": ".store.values",
    "VersionedSearchItem": ".store.values",
    "create_memory_tools": ".nodes",
    "dedupe_messages": ".messages",
    "from_url": ".url",
    "merge_profile": ".messages",
    "window_messages": ".messages",
}

__all__ = [  # the names of _EXPORTS (a test checks they agree)
    "AsyncMemory",
    "AsyncPostgresSaver",
    "AsyncPostgresStore",
    "AsyncRedisSaver",
    "AsyncRedisStore",
    "AsyncSqliteSaver",
    "AsyncSqliteStore",
    "ConflictError",
    "CorruptDataError",
    "Encryption",
    "EncryptionError",
    "FenceHeldError",
    "FenceOptions",
    "FencedWriteError",
    "InvalidConfigError",
    "Lease",
    "Memory",
    "MemoryConnectionError",
    "MemoryPlusError",
    "PoolTimeoutError",
    "PostgresSaver",
    "PostgresStore",
    "PreferenceLearner",
    "ProfileInjector",
    "RedisSaver",
    "RedisStore",
    "Rule",
    "Scanner",
    "SetupRequiredError",
    "Source",
    "SqlitePool",
    "SqliteSaver",
    "SqliteStore",
    "Summarizer",
    "SyncMemory",
    "TTLConfig",
    "Trimmer",
    "TurnWindow",
    "UrlOptions",
    "ValueTooLargeError",
    "VersionedItem",
    "VersionedSearchItem",
    "create_memory_tools",
    "dedupe_messages",
    "from_url",
    "merge_profile",
    "window_messages",
]

if TYPE_CHECKING:  # what the lazy imports below resolve to, for type checkers and IDEs
    from .checkpoint.config import TTLConfig
    from .checkpoint.fence import FenceOptions, Lease
    from .checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from .checkpoint.redis import AsyncRedisSaver, RedisSaver
    from .checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
    from .drivers.sqlite import SqlitePool
    from .encryption import Encryption, EncryptionError
    from .errors import (
        ConflictError,
        CorruptDataError,
        FencedWriteError,
        FenceHeldError,
        InvalidConfigError,
        MemoryConnectionError,
        MemoryPlusError,
        PoolTimeoutError,
        SetupRequiredError,
        ValueTooLargeError,
    )
    from .messages import (
        Summarizer,
        Trimmer,
        TurnWindow,
        dedupe_messages,
        merge_profile,
        window_messages,
    )
    from .nodes import (
        PreferenceLearner,
        ProfileInjector,
        Rule,
        Scanner,
        Source,
        create_memory_tools,
    )
    from .store.postgres import AsyncPostgresStore, PostgresStore
    from .store.redis import AsyncRedisStore, RedisStore
    from .store.sqlite import AsyncSqliteStore, SqliteStore
    from .store.values import VersionedItem, VersionedSearchItem
    from .url import AsyncMemory, Memory, SyncMemory, UrlOptions, from_url


def __getattr__(name: str) -> Any:
    """Import ``name``'s module on first use (PEP 562) and keep the value."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
