"""The thread index on SQLite: ``lgmp_thread_index``, written in each write's transaction.

The rules are PostgreSQL's (:mod:`.postgres`); SQLite runs in this process and writers
take turns on the whole file, so each write decides in Python with plain statements:

- ``put`` counts the checkpoint and its bytes, sets the title once, and for a newer root
  checkpoint its metadata and the status its pending writes already give (LangGraph may
  store a step's writes before its checkpoint).
- ``put_writes`` with an interrupt or an error updates the row if they are for the
  latest root checkpoint (or a newer one, whose put is on its way).
- Operations that remove or merge checkpoints derive the row again (:meth:`refresh`);
  deletion and the sweep drop it with the thread's other rows.

Each row carries its thread's expiry (copied by triggers). Each indexed key has a column
of its value (``json_extract``, kept by triggers) and covering indexes on ``(key,
updated_at, thread_key, expires_at)`` and ``(key, status, ...)``: a search or a count by
it reads one index.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..drivers.plan import Plan
from ..drivers.sqlite import Query, Rows
from .core import (
    ERROR,
    INTERRUPT,
    RecordInput,
    ReindexBatch,
    StoredRecord,
    ThreadQuery,
    backfill_times,
    derive,
    index_value,
    interrupts_from_json,
    interrupts_json,
    thread_key,
)

TABLE = "lgmp_thread_index"
TRANSCRIPTS = "lgmp_transcripts"
VISIBLE = "t.thread_id IS NOT NULL AND (t.expires_at IS NULL OR t.expires_at > :now)"
LISTED = "(i.expires_at IS NULL OR i.expires_at > :now)"
"""Visible, from the index row alone (deleted threads have no row)."""

_INDEX_COLUMNS = """
        thread_key BLOB PRIMARY KEY,
        thread_id BLOB NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        latest_id TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'idle',
        interrupts TEXT NOT NULL DEFAULT '{}',
        title TEXT,
        checkpoints INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0,
        expires_at REAL"""
# Statements of MIGRATION that a new file runs as they are (SqliteThreadIndex.fresh).
_LAYOUT: tuple[str, ...] = (
    f"""CREATE INDEX IF NOT EXISTS {TABLE}_updated_idx
        ON {TABLE} (updated_at, thread_key, expires_at)""",
    # The thread's expiry, copied into its row by triggers, so a search reads one index
    # (key, updated_at, thread_key, expires_at) and no thread row per entry it skips or returns.
    f"""
    CREATE TRIGGER IF NOT EXISTS {TABLE}_expiry AFTER UPDATE OF expires_at ON lgmp_threads
    BEGIN
        UPDATE {TABLE} SET expires_at = NEW.expires_at WHERE thread_key = NEW.thread_key;
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS {TABLE}_created AFTER INSERT ON {TABLE}
    BEGIN
        UPDATE {TABLE} SET expires_at = (
            SELECT expires_at FROM lgmp_threads WHERE thread_key = NEW.thread_key)
        WHERE thread_key = NEW.thread_key;
    END
    """,
    f"""
    CREATE TABLE IF NOT EXISTS {TRANSCRIPTS} (
        thread_key BLOB NOT NULL,
        message_id TEXT NOT NULL,
        owner TEXT,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL,
        PRIMARY KEY (thread_key, message_id)
    ) WITHOUT ROWID
    """,
    f"CREATE INDEX IF NOT EXISTS {TRANSCRIPTS}_seq_idx ON {TRANSCRIPTS} (thread_key, seq)",
    f"CREATE INDEX IF NOT EXISTS {TRANSCRIPTS}_expires_idx ON {TRANSCRIPTS} (expires_at)",
)

MIGRATION: tuple[str, ...] = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ({_INDEX_COLUMNS}\n) WITHOUT ROWID",
    *_LAYOUT,
    # Threads written before: metadata and counts now, status with their next write.
    f"""
    INSERT OR IGNORE INTO {TABLE} (thread_key, thread_id, created_at, updated_at, latest_id,
        metadata, checkpoints)
    SELECT t.thread_key, t.thread_id, unixepoch('now'), unixepoch('now'),
        (SELECT max(checkpoint_id) FROM lgmp_checkpoints c WHERE c.thread_key = t.thread_key
            AND c.checkpoint_ns = '' AND NOT c.replay_only),
        coalesce((SELECT c.metadata_json FROM lgmp_checkpoints c
            WHERE c.thread_key = t.thread_key AND c.checkpoint_ns = '' AND NOT c.replay_only
            ORDER BY c.checkpoint_id DESC LIMIT 1), '{{}}'),
        (SELECT count(*) FROM lgmp_checkpoints c WHERE c.thread_key = t.thread_key
            AND NOT c.replay_only)
    FROM lgmp_threads t
    WHERE t.thread_id IS NOT NULL
        AND EXISTS (SELECT 1 FROM lgmp_checkpoints c WHERE c.thread_key = t.thread_key)
    """,
)

STATUS_MIGRATION: tuple[str, ...] = (
    # search(status=...) ("which threads wait for a human") reads this index in order.
    f"""CREATE INDEX IF NOT EXISTS {TABLE}_status_idx
        ON {TABLE} (status, updated_at, thread_key, expires_at)""",
)
STATUS = "\x00status"
"""Appended to a key to name its index by key and status."""

_COLUMNS = """i.thread_id, i.created_at, i.updated_at, i.metadata, i.status, i.interrupts,
    i.title, i.checkpoints, i.bytes, i.latest_id"""
_ORDER = {
    "updated_at": "i.updated_at",
    "created_at": "i.created_at",
    "thread_id": "i.thread_id",
    "status": "i.status",
}
_SPECIAL = f"channel IN ('{INTERRUPT}', '{ERROR}')"
PENDING = f"""EXISTS (SELECT 1 FROM lgmp_writes WHERE thread_key = :tk AND checkpoint_ns = ''
    AND checkpoint_id = :id AND {_SPECIAL})"""
"""Whether root checkpoint ``:id`` of thread ``:tk`` has interrupt or error writes: a
column of the put's first read (:meth:`SqliteThreadIndex.put` reads them only then)."""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _index_name(key: str) -> str:
    return f"{TABLE}_{_digest(key)}_idx"


