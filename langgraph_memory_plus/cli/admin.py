"""Admin reads of our own storage: server facts, sizes, the biggest threads, health checks.

The Python API answers questions about one thread; an operator also asks about all of
them ("what takes the space?", "is this server set up safely?"). Those answers come from
the backend's own catalogue: SQL over our tables on PostgreSQL and SQLite, ``SCAN`` and
``MEMORY USAGE`` in bounded batches on Redis (never ``KEYS``). Read only.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

from .opening import Opened
from .output import UNSUPPORTED, CliError

SCAN_COUNT = 500  # keys per SCAN call and per pipeline of MEMORY USAGE
COMPONENTS = {  # bookkeeping table -> the migrations of this package
    "lgmp_checkpoint_migrations": "checkpoint",
    "lgmp_store_migrations": "store",
}


def latest_versions(backend: str) -> dict[str, int]:
    """The schema version each component has with this package (each backend's classes
    imported here: a SQLite-only install has no PostgreSQL driver)."""
    if backend == "postgres":
        from ..checkpoint.postgres import PostgresSaver
        from ..store.postgres import PostgresStore

        return {"checkpoint": PostgresSaver.schema_version, "store": PostgresStore.schema_version}
    from ..checkpoint.sqlite import SqliteSaver
    from ..store.sqlite import SqliteStore

    return {"checkpoint": SqliteSaver.schema_version, "store": SqliteStore.schema_version}


# -- SQL backends --------------------------------------------------------------------------


class _Sql:
    """A read-only connection to our tables, PostgreSQL or SQLite alike."""

    def __init__(self, opened: Opened) -> None:
        self.opened = opened
        self.pg = opened.backend == "postgres"
        self.schema = opened.option("schema", "public")
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(opened.target, autocommit=True, connect_timeout=5)
        else:
            path = opened.target
            if path != ":memory:" and not os.path.exists(path):
                raise CliError(f"no such SQLite file: {path}", UNSUPPORTED)
            self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg:
            return list(self.conn.execute(sql, params).fetchall())
        with closing(self.conn.execute(sql.replace("%s", "?"), params)) as cur:
            return list(cur.fetchall())

    def table(self, name: str) -> str:
        if self.pg:
            from psycopg import sql

            return sql.Identifier(self.schema, name).as_string(self.conn)
        return f'"{name}"'

    def tables(self) -> list[str]:
        """Our tables (``lgmp_*``)."""
        if self.pg:
            found = self.rows(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE "
                "'lgmp\\_%%' ORDER BY 1",
                (self.schema,),
            )
        else:
            found = self.rows(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'lgmp\\_%' "
                "ESCAPE '\\' ORDER BY 1"
            )
        return [r[0] for r in found]

    def columns(self, table: str) -> list[str]:
        if self.pg:
            found = self.rows(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position",
                (self.schema, table),
            )
            return [r[0] for r in found]
        return [r[1] for r in self.rows(f"PRAGMA table_info({self.table(table)})")]

    def versions(self) -> dict[str, int | None]:
        have = set(self.tables())
        out: dict[str, int | None] = {}
        for table, component in COMPONENTS.items():
            if table in have:
                out[component] = self.rows(f"SELECT max(v) FROM {self.table(table)}")[0][0]
            else:
                out[component] = None
        return out

    def row_bytes(self, table: str) -> str:
        """An expression for the bytes a row of ``table`` holds."""
        if self.pg:
            return "pg_column_size(x.*)"
        parts = [f'coalesce(length(x."{c}"), 0)' for c in self.columns(table)]
        return " + ".join(parts) or "0"

    def table_sizes(self) -> dict[str, tuple[int, int]]:
        """``{table: (rows, bytes)}``; bytes on disk with indexes on PostgreSQL."""
        out = {}
        for name in self.tables():
            count = self.rows(f"SELECT count(*) FROM {self.table(name)}")[0][0]
            if self.pg:
                size = self.rows(
                    "SELECT pg_total_relation_size(%s::regclass)", (self.table(name),)
                )[0][0]
            else:
                size = self.rows(
                    f"SELECT coalesce(sum({self.row_bytes(name)}), 0) FROM {self.table(name)} x"
                )[0][0]
            out[name] = (int(count), int(size))
        return out

    def biggest_threads(self, limit: int) -> list[dict[str, Any]]:
        tables = [
            t for t in self.tables() if t != "lgmp_threads" and "thread_key" in self.columns(t)
        ]
        if "lgmp_threads" not in self.tables() or not tables:
            return []
        parts = []
        for t in tables:
            counted = "count(*)" if t == "lgmp_checkpoints" else "0"
            parts.append(
                f"SELECT x.thread_key, {counted} AS n, sum({self.row_bytes(t)}) AS b "
                f"FROM {self.table(t)} x GROUP BY x.thread_key"
            )
        found = self.rows(
            f"SELECT t.thread_id, sum(s.n), sum(s.b) FROM ({' UNION ALL '.join(parts)}) s "
            f"JOIN {self.table('lgmp_threads')} t ON t.thread_key = s.thread_key "
            "WHERE t.thread_id IS NOT NULL GROUP BY t.thread_id ORDER BY 3 DESC, 1 LIMIT %s",
            (limit,),
        )
        return [
            {"thread_id": _text(tid), "checkpoints": int(n), "bytes": int(b or 0)}
            for tid, n, b in found
        ]

    def server_version(self) -> str:
        if self.pg:
            return str(self.rows("SHOW server_version")[0][0])
        return sqlite3.sqlite_version


def _text(value: Any) -> str:
    return bytes(value).decode("utf-8", "surrogateescape") if not isinstance(value, str) else value


@contextmanager
def sql(opened: Opened) -> Iterator[_Sql]:
    conn = _Sql(opened)
    try:
        yield conn
    finally:
        conn.close()


# -- Redis ---------------------------------------------------------------------------------


def _redis_prefix(opened: Opened) -> str:
    return str(opened.saver._plans.prefix)


def redis_scan(opened: Opened) -> dict[str, Any]:
    """Keys, bytes per kind and per live thread, from ``SCAN`` and batched ``MEMORY USAGE``."""
    from ..drivers.redis import glob_escape

    client = opened.saver.client
    prefix = _redis_prefix(opened)
    per_kind: Counter[str] = Counter()
    keys_per_kind: Counter[str] = Counter()
    per_tag: Counter[str] = Counter()
    tags_with_thread: set[str] = set()
    batch: list[bytes] = []

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(batch, pipe.execute(), strict=True):
            text = key.decode("utf-8", "replace")
            rest = text[len(prefix) + 1 :]
            # the thread index's sets (and those of its former layout), no thread's
            if rest.startswith((f"{{{prefix}:tix}}:", "{tix:")):
                kind = "thread_index"
            elif rest.startswith("{"):
                tag, _, kind = rest[1:].partition("}:")
                per_tag[tag] += size or 0
                if kind == "thread":
                    tags_with_thread.add(tag)
            else:
                kind = rest.rsplit(":", 1)[-1] if ":" in rest else rest
                kind = f"store:{kind}" if rest.startswith("store:") else kind
            per_kind[kind] += size or 0
            keys_per_kind[kind] += 1
        batch.clear()

    for key in client.scan_iter(match=f"{glob_escape(prefix)}:*", count=SCAN_COUNT):
        batch.append(key)
        if len(batch) >= SCAN_COUNT:
            flush()
    if batch:
        flush()
    live = _live_tags(opened, sorted(tags_with_thread))
    return {
        "per_kind": per_kind,
        "keys_per_kind": keys_per_kind,
        "per_tag": Counter({tag: size for tag, size in per_tag.items() if tag in live}),
        "threads": len(live),
    }


def _live_tags(opened: Opened, tags: list[str]) -> set[str]:
    """The tags of threads whose hash (or, while a tombstone shares the hash, whose index
    record) holds an id: a deleted thread's hash stays behind as its tombstone
    (``live_after`` alone) and is no thread, to count or to list."""
    client = opened.saver.client
    prefix = _redis_prefix(opened)
    live: set[str] = set()
    for start in range(0, len(tags), SCAN_COUNT):
        chunk = tags[start : start + SCAN_COUNT]
        pipe = client.pipeline(transaction=False)
        for tag in chunk:
            pipe.hexists(f"{prefix}:{{{tag}}}:thread", "id")
            pipe.hexists(f"{prefix}:{{{tag}}}:rec", "id")
        found = pipe.execute()
        live.update(tag for n, tag in enumerate(chunk) if found[2 * n] or found[2 * n + 1])
    return live


def redis_threads(opened: Opened, tags: list[str]) -> dict[str, tuple[str, int]]:
    """``{tag: (thread id, checkpoints)}``: the id from the thread's hash, the count from
    its checkpoint hash (one field per checkpoint, every namespace), in one pipeline."""
    client = opened.saver.client
    prefix = _redis_prefix(opened)
    pipe = client.pipeline(transaction=False)
    for tag in tags:
        pipe.hget(f"{prefix}:{{{tag}}}:thread", "id")
        pipe.hlen(f"{prefix}:{{{tag}}}:ck")
        pipe.hget(f"{prefix}:{{{tag}}}:rec", "id")  # while a tombstone shares the hash
    found = pipe.execute() if tags else []
    out = {}
    for n, tag in enumerate(tags):
        tid, checkpoints = found[3 * n] or found[3 * n + 2], found[3 * n + 1]
        out[tag] = (_text(tid) if tid is not None else f"(tag {tag})", int(checkpoints or 0))
    return out


def redis_info(opened: Opened) -> dict[str, Any]:
    info = opened.saver.client.info()
    if isinstance(info, dict) and "redis_version" not in info:  # a cluster: one per node
        info = next(iter(info.values()))
    return dict(info)


def redis_policy(opened: Opened) -> tuple[str | None, str | None]:
    """``(maxmemory-policy, maxmemory)``, or ``(None, reason)`` when CONFIG is refused."""
    import redis

    client = opened.saver.client
    try:
        found = client.config_get("maxmemory*")
    except redis.RedisError as exc:
        return None, str(exc).splitlines()[0]
    if found and "maxmemory-policy" not in found:  # a cluster: per node
        found = next(iter(found.values()))
    return str(found.get("maxmemory-policy")), str(found.get("maxmemory"))


@dataclass
class Finding:
    """One doctor check's outcome; ``level`` is ok, warning or problem."""

    check: str
    level: str
    message: str
    fix: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
