"""SQLite stores: the embedded backend, a file and no server."""

from .store import AsyncSqliteStore, SqliteStore

__all__ = ["AsyncSqliteStore", "SqliteStore"]