def _cover_name(key: str) -> str:
    return f"{TABLE}_{_digest(key)}_cover_idx"


def key_column(key: str) -> str:
    """The column holding ``json_extract(metadata, key)``, kept by triggers: SQLite reads
    an index on a plain column alone (covering), never one on an expression."""
    return f"k_{_digest(key)}"


def _value(metadata: str, key: str) -> str:
    """The key's value in the ``metadata`` column's JSON, as its column holds it."""
    return f"json_extract({metadata}, '$.\"{key}\"')"


def _key_layout(key: str) -> list[str]:
    """The triggers that keep the key's column and its two covering indexes (by key, and
    by key and status): what :meth:`SqliteThreadIndex.setup` and ``fresh()`` create."""
    col, value = key_column(key), _value("NEW.metadata", key)
    statements = []
    for event in ("INSERT", "UPDATE OF metadata"):
        name = f"{TABLE}_{col}_{event.split()[0].lower()}"
        statements.append(
            f"""CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {TABLE}
            WHEN NEW.{col} IS NOT {value}
            BEGIN
                UPDATE {TABLE} SET {col} = {value} WHERE thread_key = NEW.thread_key;
            END"""
        )
    for name, rest in (
        (key, "updated_at, thread_key, expires_at"),
        (key + STATUS, "status, updated_at, thread_key, expires_at"),
    ):
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {_cover_name(name)} ON {TABLE} ({col}, {rest})"
        )
    return statements


def _sql_value(form: str) -> Any:
    """What ``json_extract`` gives for a scalar's JSON text (booleans become 0/1,
    integers past 64 bits a real: SQLite binds no larger integer, and reads such JSON
    numbers as reals; Python's exact filter finishes a non-string's match)."""
    value = json.loads(form)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)
    return value


