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
from .store.postgres import AsyncPostgresStore, PostgresStore

__all__ = [
    "AsyncPostgresSaver",
    "AsyncPostgresStore",
    "AsyncRedisSaver",
    "ConflictError",
    "InvalidConfigError",
    "MemoryPlusError",
    "PostgresSaver",
    "PostgresStore",
    "RedisSaver",
    "Summarizer",
    "TTLConfig",
    "Trimmer",
    "TurnWindow",
    "ValueTooLargeError",
    "dedupe_messages",
    "merge_profile",
    "window_messages",
]
__version__ = "0.1.0"
