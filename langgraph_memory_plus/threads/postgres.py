"""The thread index on PostgreSQL: ``lgmp_thread_index``, kept by the saver's own writes.

One row per thread with at least one checkpoint. The saver's plans (see
``checkpoint/postgres/plans.py``) put the row's update into the statement or the
transaction of each write:

- ``put``: a CTE of the put's statement (so a checkpoint and its record commit together):
  a newer root checkpoint sets the metadata and resets status to ``idle``; every put moves
  ``updated_at``, counts the checkpoint and its bytes, and sets the title once.
- ``put_writes`` with an interrupt or an error: a CTE of its statement, applied only if the
  writes are for the latest root checkpoint. Other writes leave the row alone, so a
  step's many concurrent ``put_writes`` don't queue on it.
- ``delete_thread``, ``prune``, ``sweep_expired``: CTEs deleting the rows.
- ``delete_for_runs``, ``prune(keep_latest)``, retention, ``copy_thread``: :meth:`refresh`,
  in the same transaction, derives the row again from what the thread still holds.

Each row carries its thread's expiry (copied by triggers on ``lgmp_threads``), so an
expired thread is never listed, swept or not, and a search reads no thread row. Each
indexed metadata key (``user_id`` by default) has a generated column of its value and
covering indexes on ``(key, updated_at, thread_key)`` and ``(key, status, ...)``: a
search or a count by it is an index-only scan, O(log n + offset + limit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ..drivers.plan import Plan
from ..drivers.postgres import Query, Rows
from .core import (
    RecordInput,
    ReindexBatch,
    StoredRecord,
    ThreadQuery,
    backfill_times,
    derive,
    interrupts_from_json,
    interrupts_json,
    thread_key,
)

TABLE = "lgmp_thread_index"
TRANSCRIPTS = "lgmp_transcripts"

_INDEX_COLUMNS = """
        thread_key bytea PRIMARY KEY,
        thread_id bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        latest_id text,
        metadata jsonb NOT NULL DEFAULT '{{}}',
        status text NOT NULL DEFAULT 'idle',
        interrupts jsonb NOT NULL DEFAULT '{{}}',
        title text,
        checkpoints bigint NOT NULL DEFAULT 0,
        bytes bigint NOT NULL DEFAULT 0"""
# Transcripts (see ..transcripts): one row per message, never deleted with the thread.
_TRANSCRIPTS = (
    f"""
    CREATE TABLE IF NOT EXISTS {{s}}.{TRANSCRIPTS} (
        thread_key bytea NOT NULL,
        message_id text NOT NULL,
        owner text,
        seq bigint NOT NULL,
        role text NOT NULL,
        content text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz,
        PRIMARY KEY (thread_key, message_id)
    )
    """,
    f"CREATE INDEX IF NOT EXISTS {TRANSCRIPTS}_seq_idx ON {{s}}.{TRANSCRIPTS} (thread_key, seq)",
    f"""CREATE INDEX IF NOT EXISTS {TRANSCRIPTS}_expires_idx ON {{s}}.{TRANSCRIPTS} (expires_at)
        WHERE expires_at IS NOT NULL""",
)

MIGRATION: tuple[str, ...] = (
    f"CREATE TABLE IF NOT EXISTS {{s}}.{TABLE} ({_INDEX_COLUMNS})",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_updated_idx ON {{s}}.{TABLE} (updated_at)",
    *_TRANSCRIPTS,
    # Threads written before this migration: metadata and counts now, status with their
    # next write (their pending writes are packed records SQL cannot read).
    f"""
    INSERT INTO {{s}}.{TABLE} (thread_key, thread_id, latest_id, metadata, checkpoints)
    SELECT t.thread_key, t.thread_id, l.checkpoint_id, coalesce(l.metadata_json, '{{{{}}}}'), n.n
    FROM {{s}}.lgmp_threads t
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM {{s}}.lgmp_checkpoints c
        WHERE c.thread_key = t.thread_key AND NOT c.replay_only) n
    LEFT JOIN LATERAL (SELECT c.checkpoint_id, c.metadata_json FROM {{s}}.lgmp_checkpoints c
        WHERE c.thread_key = t.thread_key AND c.checkpoint_ns = '' AND NOT c.replay_only
        ORDER BY c.checkpoint_id DESC LIMIT 1) l ON true
    WHERE t.thread_id IS NOT NULL AND n.n > 0
    ON CONFLICT DO NOTHING
    """,
)

# The expiry trigger and the covering indexes, shared by EXPIRY_MIGRATION and FRESH.
_EXPIRY_TRIGGERS = (
    f"""
    CREATE OR REPLACE FUNCTION {{s}}.{TABLE}_expiry() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {{s}}.{TABLE} SET expires_at = CASE WHEN NEW.thread_id IS NULL
                THEN '-infinity' ELSE NEW.expires_at END
            WHERE thread_key = NEW.thread_key;
        RETURN NULL;
    END $$
    """,
    # (OR REPLACE: a migration may run again over its own work, as every statement here
    # may.) AFTER triggers run at the end of the statement: a put that creates the thread row
    # and its index row in one statement finds the index row there.
    f"""CREATE OR REPLACE TRIGGER {TABLE}_expiry_ins AFTER INSERT ON {{s}}.lgmp_threads
        FOR EACH ROW EXECUTE FUNCTION {{s}}.{TABLE}_expiry()""",
    f"""CREATE OR REPLACE TRIGGER {TABLE}_expiry_upd AFTER UPDATE OF expires_at, thread_id
        ON {{s}}.lgmp_threads FOR EACH ROW
        WHEN (OLD.expires_at IS DISTINCT FROM NEW.expires_at
            OR (OLD.thread_id IS NULL) <> (NEW.thread_id IS NULL))
        EXECUTE FUNCTION {{s}}.{TABLE}_expiry()""",
)
_STATUS_COVER = f"""CREATE INDEX IF NOT EXISTS {TABLE}_status_cover_idx
    ON {{s}}.{TABLE} (status, updated_at, thread_key) INCLUDE (expires_at)"""
_UPDATED_COVER = f"""CREATE INDEX IF NOT EXISTS {TABLE}_updated_cover_idx
    ON {{s}}.{TABLE} (updated_at, thread_key) INCLUDE (expires_at)"""

STATUS_MIGRATION: tuple[str, ...] = (
    # "Which threads wait for a human": search(status=...) reads this index in order,
    # O(log n + k), instead of every thread's row (the approvals queue's first page).
    f"""CREATE INDEX IF NOT EXISTS {TABLE}_status_idx
        ON {{s}}.{TABLE} (status, updated_at, thread_key)""",
)

EXPIRY_MIGRATION: tuple[str, ...] = (
    # The thread's expiry copied into its row (as on SQLite): a search or a count then
    # reads the index alone (an index-only scan), with no lgmp_threads lookup per entry
    # it counts, skips or returns. '-infinity': a tombstone (the row goes with it anyway).
    f"ALTER TABLE {{s}}.{TABLE} ADD COLUMN IF NOT EXISTS expires_at timestamptz",
    f"""UPDATE {{s}}.{TABLE} i SET expires_at = CASE WHEN t.thread_id IS NULL
            THEN '-infinity' ELSE t.expires_at END
        FROM {{s}}.lgmp_threads t WHERE t.thread_key = i.thread_key
            AND (t.expires_at IS NOT NULL OR t.thread_id IS NULL)""",
    *_EXPIRY_TRIGGERS,
    # Both listing indexes cover the visibility test (expires_at), for index-only scans.
    f"DROP INDEX IF EXISTS {{s}}.{TABLE}_status_idx",
    _STATUS_COVER,
    f"DROP INDEX IF EXISTS {{s}}.{TABLE}_updated_idx",
    _UPDATED_COVER,
)

_FRESH: tuple[str, ...] = (*_EXPIRY_TRIGGERS, _STATUS_COVER, _UPDATED_COVER, *_TRANSCRIPTS)
"""What the three migrations above leave beside the index table itself, for a database
that has none (see :meth:`PostgresThreadIndex.fresh`)."""

LISTED = "(i.expires_at IS NULL OR i.expires_at > now())"
"""Visible, from the index row alone (a deleted thread has no row)."""
EXPIRY_OF = "(SELECT t.expires_at FROM {th} t WHERE t.thread_key = {tk})"
"""A new row's expiry: its thread's, as the statement finds it (a thread row the same
statement creates or touches sets it after, by the trigger)."""

_COLUMNS = """i.thread_id, extract(epoch FROM i.created_at), extract(epoch FROM i.updated_at),
    i.metadata, i.status, i.interrupts, i.title, i.checkpoints, i.bytes, i.latest_id"""

_ORDER = {
    "updated_at": "i.updated_at",
    "created_at": "i.created_at",
    "thread_id": "i.thread_id",
    "status": "i.status",
}

WriteRows = Callable[[Any, Any, Any], list[tuple[str, str, str, bytes, str, int]]]


STATUS = "\x00status"
"""Appended to a key to name its index by key and status."""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _index_name(key: str) -> str:
    return f"{TABLE}_{_digest(key)}_idx"


def _cover_name(key: str) -> str:
    return f"{TABLE}_{_digest(key)}_cover_idx"


def key_column(key: str) -> str:
    """The generated column holding ``metadata -> key``: an index on a plain column can
    answer a query by itself (PostgreSQL never scans an expression index index-only)."""
    return f"k_{_digest(key)}"


def _stored(row: tuple[Any, ...]) -> StoredRecord:
    tid, created, updated, meta, status, interrupts, title, n, size, latest = row
    return StoredRecord(
        latest_id=latest,
        thread_id=bytes(tid).decode("utf-8", "surrogatepass"),
        created_at=float(created),
        updated_at=float(updated),
        metadata=meta,
        status=status,
        interrupts=interrupts_from_json(interrupts),
        title=title,
        checkpoints=int(n),
        bytes=int(size),
    )


class PostgresThreadIndex:
    """SQL of the thread index for one schema; used by the checkpoint plans and the API."""

    def __init__(
        self,
        quoted_schema: str,
        index_keys: Sequence[str],
        visible: str,
        write_rows: WriteRows,
        transcript_ttl: float | None = None,
        transcripts: bool = False,
    ) -> None:
        self.transcript_ttl = transcript_ttl
        self.transcripts = transcripts
        s = quoted_schema
        self._write_rows = write_rows
        self._s = s
        self._ix = f"{s}.{TABLE}"
        self._th = f"{s}.lgmp_threads"
        self._ck = f"{s}.lgmp_checkpoints"
        self._bl = f"{s}.lgmp_blobs"
        self._it = f"{s}.lgmp_items"
        self._wr = f"{s}.lgmp_task_writes"
        self._tx = f"{s}.{TRANSCRIPTS}"
        self._visible = visible
        self.index_keys = tuple(index_keys)
        # A new index row's expiry: the write statement's ``thread`` CTE holds the thread
        # row as the statement found, created or locked it, with a row a racing writer
        # created after the statement's snapshot, which a read of the table would miss.
        expiry = "(SELECT expires_at FROM thread LIMIT 1)"
        # Whether this put is of the thread's newest root checkpoint (ids sort by time);
        # NULL (not a root checkpoint) counts as not.
        newer = "%(ix_latest)s::text >= coalesce(i.latest_id, '')"  # in CASE: NULL is false
        fresh = "%(ix_latest)s::text > coalesce(i.latest_id, '')"
        self._owned = self._owned_metadata()
        # A root checkpoint's metadata is the record's: the checkpoint's own ``m_json``
        # parameter, sent (and serialized) once for both; a subgraph's leaves it empty.
        metadata = "CASE WHEN %(ns)s = '' THEN %(m_json)s ELSE '{}'::jsonb END"
        self.put_cte = f"""
            ix AS (
                INSERT INTO {self._ix} AS i (thread_key, thread_id, latest_id, metadata,
                    title, checkpoints, bytes, expires_at)
                SELECT %(tk)s, %(tid)s, %(ix_latest)s, {metadata}, %(ix_title)s,
                    (SELECT count(*) FROM saved WHERE fresh), %(ix_bytes)s, {expiry}
                FROM (SELECT 1 FROM saved LIMIT 1) s
                ON CONFLICT (thread_key) DO UPDATE SET
                    thread_id = EXCLUDED.thread_id,
                    updated_at = now(),
                    latest_id = greatest(i.latest_id, EXCLUDED.latest_id),
                    metadata = CASE WHEN {newer} THEN {self._owned} ELSE i.metadata END,
                    status = CASE WHEN {fresh} THEN 'idle' ELSE i.status END,
                    interrupts = CASE WHEN {fresh} THEN '{{}}'::jsonb ELSE i.interrupts END,
                    title = coalesce(i.title, EXCLUDED.title),
                    checkpoints = i.checkpoints + EXCLUDED.checkpoints,
                    bytes = i.bytes + EXCLUDED.bytes
            )"""
        # Transcripts (off by default) add their rows in the same statement. That puts the
        # statement over psycopg's 4 KB cache (re-parsed at each put), the price of one
        # atomic statement; without transcripts it stays under it.
        if transcripts:
            # A line is its writer's user's; without the user key, the thread owner's.
            owner = "%(tx_owner)s::text"
            if self.index_keys:
                owner = (
                    f"coalesce({owner}, (SELECT (o.metadata -> '{self.index_keys[0]}')::text "
                    f"FROM {self._ix} o WHERE o.thread_key = %(tk)s))"
                )
            self.put_cte += f""", tx AS (
                INSERT INTO {self._tx} (thread_key, message_id, owner, seq, role, content,
                    expires_at)
                SELECT %(tk)s, l.id, {owner},
                    greatest((extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                        (SELECT max(seq) + 1 FROM {self._tx}
                         WHERE thread_key = %(tk)s)) + l.ord,
                    l.role, l.content, now() + make_interval(secs => %(tx_ttl)s)
                FROM unnest(%(tx_id)b::text[], %(tx_role)b::text[], %(tx_text)b::text[])
                    WITH ORDINALITY AS l(id, role, content, ord)
                WHERE EXISTS (SELECT 1 FROM saved)
                ON CONFLICT DO NOTHING
            )"""
        # Writes may come before their checkpoint's put (LangGraph runs them side by
        # side): writes for a checkpoint newer than the row's latest make it the latest,
        # so the put that follows keeps their status (it resets only a strictly newer one).
        same = "i.latest_id = %(id)s"
        self.writes_cte = f"""
            ixw AS (
                INSERT INTO {self._ix} AS i (thread_key, thread_id, latest_id, status,
                    interrupts, expires_at)
                SELECT %(tk)s, %(tid)s, %(id)s,
                    CASE WHEN %(ix_error)s THEN 'error' ELSE 'interrupted' END, %(ix_int)s,
                    {expiry}
                FROM ok WHERE %(ns)s = ''
                ON CONFLICT (thread_key) DO UPDATE SET updated_at = now(),
                    latest_id = EXCLUDED.latest_id,
                    status = CASE WHEN %(ix_error)s OR ({same} AND i.status = 'error')
                        THEN 'error' ELSE 'interrupted' END,
                    interrupts = CASE WHEN {same} THEN i.interrupts ELSE '{{}}'::jsonb END
                        || EXCLUDED.interrupts
                WHERE i.latest_id IS NULL OR i.latest_id <= %(id)s
            )"""

    def _owned_metadata(self) -> str:
        """The record's new metadata (``EXCLUDED``'s), with the row's user key when it
        lacks one: a checkpoint without the key (a service resuming with only
        ``thread_id``) leaves the thread its owner's; one naming another user moves it."""
        if not self.index_keys:
            return "EXCLUDED.metadata"
        user = self.index_keys[0]
        return (
            f"CASE WHEN i.metadata ? '{user}' THEN jsonb_build_object('{user}', "
            f"i.metadata -> '{user}') ELSE '{{}}' END || EXCLUDED.metadata"
        )

    # -- setup ----------------------------------------------------------------------------

    def missing(self) -> Plan[Query, list[str]]:
        """The statements an existing index table lacks, read from the catalog (so a
        current schema runs none: even a no-op ``ADD COLUMN IF NOT EXISTS`` waits for an
        exclusive lock): per indexed key, a generated column of its value and two indexes
        on it, by key and by key and status (a user's threads that wait for a human),
        both covering the visibility test, so a search or count by the key is an
        index-only scan. Adding the column rewrites the table once (when a key is first
        configured); the expression indexes of earlier releases go."""
        if not self.index_keys:
            return []
        names = [
            f"{self._s}.{index(name)}"
            for key in self.index_keys
            for name, _ in self._key_indexes(key)
            for index in (_index_name, _cover_name)
        ]
        rows: Rows = yield Query(
            """
            SELECT array(SELECT a.attname::text FROM pg_attribute a
                    WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped),
                array(SELECT n FROM unnest(%s::text[]) n WHERE to_regclass(n) IS NOT NULL)""",
            (self._ix, names),
            fetch=True,
        )
        columns, indexes = set(rows[0][0]), set(rows[0][1])
        statements: list[str] = []
        for key in self.index_keys:
            if key_column(key) not in columns:
                statements.append(
                    f"ALTER TABLE {self._ix} ADD COLUMN IF NOT EXISTS {self._generated(key)}"
                )
            for name, columns_ in self._key_indexes(key):
                if f"{self._s}.{_index_name(name)}" in indexes:
                    statements.append(f"DROP INDEX IF EXISTS {self._s}.{_index_name(name)}")
                if f"{self._s}.{_cover_name(name)}" not in indexes:
                    statements.append(self._key_index(key, name, columns_))
        return statements

    def fresh(self) -> list[str]:
        """What :meth:`setup` and the migrations leave, for a database with no tables:
        the index table created with its key columns (adding them later rewrites it)."""
        columns = [_INDEX_COLUMNS.format(), "expires_at timestamptz"]
        columns += [self._generated(key) for key in self.index_keys]
        return [
            f"CREATE TABLE IF NOT EXISTS {self._ix} ({', '.join(columns)})",
            *(statement.format(s=self._s) for statement in _FRESH),
            *(
                self._key_index(key, name, columns)
                for key in self.index_keys
                for name, columns in self._key_indexes(key)
            ),
        ]

    @staticmethod
    def _generated(key: str) -> str:
        return f"{key_column(key)} jsonb GENERATED ALWAYS AS (metadata -> '{key}') STORED"

    @staticmethod
    def _key_indexes(key: str) -> tuple[tuple[str, str], ...]:
        return ((key, "updated_at, thread_key"), (key + STATUS, "status, updated_at, thread_key"))

    def _key_index(self, key: str, name: str, columns: str) -> str:
        return (
            f"CREATE INDEX IF NOT EXISTS {_cover_name(name)} ON {self._ix} "
            f"({key_column(key)}, {columns}) INCLUDE (expires_at)"
        )

    # -- what the writes add to their statements ------------------------------------------

    def put_params(self, record: RecordInput, checkpoint_id: str) -> dict[str, Any]:
        """The index's parameters of a checkpoint put; its metadata is the put's own
        ``m_json`` (``record.metadata``, see :attr:`put_cte`), not sent twice."""
        params: dict[str, Any] = {
            "ix_latest": checkpoint_id if record.root else None,
            "ix_title": record.title,
            "ix_bytes": record.bytes,
        }
        if self.transcripts:
            params.update(
                tx_owner=record.owner,
                tx_ttl=self.transcript_ttl,
                tx_id=[line.id for line in record.lines],
                tx_role=[line.role for line in record.lines],
                tx_text=[line.text for line in record.lines],
            )
        return params

    @staticmethod
    def writes_params(interesting: Sequence[Any]) -> dict[str, Any]:
        raw = derive((w.task_id, w.channel, w.type, w.data) for w in interesting)
        return {
            "ix_error": raw.status == "error",
            "ix_int": Jsonb(interrupts_json(raw.interrupts)),
        }

    @property
    def held_cte(self) -> str:
        """A write statement's lock on its thread's row (``held``), taken once the
        statement's ``ok`` has a row, for a put to take before it locks its parent
        checkpoint: whoever removes checkpoints holds the row first (a revival by its
        expiry trigger, a trim by its put's ``ix``, a prune by :meth:`lock`), so the two
        are taken in that order everywhere."""
        return f"""held AS (
                SELECT 1 FROM {self._ix}
                WHERE thread_key = %(tk)s AND EXISTS (SELECT 1 FROM ok) FOR NO KEY UPDATE
            )"""

    def lock(self, tks: Sequence[bytes]) -> Query:
        """Lock the rows of ``tks`` (in key order) before removing checkpoints of theirs:
        a put with retention holds its row (its statement's ``ix``) before its trim
        deletes checkpoints, so a trim of another caller takes them in that order too."""
        return Query(
            f"SELECT 1 FROM {self._ix} WHERE thread_key = ANY(%s) "
            "ORDER BY thread_key FOR NO KEY UPDATE",
            (sorted(tks),),
        )

    def delete_cte(self, tks_param: str) -> str:
        return f"DELETE FROM {self._ix} WHERE thread_key = ANY({tks_param})"

    def delete_in(self, subquery: str) -> str:
        return f"DELETE FROM {self._ix} WHERE thread_key IN ({subquery})"

    def sweep_transcripts(self, limit_param: str) -> str:
        """A CTE body deleting a bounded batch of expired transcript lines."""
        return f"""DELETE FROM {self._tx} WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM {self._tx} WHERE expires_at <= now() LIMIT {limit_param}))"""

    def refused_lines(self, params: dict[str, Any]) -> Query:
        """The transcript lines a refused put recorded (its thread was deleted while the
        run went on): those of its messages recorded after the deletion."""
        return Query(
            f"""DELETE FROM {self._tx} WHERE thread_key = %(tk)s AND message_id = ANY(%(tx_id)s)
                AND seq >= (SELECT (extract(epoch FROM deleted_at) * 1000)::bigint * 1000
                    FROM {self._th} WHERE thread_key = %(tk)s)""",
            params,
        )

    def drop_transcripts(
        self, thread_ids: Sequence[str], dry: bool, owner: str | None = None
    ) -> Plan[Query, int]:
        """Erasure: the transcript lines of these threads (counted only, when ``dry``);
        with ``owner``, only that user's lines and those of no user (another user's lines
        in a reused thread id stay theirs)."""
        tks = [thread_key(t) for t in thread_ids]
        where = (
            f"FROM {self._tx} WHERE thread_key = ANY(%s) "
            "AND (%s::text IS NULL OR owner IS NULL OR owner = %s)"
        )
        sql = (
            f"SELECT count(*) {where}"
            if dry
            else (f"WITH gone AS (DELETE {where} RETURNING 1) SELECT count(*) FROM gone")
        )
        rows: Rows = yield Query(sql, (tks, owner, owner), fetch=True, standalone=True)
        return int(rows[0][0])

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
            sql = f"""SELECT count(*) FROM {self._tx}
                WHERE owner = %s AND NOT thread_key = ANY(%s)"""
            params: tuple[Any, ...] = (owner, [thread_key(t) for t in listed])
        else:
            sql = f"""WITH gone AS (DELETE FROM {self._tx} WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM {self._tx} WHERE owner = %s LIMIT %s)) RETURNING 1)
                SELECT count(*) FROM gone"""
            params = (owner, limit)
        rows: Rows = yield Query(sql, params, fetch=True, standalone=True)
        return int(rows[0][0])

    def copy(self, src: bytes, dst: bytes, dst_id: bytes) -> Query:
        """The target's row from the source's (title, metadata, status); counts follow
        from :meth:`refresh`."""
        return Query(
            f"""
            INSERT INTO {self._ix} AS i (thread_key, thread_id, latest_id, metadata, status,
                interrupts, title, expires_at)
            SELECT %(dst)s, %(dst_id)s, latest_id, metadata, status, interrupts, title,
                {EXPIRY_OF.format(th=self._th, tk="%(dst)s")}
            FROM {self._ix} WHERE thread_key = %(src)s
            ON CONFLICT (thread_key) DO UPDATE SET updated_at = now(),
                title = coalesce(i.title, EXCLUDED.title)""",
            {"src": src, "dst": dst, "dst_id": dst_id},
        )

    def copy_transcript(self, src: bytes, dst: bytes) -> Query:
        """The source's transcript lines into the target (``copy_thread``), if the source
        is visible: a copy shows its user the conversation it continues. Lines the
        target has (by message id) stay; each keeps its order, owner and expiry."""
        return Query(
            f"""
            INSERT INTO {self._tx} (thread_key, message_id, owner, seq, role, content,
                created_at, expires_at)
            SELECT %(dst)s, x.message_id, x.owner, x.seq, x.role, x.content, x.created_at,
                x.expires_at
            FROM {self._tx} x
            WHERE x.thread_key = %(src)s AND (x.expires_at IS NULL OR x.expires_at > now())
                AND EXISTS (SELECT 1 FROM {self._th} t
                    WHERE t.thread_key = %(src)s AND {self._visible})
            ON CONFLICT DO NOTHING""",
            {"src": src, "dst": dst},
        )

    def revived(self, tk: bytes, record: RecordInput) -> Plan[Query, None]:
        """An expired thread written again starts over: a new creation time and title."""
        yield Query(
            f"UPDATE {self._ix} SET created_at = now(), title = %s WHERE thread_key = %s",
            (record.title, tk),
        )
        yield from self.refresh([tk])

    def refresh(self, tks: Sequence[bytes]) -> Plan[Query, None]:
        """Derive the rows of ``tks`` again from what the threads hold (same transaction).

        For the operations that remove checkpoints (``delete_for_runs``, pruning,
        retention) or merge them (``copy_thread``): rare or bounded, so two statements.
        """
        if not tks:
            return
        rows: Rows = yield Query(
            f"""
            SELECT k.tk, t.thread_id, l.checkpoint_id, l.metadata_json, n.n,
                n.b + coalesce((SELECT sum(octet_length(blob)) FROM {self._bl}
                    WHERE thread_key = k.tk), 0)
                    + coalesce((SELECT sum(octet_length(data)) FROM {self._it}
                    WHERE thread_key = k.tk), 0),
                w.task_ids, w.paths, w.writes
            FROM unnest(%s::bytea[]) AS k(tk)
            JOIN {self._th} t ON t.thread_key = k.tk
            CROSS JOIN LATERAL (
                SELECT count(*) FILTER (WHERE NOT replay_only) AS n,
                    coalesce(sum(octet_length(checkpoint) + octet_length(metadata)), 0) AS b
                FROM {self._ck} WHERE thread_key = k.tk) n
            LEFT JOIN LATERAL (
                SELECT checkpoint_id, metadata_json FROM {self._ck}
                WHERE thread_key = k.tk AND checkpoint_ns = '' AND NOT replay_only
                ORDER BY checkpoint_id DESC LIMIT 1) l ON true
            LEFT JOIN LATERAL (
                SELECT array_agg(task_id) AS task_ids, array_agg(task_path) AS paths,
                    array_agg(writes) AS writes
                FROM {self._wr} WHERE thread_key = k.tk AND checkpoint_ns = ''
                    AND checkpoint_id = l.checkpoint_id) w ON true""",
            (sorted(tks),),
            fetch=True,
        )
        keep = [r for r in rows if r[4] and r[1] is not None]
        missing = {bytes(tk) for tk in tks} - {bytes(r[0]) for r in keep}
        if missing:
            yield Query(f"DELETE FROM {self._ix} WHERE thread_key = ANY(%s)", (sorted(missing),))
        for tk, tid, latest, meta, n, size, task_ids, paths, packed in keep:
            found = derive(row[:4] for row in self._write_rows(task_ids, paths, packed))
            yield Query(
                f"""
                INSERT INTO {self._ix} AS i (thread_key, thread_id, latest_id, metadata,
                    status, interrupts, checkpoints, bytes, expires_at)
                VALUES (%(tk)s, %(tid)s, %(latest)s, %(meta)s, %(status)s, %(int)s, %(n)s,
                    %(b)s, {EXPIRY_OF.format(th=self._th, tk="%(tk)s")})
                ON CONFLICT (thread_key) DO UPDATE SET thread_id = EXCLUDED.thread_id,
                    latest_id = EXCLUDED.latest_id, metadata = {self._owned},
                    status = EXCLUDED.status, interrupts = EXCLUDED.interrupts,
                    checkpoints = EXCLUDED.checkpoints, bytes = EXCLUDED.bytes""",
                {
                    "tk": tk,
                    "tid": tid,
                    "latest": latest,
                    "meta": Jsonb(meta or {}),
                    "status": found.status,
                    "int": Jsonb(interrupts_json(found.interrupts)),
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
            FROM (SELECT t.thread_key FROM {self._th} t
                WHERE t.thread_key > %s AND t.thread_id IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM {self._ix} i WHERE i.thread_key = t.thread_key)
                ORDER BY t.thread_key LIMIT %s) t
            LEFT JOIN {self._ck} c ON c.thread_key = t.thread_key AND c.checkpoint_ns = ''
                AND NOT c.replay_only
            GROUP BY t.thread_key ORDER BY t.thread_key""",
            (cursor or b"", batch_size),
            fetch=True,
        )
        tks = [bytes(r[0]) for r in rows]
        yield from self.refresh(tks)
        times = backfill_times(rows)
        if times:
            yield Query(
                f"""UPDATE {self._ix} i SET created_at = to_timestamp(v.c),
                    updated_at = to_timestamp(v.u)
                FROM unnest(%s::bytea[], %s::float8[], %s::float8[]) AS v(tk, c, u)
                WHERE i.thread_key = v.tk""",
                ([t[0] for t in times], [t[1] for t in times], [t[2] for t in times]),
            )
        indexed: Rows = yield Query(
            f"SELECT count(*) FROM {self._ix} WHERE thread_key = ANY(%s)", (tks,), fetch=True
        )
        done = len(rows) < batch_size
        return ReindexBatch(len(rows), int(indexed[0][0]), None if done else tks[-1])

    # -- reads ----------------------------------------------------------------------------

    def _where(self, query: ThreadQuery) -> tuple[str, list[Any]]:
        """The filter on the index row alone: with only an indexed key and a status, it
        reads nothing but the columns of that key's covering index."""
        wheres, params = [LISTED], list[Any]()
        if query.indexed is not None:
            key, form = query.indexed
            wheres.append(f"i.{key_column(key)} = %s::jsonb")
            params.append(form)
        rest = {
            k: v for k, v in query.metadata.items() if not query.indexed or k != query.indexed[0]
        }
        for key, value in rest.items():
            wheres.append("i.metadata -> %s = %s::jsonb")
            params.extend([key, json.dumps(value)])
        if query.status is not None:
            wheres.append("i.status = %s")
            params.append(query.status)
        if query.ids is not None:
            wheres.append("i.thread_key = ANY(%s)")
            params.append([thread_key(t) for t in query.ids])
        return " AND ".join(wheres), params

    def search(self, query: ThreadQuery) -> Plan[Query, list[StoredRecord]]:
        """The page's keys first (an index-only walk past ``offset`` entries, as the
        hosted server's offset paging), then only those rows."""
        where, params = self._where(query)
        order = "DESC" if query.sort_order == "desc" else "ASC"
        sort = _ORDER[query.sort_by]
        tail = f"ORDER BY {sort} {order}, i.thread_key {order}"
        rows: Rows = yield Query(
            f"""WITH page AS MATERIALIZED (SELECT i.thread_key FROM {self._ix} i WHERE {where}
                {tail} LIMIT {int(query.limit)} OFFSET {int(query.offset)})
            SELECT {_COLUMNS} FROM page JOIN {self._ix} i ON i.thread_key = page.thread_key
            {tail}""",
            params,
            fetch=True,
            standalone=True,
        )
        return [_stored(r) for r in rows]

    def count(self, query: ThreadQuery) -> Plan[Query, int]:
        where, params = self._where(query)
        rows: Rows = yield Query(
            f"SELECT count(*) FROM {self._ix} i WHERE {where}",
            params,
            fetch=True,
            standalone=True,
        )
        return int(rows[0][0])

    def get(self, thread_id: str) -> Plan[Query, StoredRecord | None]:
        rows: Rows = yield Query(
            f"""SELECT {_COLUMNS} FROM {self._ix} i JOIN {self._th} t
                ON t.thread_key = i.thread_key WHERE {self._visible} AND i.thread_key = %s""",
            (thread_key(thread_id),),
            fetch=True,
            standalone=True,
        )
        return _stored(rows[0]) if rows else None

    def transcript(
        self, thread_id: str, owner: str | None, limit: int, offset: int
    ) -> Plan[Query, list[tuple[str, str, str, float]]]:
        rows: Rows = yield Query(
            f"""SELECT message_id, role, content, extract(epoch FROM created_at) FROM {self._tx}
            WHERE thread_key = %(tk)s AND (expires_at IS NULL OR expires_at > now())
                AND (%(owner)s::text IS NULL OR owner = %(owner)s)
            ORDER BY seq LIMIT %(limit)s OFFSET %(offset)s""",
            {"tk": thread_key(thread_id), "owner": owner, "limit": limit, "offset": offset},
            fetch=True,
            standalone=True,
        )
        return [(i, r, c, float(t)) for i, r, c, t in rows]
