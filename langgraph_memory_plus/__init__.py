"""langgraph-memory-plus: production memory for LangGraph agents.

One entry point for every backend (PostgreSQL, Redis, SQLite)::

    from langgraph_memory_plus import from_url

    with from_url("postgresql://...") as memory:  # no URL: a local SQLite file
        graph = builder.compile(checkpointer=memory.checkpointer, store=memory.store)

or the backend classes directly (``PostgresSaver``, ``RedisStore``, ...).
"""

from .checkpoint.config import TTLConfig
from .checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
from .checkpoint.redis import AsyncRedisSaver, RedisSaver
from .checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
from .errors import (
    ConflictError,
    CorruptDataError,
    InvalidConfigError,
    MemoryPlusError,
    PoolTimeoutError,
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
from .nodes import PreferenceLearner, ProfileInjector, create_memory_tools
from .store.postgres import AsyncPostgresStore, PostgresStore
from .store.redis import AsyncRedisStore, RedisStore
from .store.sqlite import AsyncSqliteStore, SqliteStore
from .url import Memory, MemoryConnectionError, from_url

__all__ = [
    "AsyncPostgresSaver",
    "AsyncPostgresStore",
    "AsyncRedisSaver",
    "AsyncRedisStore",
    "AsyncSqliteSaver",
    "AsyncSqliteStore",
    "ConflictError",
    "CorruptDataError",
    "InvalidConfigError",
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
    "SqliteSaver",
    "SqliteStore",
    "Summarizer",
    "TTLConfig",
    "Trimmer",
    "TurnWindow",
    "ValueTooLargeError",
    "create_memory_tools",
    "dedupe_messages",
    "from_url",
    "merge_profile",
    "window_messages",
]
__version__ = "0.1.0"
