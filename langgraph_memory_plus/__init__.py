"""langgraph-memory-plus: production memory for LangGraph agents.

Drop-in checkpointers for ``graph.compile(checkpointer=...)``::

    from langgraph_memory_plus import PostgresSaver

    with PostgresSaver.from_conn_string("postgresql://...") as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
"""

from .checkpoint.config import TTLConfig
from .checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
from .checkpoint.redis import AsyncRedisSaver, RedisSaver
from .errors import ConflictError, InvalidConfigError, MemoryPlusError, ValueTooLargeError
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

__all__ = [
    "AsyncPostgresSaver",
    "AsyncPostgresStore",
    "AsyncRedisSaver",
    "AsyncRedisStore",
    "ConflictError",
    "InvalidConfigError",
    "MemoryPlusError",
    "PostgresSaver",
    "PostgresStore",
    "PreferenceLearner",
    "ProfileInjector",
    "RedisSaver",
    "RedisStore",
    "Summarizer",
    "TTLConfig",
    "Trimmer",
    "TurnWindow",
    "ValueTooLargeError",
    "create_memory_tools",
    "dedupe_messages",
    "merge_profile",
    "window_messages",
]
__version__ = "0.1.0"
