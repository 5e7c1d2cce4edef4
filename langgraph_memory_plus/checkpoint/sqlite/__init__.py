"""SQLite checkpointers: the embedded backend, a file and no server."""

from ...drivers.sqlite import SqlitePool
from .saver import AsyncSqliteSaver, SqliteSaver

__all__ = ["AsyncSqliteSaver", "SqlitePool", "SqliteSaver"]
