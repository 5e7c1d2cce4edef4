"""Opening what a URL names: one of our backends (``from_url``) or one of LangGraph's savers.

LangGraph's own savers are named by a ``langgraph+`` scheme, so ``migrate`` can read a
database the official packages wrote:

- ``langgraph+postgresql://user@host/db`` (or ``langgraph+postgres://``):
  ``langgraph-checkpoint-postgres``'s ``PostgresSaver``, its tables in the connection's
  ``search_path``;
- ``langgraph+sqlite:///relative.db``, ``langgraph+sqlite:////absolute.db``:
  ``langgraph-checkpoint-sqlite``'s ``SqliteSaver``.

They are opened as they are: no ``setup()``, so nothing is created or migrated on a
source. Every other URL goes to :func:`~langgraph_memory_plus.from_url`, with ``setup``
off unless the command asks for it (``setup``, the target of ``migrate``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..drivers.connect import need
from ..drivers.sqlite import path_from_url
from ..drivers.urls import check_conninfo, check_port, check_userinfo
from ..errors import InvalidConfigError, MemoryConnectionError
from ..url import Memory, UrlOptions, default_url, from_url, redact
from .output import UNSUPPORTED, CliError

OFFICIAL = "langgraph+"


@dataclass
class Opened:
    """What a command works on."""

    url: str
    """The URL, password masked."""
    backend: str
    """postgres, redis, sqlite, memory, or langgraph-postgres / langgraph-sqlite."""
    saver: Any
    memory: Memory | None = None
    """Ours only: the ``from_url`` result (its store, options and target)."""

    @property
    def store(self) -> Any:
        if self.memory is None:
            raise CliError(f"{self.url} names a LangGraph saver: it has no store", UNSUPPORTED)
        return self.memory.store

    def option(self, name: str, default: Any = None) -> Any:
        return self.memory._options.get(name, default) if self.memory else default

    @property
    def target(self) -> str:
        """The driver's connection string or file path."""
        assert self.memory is not None
        return self.memory._target


def resolve(url: str | None) -> str:
    return url or default_url()


@contextmanager
def open_url(url: str | None, *, setup: bool = False) -> Iterator[Opened]:
    """Open ``url`` (``None``: ``LANGGRAPH_MEMORY_URL``, else the default SQLite file)."""
    url = resolve(url)
    scheme = url.partition(":")[0].lower()
    if scheme.startswith(OFFICIAL):
        with _official(url, scheme[len(OFFICIAL) :]) as opened:
            yield opened
        return
    options: UrlOptions = {} if "setup=" in url else {"setup": setup}
    with from_url(url, **options) as memory:
        yield Opened(memory.url, memory.backend, memory.checkpointer, memory)


@contextmanager
def _official(url: str, scheme: str) -> Iterator[Opened]:
    rest = url[len(OFFICIAL) :]
    shown = redact(url)
    if scheme in ("postgresql", "postgres"):
        with _official_postgres(rest, shown) as saver:
            yield Opened(shown, "langgraph-postgres", saver)
    elif scheme == "sqlite":
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError:
            raise CliError(
                f"{shown} needs langgraph-checkpoint-sqlite: pip install it", UNSUPPORTED
            ) from None
        path = path_from_url(rest)
        if path != ":memory:" and not os.path.exists(path):
            raise InvalidConfigError(f"no such SQLite file: {path} (from {shown})")
        with SqliteSaver.from_conn_string(path) as saver:
            yield Opened(shown, "langgraph-sqlite", saver)
    else:
        raise InvalidConfigError(
            f"unsupported URL scheme {OFFICIAL + scheme!r}: {shown}; LangGraph's savers are "
            "langgraph+postgresql:// and langgraph+sqlite:///file.db"
        )


@contextmanager
def _official_postgres(conninfo: str, shown: str) -> Iterator[Any]:
    """LangGraph's ``PostgresSaver`` on one connection, after the checks ``from_url`` makes:
    a password with unencoded ``/?#@%``, a bad port or unparsable text is a usage error
    (2), a refused login or an unreachable server a :class:`MemoryConnectionError` (3),
    and neither message quotes the password (the driver's text is scrubbed)."""
    check_userinfo(conninfo)
    check_port(conninfo)
    need("postgres")
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise CliError(
            f"{shown} needs langgraph-checkpoint-postgres: pip install it", UNSUPPORTED
        ) from None
    from psycopg import Connection, OperationalError
    from psycopg.rows import dict_row

    from ..drivers.postgres import _probe_kwargs, unreachable

    check_conninfo(conninfo)
    options = _probe_kwargs(conninfo, {"autocommit": True, "prepare_threshold": 0})
    failed: MemoryConnectionError | None = None
    try:  # what PostgresSaver.from_conn_string opens, with a connect timeout
        conn = Connection.connect(conninfo, row_factory=dict_row, **options)
    except OperationalError as exc:
        failed = unreachable(conninfo, exc)
    if failed is not None:  # raised outside the except block: no __context__ to print
        raise failed
    with conn:
        yield PostgresSaver(conn)