def _stored(row: tuple[Any, ...]) -> StoredRecord:
    tid, created, updated, meta, status, interrupts, title, n, size, latest = row
    return StoredRecord(
        latest_id=latest,
        thread_id=bytes(tid).decode("utf-8", "surrogatepass"),
        created_at=float(created),
        updated_at=float(updated),
        metadata=json.loads(meta),
        status=status,
        interrupts=interrupts_from_json(json.loads(interrupts)),
        title=title,
        checkpoints=int(n),
        bytes=int(size),
    )


class SqliteThreadIndex:
    """Statements of the thread index; used by the checkpoint plans and the API."""

    def __init__(self, index_keys: Sequence[str], transcript_ttl: float | None = None) -> None:
        self.index_keys = tuple(index_keys)
        self.transcript_ttl = transcript_ttl
        newer = ":latest IS NOT NULL AND (i.latest_id IS NULL OR :latest >= i.latest_id)"
        # Built once: every put sends it (its text is the statement cache's key).
        self._put_sql = f"""
            INSERT INTO {TABLE} AS i (thread_key, thread_id, created_at, updated_at,
                latest_id, metadata, status, interrupts, title, checkpoints, bytes)
            VALUES (:tk, :tid, :now, :now, :latest, :meta, :status, :int, :title, :n, :b)
            ON CONFLICT (thread_key) DO UPDATE SET thread_id = excluded.thread_id,
                updated_at = max(i.updated_at, excluded.updated_at),
                latest_id = CASE WHEN {newer} THEN excluded.latest_id ELSE i.latest_id END,
                metadata = CASE WHEN {newer} THEN {self._owned_metadata()} ELSE i.metadata END,
                status = CASE WHEN {newer} THEN excluded.status ELSE i.status END,
                interrupts = CASE WHEN {newer} THEN excluded.interrupts ELSE i.interrupts END,
                title = coalesce(i.title, excluded.title),
                checkpoints = i.checkpoints + excluded.checkpoints,
                bytes = i.bytes + excluded.bytes"""

    def _owned_metadata(self) -> str:
        """The record's new metadata (``excluded``'s), with the row's user key when it
        lacks one: a checkpoint without the key (a service resuming with only
        ``thread_id``) leaves the thread its owner's; one naming another user moves it."""
        if not self.index_keys:
            return "excluded.metadata"
        path = f"'$.\"{self.index_keys[0]}\"'"
        return (
            f"CASE WHEN json_type(excluded.metadata, {path}) IS NULL "
            f"AND json_type(i.metadata, {path}) IS NOT NULL "
            f"THEN json_set(excluded.metadata, {path}, json(i.metadata -> {path})) "
            "ELSE excluded.metadata END"
        )

    def setup(self) -> Plan[Query, None]:
        """Per indexed key: a column of its value, set by triggers from every write of
        the row's metadata, and two covering indexes on it (by key, and by key and
        status), so a search or a count by the key reads one index and no row. The
        expression indexes of earlier releases go."""
        columns: Rows = yield Query(f"SELECT name FROM pragma_table_info('{TABLE}')", fetch=True)
        have = {r[0] for r in columns}
        for key in self.index_keys:
            col = key_column(key)
            if col not in have:
                yield Query(f"ALTER TABLE {TABLE} ADD COLUMN {col}", write=True)
                yield Query(f"UPDATE {TABLE} SET {col} = {_value('metadata', key)}", write=True)
            for name in (key, key + STATUS):
                yield Query(f"DROP INDEX IF EXISTS {_index_name(name)}", write=True)
            for statement in _key_layout(key):
                yield Query(statement, write=True)

    def fresh(self) -> list[str]:
        """What the migrations and :meth:`setup` leave, for a file with none of the
        tables: the index table created with its key columns (no ``ALTER TABLE``, no
        backfill of rows a new file cannot have). Runs after the checkpoint tables'."""
        columns = "".join(f",\n        {key_column(key)}" for key in self.index_keys)
        return [
            f"CREATE TABLE IF NOT EXISTS {TABLE} ({_INDEX_COLUMNS}{columns}\n) WITHOUT ROWID",
            *_LAYOUT,
            *STATUS_MIGRATION,
            *(statement for key in self.index_keys for statement in _key_layout(key)),
        ]

    # -- writes -----------------------------------------------------------------------

    def _special_writes(self, tk: bytes, checkpoint_id: str) -> Plan[Query, Rows]:
        rows: Rows = yield Query(
            f"SELECT task_id, channel, type, blob FROM lgmp_writes WHERE thread_key = ? "
            f"AND checkpoint_ns = '' AND checkpoint_id = ? AND {_SPECIAL}",
            (tk, checkpoint_id),
            fetch=True,
        )
        return rows

    def put(
        self,
        tk: bytes,
        thread_id: bytes,
        checkpoint_id: str,
        record: RecordInput,
        fresh: bool,
        pending: bool = True,
        metadata_text: str | None = None,
    ) -> Plan[Query, None]:
        """After a checkpoint's row is written, in the same transaction. ``fresh``: the
        checkpoint is new (it counts); ``pending``: it may have interrupt or error writes
        (:data:`PENDING`), which are then read for its status; ``metadata_text``: the
        record's metadata as JSON when the caller has it already (the checkpoint row's)."""
        now = time.time()
        owner = record.owner
        if record.lines and owner is None and self.index_keys:
            # A line is its writer's user's; without the user key, the thread owner's.
            rows: Rows = yield Query(
                f"SELECT metadata FROM {TABLE} WHERE thread_key = ?", (tk,), fetch=True
            )
            held = json.loads(rows[0][0]) if rows else {}
            if self.index_keys[0] in held:
                owner = index_value(held[self.index_keys[0]])
        if record.lines:
            expires = None if self.transcript_ttl is None else now + self.transcript_ttl
            # The order lines are read in: microseconds, but always after the thread's
            # last line (two puts can fall in one clock tick; each row sees the one before)
            base = int(now * 1_000_000)
            yield Query(
                f"INSERT OR IGNORE INTO {TRANSCRIPTS} (thread_key, message_id, owner, seq, "
                "role, content, created_at, expires_at) VALUES (?1, ?2, ?3, max(?4, "
                f"coalesce((SELECT max(seq) FROM {TRANSCRIPTS} WHERE thread_key = ?1), -1) + 1), "
                "?5, ?6, ?7, ?8)",
                [
                    (tk, line.id, owner, base + n, line.role, line.text, now, expires)
                    for n, line in enumerate(record.lines)
                ],
                many=True,
            )
        latest = checkpoint_id if record.root else None
        special = record.root and pending
        found = derive((yield from self._special_writes(tk, checkpoint_id)) if special else [])
        yield Query(
            self._put_sql,
            {
                "tk": tk,
                "tid": thread_id,
                "now": time.time(),
                "latest": latest,
                "meta": (metadata_text or json.dumps(record.metadata)) if record.root else "{}",
                "status": found.status,
                "int": json.dumps(interrupts_json(found.interrupts)) if found.interrupts else "{}",
                "title": record.title,
                "n": int(fresh),
                "b": record.bytes,
            },
        )

    def writes(self, tk: bytes, thread_id: bytes, ns: str, checkpoint_id: str) -> Plan[Query, None]:
        """After interrupt or error writes are stored, in the same transaction."""
        if ns != "":
            return
        found = derive((yield from self._special_writes(tk, checkpoint_id)))
        yield Query(
            f"""
            INSERT INTO {TABLE} AS i (thread_key, thread_id, created_at, updated_at,
                latest_id, status, interrupts)
            VALUES (:tk, :tid, :now, :now, :id, :status, :int)
            ON CONFLICT (thread_key) DO UPDATE SET
                updated_at = max(i.updated_at, excluded.updated_at),
                latest_id = excluded.latest_id, status = excluded.status,
                interrupts = excluded.interrupts
            WHERE i.latest_id IS NULL OR i.latest_id <= excluded.latest_id""",
            {
                "tk": tk,
                "tid": thread_id,
                "now": time.time(),
                "id": checkpoint_id,
                "status": found.status,
                "int": json.dumps(interrupts_json(found.interrupts)),
            },
        )

    def revived(self, tk: bytes, record: RecordInput) -> Plan[Query, None]:
        """An expired thread written again starts over: a new creation time and title."""
        yield Query(
            f"UPDATE {TABLE} SET created_at = ?, title = ? WHERE thread_key = ?",
            (time.time(), record.title, tk),
        )
        yield from self.refresh([tk])

    def copy(self, src: bytes, dst: bytes) -> Plan[Query, None]:
        yield Query(
            f"""
            INSERT INTO {TABLE} AS i (thread_key, thread_id, created_at, updated_at, title)
            SELECT :dst, t.thread_id, :now, :now, s.title
            FROM lgmp_threads t LEFT JOIN {TABLE} s ON s.thread_key = :src
            WHERE t.thread_key = :dst
            ON CONFLICT (thread_key) DO UPDATE SET updated_at = excluded.updated_at,
                title = coalesce(i.title, excluded.title)""",
            {"src": src, "dst": dst, "now": time.time()},
        )
        # The source's transcript too (its lines the target lacks, as they are): a copy
        # shows its user the conversation it continues.
        yield Query(
            f"""
            INSERT INTO {TRANSCRIPTS} (thread_key, message_id, owner, seq, role, content,
                created_at, expires_at)
            SELECT :dst, message_id, owner, seq, role, content, created_at, expires_at
            FROM {TRANSCRIPTS}
            WHERE thread_key = :src AND (expires_at IS NULL OR expires_at > :now)
            ON CONFLICT DO NOTHING""",
            {"src": src, "dst": dst, "now": time.time()},
        )
        yield from self.refresh([dst])

    def refresh(self, tks: Iterable[bytes]) -> Plan[Query, None]:
        """Derive rows again from what the threads hold (same transaction)."""
        for tk in sorted(set(tks)):
            rows: Rows = yield Query(
                """
                SELECT t.thread_id,
                    (SELECT count(*) FROM lgmp_checkpoints WHERE thread_key = :tk
                        AND NOT replay_only),
                    coalesce((SELECT sum(length(checkpoint) + length(metadata))
                        FROM lgmp_checkpoints WHERE thread_key = :tk), 0)
                    + coalesce((SELECT sum(length(blob)) FROM lgmp_blobs
                        WHERE thread_key = :tk), 0)
                    + coalesce((SELECT sum(length(data)) FROM lgmp_items
                        WHERE thread_key = :tk), 0),
                    l.checkpoint_id, l.metadata_json
                FROM lgmp_threads t
                LEFT JOIN (SELECT checkpoint_id, metadata_json FROM lgmp_checkpoints
                    WHERE thread_key = :tk AND checkpoint_ns = '' AND NOT replay_only
                    ORDER BY checkpoint_id DESC LIMIT 1) l
                WHERE t.thread_key = :tk""",
                {"tk": tk},
                fetch=True,
            )
            if not rows or rows[0][0] is None or not rows[0][1]:
                yield Query(f"DELETE FROM {TABLE} WHERE thread_key = ?", (tk,))
                continue
            tid, n, size, latest, meta = rows[0]
            found = derive((yield from self._special_writes(tk, latest)) if latest else [])
            yield Query(
                f"""
                INSERT INTO {TABLE} AS i (thread_key, thread_id, created_at, updated_at,
                    latest_id, metadata, status, interrupts, checkpoints, bytes)
                VALUES (:tk, :tid, :now, :now, :latest, :meta, :status, :int, :n, :b)
                ON CONFLICT (thread_key) DO UPDATE SET thread_id = excluded.thread_id,
                    latest_id = excluded.latest_id, metadata = {self._owned_metadata()},
                    status = excluded.status, interrupts = excluded.interrupts,
                    checkpoints = excluded.checkpoints, bytes = excluded.bytes""",
                {
                    "tk": tk,
                    "tid": tid,
                    "now": time.time(),
                    "latest": latest,
                    "meta": meta or "{}",
                    "status": found.status,
                    "int": json.dumps(interrupts_json(found.interrupts)),
                    "n": n,
                    "b": size,
                },
            )

    def reindex(self, codec: Any, cursor: Any, batch_size: int) -> Plan[Query, ReindexBatch]:
        """One backfill batch in one transaction (see ``ThreadPlans.reindex``); the
        cursor is the last thread key looked at. SQL reads metadata's JSON projection."""
        rows: Rows = yield Query(
            f"""
            SELECT t.thread_key, min(c.checkpoint_id), max(c.checkpoint_id)
            FROM (SELECT t.thread_key FROM lgmp_threads t
                WHERE t.thread_key > ? AND t.thread_id IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM {TABLE} i WHERE i.thread_key = t.thread_key)
                ORDER BY t.thread_key LIMIT ?) t
            LEFT JOIN lgmp_checkpoints c ON c.thread_key = t.thread_key
                AND c.checkpoint_ns = '' AND NOT c.replay_only
            GROUP BY t.thread_key ORDER BY t.thread_key""",
            (cursor or b"", batch_size),
            fetch=True,
            write=True,
        )
        tks = [bytes(r[0]) for r in rows]
        yield from self.refresh(tks)
        times = backfill_times(rows)
        if times:
            yield Query(
                f"UPDATE {TABLE} SET created_at = ?, updated_at = ? WHERE thread_key = ?",
                [(lo, hi, tk) for tk, lo, hi in times],
                many=True,
            )
        marks = ",".join("?" * len(tks))
        indexed: Rows = (
            (
                yield Query(
                    f"SELECT count(*) FROM {TABLE} WHERE thread_key IN ({marks})", tks, fetch=True
                )
            )
            if tks
            else [(0,)]
        )
        done = len(rows) < batch_size
        return ReindexBatch(len(rows), int(indexed[0][0]), None if done else tks[-1])

    # -- reads ------------------------------------------------------------------------

    def _where(self, query: ThreadQuery) -> tuple[str, dict[str, Any], bool]:
        """SQL narrowing, its parameters, and whether Python must finish the filter."""
        wheres = [LISTED]
        params: dict[str, Any] = {"now": time.time()}
        exact = True
        for n, (key, value) in enumerate(query.metadata.items()):
            if not isinstance(value, str):
                exact = False  # 1, true, objects: json_extract alone cannot tell them apart
            if query.indexed is not None and query.indexed[0] == key:
                expr = f"i.{key_column(key)}"  # json_extract's value, as the column has it
            elif isinstance(value, str):
                expr = f"json_extract(i.metadata, :k{n})"
                params[f"k{n}"] = f'$."{key}"'
            else:
                continue
            wheres.append(f"{expr} = :v{n}")
            params[f"v{n}"] = _sql_value(json.dumps(value))
        if query.status is not None:
            wheres.append("i.status = :status")
            params["status"] = query.status
        if query.ids is not None:
            marks = ", ".join(f":id{n}" for n in range(len(query.ids)))
            wheres.append(f"i.thread_key IN ({marks})")
            params.update({f"id{n}": thread_key(t) for n, t in enumerate(query.ids)})
        return " AND ".join(wheres), params, exact

    @staticmethod
    def _select(where: str, tail: str = "") -> str:
        return f"SELECT {_COLUMNS} FROM {TABLE} i WHERE {where} {tail}"

    def search(self, query: ThreadQuery) -> Plan[Query, list[StoredRecord]]:
        where, params, exact = self._where(query)
        order = "DESC" if query.sort_order == "desc" else "ASC"
        tail = f"ORDER BY {_ORDER[query.sort_by]} {order}, i.thread_key {order}"
        if exact:
            # The page's keys from the index alone, then their rows: skipped entries cost
            # an index step each, not a row read.
            page = f"{tail} LIMIT {int(query.limit)} OFFSET {int(query.offset)}"
            sql = f"""WITH page AS (SELECT i.thread_key FROM {TABLE} i WHERE {where} {page})
                SELECT {_COLUMNS} FROM page JOIN {TABLE} i ON i.thread_key = page.thread_key
                {tail}"""
        else:
            sql = self._select(where, tail)
        rows: Rows = yield Query(sql, params, fetch=True)
        records = [_stored(r) for r in rows]
        if exact:
            return records
        return [r for r in records if query.matches(r)][query.offset : query.offset + query.limit]

    def count(self, query: ThreadQuery) -> Plan[Query, int]:
        where, params, exact = self._where(query)
        if exact:
            rows: Rows = yield Query(
                f"SELECT count(*) FROM {TABLE} i WHERE {where}",
                params,
                fetch=True,
            )
            return int(rows[0][0])
        rows = yield Query(self._select(where), params, fetch=True)
        return sum(1 for r in rows if query.matches(_stored(r)))

    def get(self, thread_id: str) -> Plan[Query, StoredRecord | None]:
        rows: Rows = yield Query(
            f"""SELECT {_COLUMNS} FROM {TABLE} i JOIN lgmp_threads t
                ON t.thread_key = i.thread_key WHERE {VISIBLE} AND i.thread_key = :tk""",
            {"now": time.time(), "tk": thread_key(thread_id)},
            fetch=True,
        )
        return _stored(rows[0]) if rows else None

    def drop_transcripts(
        self, thread_ids: Sequence[str], dry: bool, owner: str | None = None
    ) -> Plan[Query, int]:
        """Erasure: the transcript lines of these threads (counted only, when ``dry``);
        with ``owner``, only that user's lines and those of no user (another user's lines
        in a reused thread id stay theirs)."""
        tks: list[Any] = [thread_key(t) for t in thread_ids]
        where = f"FROM {TRANSCRIPTS} WHERE thread_key IN ({','.join('?' * len(tks))})"
        if not tks:
            return 0
        if owner is not None:
            where += " AND (owner IS NULL OR owner = ?)"
            tks.append(owner)
        if dry:
            rows: Rows = yield Query(f"SELECT count(*) {where}", tks, fetch=True)
            return int(rows[0][0])
        deleted: int = yield Query(f"DELETE {where}", tks, write=True)
        return deleted

    def drop_owner_sets(self, owner: str) -> Plan[Query, None]:
        """Erasure: nothing to drop here (the index is rows, deleted with their threads)."""
        return
        yield

    def drop_owned_transcripts(
        self, owner: str, limit: int, dry: bool, listed: Sequence[str] = ()
    ) -> Plan[Query, int]:
        """Erasure: up to ``limit`` lines recorded for ``owner`` in threads no longer in
        the index; when ``dry``, all of them counted, except those of ``listed`` threads."""
        if dry:
            tks = [thread_key(t) for t in listed]
            rows: Rows = yield Query(
                f"SELECT count(*) FROM {TRANSCRIPTS} WHERE owner = ? "
                f"AND thread_key NOT IN ({','.join('?' * len(tks))})",
                (owner, *tks),
                fetch=True,
            )
            return int(rows[0][0])
        deleted: int = yield Query(
            f"""DELETE FROM {TRANSCRIPTS} WHERE (thread_key, message_id) IN (
                SELECT thread_key, message_id FROM {TRANSCRIPTS} WHERE owner = ? LIMIT ?)""",
            (owner, limit),
            write=True,
        )
        return deleted

    def sweep_transcripts(self, batch_size: int) -> Query:
        """A bounded batch of expired transcript lines (run by ``sweep_expired``)."""
        return Query(
            f"""DELETE FROM {TRANSCRIPTS} WHERE (thread_key, message_id) IN (
                SELECT thread_key, message_id FROM {TRANSCRIPTS} WHERE expires_at <= ?
                LIMIT ?)""",
            (time.time(), batch_size),
        )

    def transcript(
        self, thread_id: str, owner: str | None, limit: int, offset: int
    ) -> Plan[Query, list[tuple[str, str, str, float]]]:
        rows: Rows = yield Query(
            f"""SELECT message_id, role, content, created_at FROM {TRANSCRIPTS}
            WHERE thread_key = :tk AND (expires_at IS NULL OR expires_at > :now)
                AND (:owner IS NULL OR owner = :owner)
            ORDER BY seq LIMIT :limit OFFSET :offset""",
            {
                "tk": thread_key(thread_id),
                "now": time.time(),
                "owner": owner,
                "limit": limit,
                "offset": offset,
            },
            fetch=True,
        )
        return [(i, r, c, float(t)) for i, r, c, t in rows]
