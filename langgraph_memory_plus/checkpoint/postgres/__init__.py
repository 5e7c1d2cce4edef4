"""PostgreSQL checkpointers."""

from .saver import AsyncPostgresSaver, PostgresSaver

__all__ = ["AsyncPostgresSaver", "PostgresSaver"]
