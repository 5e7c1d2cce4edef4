"""PostgreSQL stores."""

from .store import AsyncPostgresStore, PostgresStore

__all__ = ["AsyncPostgresStore", "PostgresStore"]
