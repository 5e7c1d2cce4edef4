"""The PostgreSQL checkpointer's operations as plans: SQL to send, rows to decode.

Nothing here touches a connection; :mod:`.saver` runs these plans with a blocking or an
async cursor. Every statement is parameterized; the only text put into SQL is the schema
name, checked by :func:`.schema.quote_schema`.

Writes are single statements where they can be (a checkpoint, its blobs and the
thread's TTL go in one round trip), and each plan runs in one transaction, so a
checkpoint is visible whole or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from psycopg.types.json import Jsonb

from ...drivers.migrations import SchemaVersion, advisory_lock_id, migrate, recorded_version
from ...drivers.pgarrays import ByteaArray, TextArray
from ...drivers.plan import Plan
from ...drivers.postgres import Query, Rows, compact_sql
from ...errors import FencedWriteError, ValueTooLargeError
from ...threads.core import RecordInput, owner_digest, writes_of_interest
from ...threads.postgres import EXPIRY_MIGRATION, STATUS_MIGRATION, PostgresThreadIndex
from ...threads.postgres import MIGRATION as THREAD_INDEX_MIGRATION
from .. import task_writes
from ..codec import (
    EMPTY,
    JSON_METADATA,
    ChainLink,
    CheckpointCodec,
    EncodedCheckpoint,
    EncodedWrite,
    StoredCheckpoint,
    inline_values,
    json_safe,
    metadata_matches,
    plain_versions,
    version_text,
)
from ..config import ListQuery, SaverSettings, Target, deletion_id, thread_key
from ..fence import Claim, FenceState
from ..lists import LIST_TYPE, NODE_TYPE, ListRequest
from .schema import (
    ERASED_MIGRATION,
    FENCE_MIGRATION,
    FRESH,
    MIGRATIONS,
    OWNER_MIGRATION,
    REFUSED_MIGRATION,
    quote_schema,
)

logger = logging.getLogger("langgraph_memory_plus.checkpoint.postgres")

CHECKPOINT_MIGRATIONS = (
    *MIGRATIONS,
    THREAD_INDEX_MIGRATION,
    STATUS_MIGRATION,
    EXPIRY_MIGRATION,
    REFUSED_MIGRATION,
    FENCE_MIGRATION,
    ERASED_MIGRATION,
    OWNER_MIGRATION,
)
"""Every migration of the checkpoint tables, the thread index's included: the version
``setup()`` brings a schema to is ``len(CHECKPOINT_MIGRATIONS) - 1``."""

# PostgreSQL refuses a field over 1 GiB and a message over 1 GiB; stay clear of both.
MAX_VALUE_BYTES = 512 * 1024 * 1024
MAX_STATEMENT_BYTES = 1000 * 1024 * 1024
ERASED_LOCK = 0x6C676D70  # "lgmp": the advisory lock space of erased users' holds

# A thread's expiry is moved on a write only when it lags the exact value by more than
# this share of the TTL (and at most this many seconds), so a burst of writes updates the
# thread row once instead of queueing on it.
TTL_SLACK = 0.1
MAX_TTL_SLACK_SECONDS = 5.0

# How long a deleted thread's tombstone keeps refusing late writes of its old history.
TOMBSTONE_HOURS = 24

# Rows of a delta-history walk are bounded so a corrupt parent cycle cannot spin forever.
MAX_CHAIN_DEPTH = 1_000_000


def _thread_id_bytes(thread_id: str) -> bytes:
    return thread_id.encode("utf-8", "surrogatepass")


def _thread_id_text(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


def _text(items: Sequence[str]) -> TextArray | None:
    """``items`` as a ``text[]`` parameter, an empty list as NULL: ``unnest`` and ``= ANY``
    read both alike, and NULL needs no array built, looked up a dumper for and packed
    (a put sends up to nine arrays, and four in ten of them are empty)."""
    return TextArray(items) if items else None


def _bytea(items: Sequence[bytes | None]) -> ByteaArray | None:
    """:func:`_text` for a ``bytea[]`` parameter."""
    return ByteaArray(items) if items else None


def _check_record(record: bytes, task_id: str) -> None:
    # each value is checked on its own when serialized; a bytea holds at most 1 GB
    if len(record) > MAX_STATEMENT_BYTES:
        raise ValueTooLargeError(
            f"the pending writes of task {task_id!r} together", len(record), MAX_STATEMENT_BYTES
        )


def _write_rows(
    task_ids: list[str] | None, paths: list[str] | None, records: list[bytes] | None
) -> list[task_writes.WriteRow]:
    """The aggregated ``lgmp_task_writes`` rows of a checkpoint, one row per write."""
    if not task_ids or not paths or not records:
        return []
    return [
        row
        for task_id, path, record in zip(task_ids, paths, records, strict=True)
        for row in task_writes.rows(task_id, path, record)
    ]


def _ambiguous(value: Any) -> bool:
    """Whether ``value`` holds a boolean or a number equal to 0 or 1 anywhere: Python
    takes ``True == 1 == 1.0``, ``jsonb`` containment tells ``true`` from ``1``."""
    if isinstance(value, (bool, int, float)):
        return isinstance(value, bool) or value in (0, 1)
    if isinstance(value, Mapping):
        return any(_ambiguous(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_ambiguous(v) for v in value)
    return False


def _narrowing(
    flt: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """What ``list(filter=...)`` asks of ``metadata_json``, each part a superset of
    InMemorySaver's equality.

    Returns one containment document, pairs of documents of which a row must contain
    either (``{k: 1}`` or ``{k: true}``, for a top-level boolean, 0 or 1).
    Left to the check in Python: ``None`` (a missing key matches it) and containers that
    hold a boolean, 0 or 1 (containment compares those by type).
    """
    contained: dict[str, Any] = {}
    either: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for key, value in (flt or {}).items():
        name = json_safe(str(key))
        if value is None:
            continue
        if not _ambiguous(value):
            contained[name] = json_safe(value)
        elif isinstance(value, (bool, int, float)):
            either.append(({name: int(value)}, {name: bool(value)}))
    return contained, either


class PostgresCheckpointPlans:
    """SQL and decoding for one schema and one set of saver settings."""

    max_value_bytes = MAX_VALUE_BYTES
    # a blob row and its index entry cost ~300 bytes; an inline None or counter ~20
    inline_scalars = True
    metadata_as_json = True

    def __init__(self, schema: str, settings: SaverSettings) -> None:
        s = quote_schema(schema)
        self.schema = schema
        self.settings = settings
        self._ck = f"{s}.lgmp_checkpoints"
        self._th = f"{s}.lgmp_threads"
        self._bl = f"{s}.lgmp_blobs"
        self._wr = f"{s}.lgmp_task_writes"
        self._it = f"{s}.lgmp_items"
        self._fe = f"{s}.lgmp_fences"
        # What a thread's history is stored in, by thread key and namespace.
        self._history = (self._wr, self._ck, self._bl, self._it)
        self._s = s
        self.version = SchemaVersion(s, "lgmp_checkpoint_migrations", CHECKPOINT_MIGRATIONS)
        # The thread row a write creates or refreshes. It is also the lock that orders a
        # write against delete_thread; it returns the tombstone left by a deletion.
        # ``was_expired`` is read from the row as locked (``prior``, run first: the insert
        # reads its count), not as the statement's snapshot has it: a write that waited
        # for the row behind another writer's revival (a step's put beside its tasks'
        # put_writes) would find the pre-revival row there, expired, and revive the
        # thread again, purging the reviver's new checkpoint and what later steps stored,
        # and refreshing the index from what was left (tests/test_pg_revive_race.py).
        # In READ COMMITTED a locking read waits for the row's writer and returns the
        # row as it committed. Same lock as the upsert's (no key is updated), same order.
        self._upsert_thread_ctes = f"""prior AS (
                SELECT o.expires_at <= now() AS was_expired FROM {self._th} o
                WHERE o.thread_key = %(tk)s FOR NO KEY UPDATE
            ), thread AS (
                INSERT INTO {self._th} AS t (thread_key, thread_id, expires_at, owner)
                SELECT %(tk)s, %(tid)s, now() + make_interval(secs => %(ttl)s), %(owner)s
                WHERE (SELECT count(*) FROM prior) >= 0
                ON CONFLICT (thread_key) DO UPDATE SET
                    thread_id = EXCLUDED.thread_id,
                    expires_at = EXCLUDED.expires_at,
                    -- an expired thread starts over: its owner in waiting was the old one's
                    owner = CASE WHEN t.expires_at <= now() THEN EXCLUDED.owner
                        WHEN t.thread_id IS NULL THEN coalesce(EXCLUDED.owner, t.owner)
                        ELSE t.owner END
                RETURNING t.live_after, t.refused, t.expires_at,
                    coalesce((SELECT p.was_expired FROM prior p), false) AS was_expired
            )"""
        self._visible = "t.thread_id IS NOT NULL AND (t.expires_at IS NULL OR t.expires_at > now())"
        self.threads = PostgresThreadIndex(
            s,
            settings.index_keys,
            self._visible,
            _write_rows,
            settings.transcript_ttl_seconds,
            settings.transcripts,
        )
        # A put that names its parent's rows (``on_parent``: the blobs of channels it
        # left unchanged, the items its lists build on) is written only while its parent
        # is stored (``go``; else the caller stores it whole). The parent is read with a
        # lock: a write that revived the expired thread, or a trim, may have removed it
        # after this statement's snapshot, and a lock returns the row as committed (none
        # then); removed later, the remover waits for this put and sees its checkpoint,
        # so it keeps what the checkpoint names. The thread's index row is locked first
        # (``held``): removers hold it before they remove (see ``held_cte``); both only
        # once the thread's row is (``ok``).
        self._put_payload = f"""
            {self.threads.held_cte}, parent AS (
                SELECT p.delta_seeds FROM {self._ck} p
                WHERE p.thread_key = %(tk)s AND p.checkpoint_ns = %(ns)s
                    AND p.checkpoint_id = %(parent)s
                    AND EXISTS (SELECT 1 FROM ok) AND (SELECT count(*) FROM held) >= 0
                FOR KEY SHARE
            ), go AS (
                SELECT 1 FROM ok WHERE NOT %(on_parent)s OR EXISTS (SELECT 1 FROM parent)
            ), blobs AS (
                INSERT INTO {self._bl} (thread_key, checkpoint_ns, channel, version, type, blob)
                SELECT %(tk)s, %(ns)s, b.channel, b.version, b.type, b.blob
                FROM unnest(%(b_ch)b::text[], %(b_ver)b::text[], %(b_ty)b::text[],
                            %(b_bl)b::bytea[]) AS b(channel, version, type, blob)
                WHERE EXISTS (SELECT 1 FROM go)
                ON CONFLICT (thread_key, checkpoint_ns, channel, version)
                    DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
            ), items AS (
                INSERT INTO {self._it} (thread_key, checkpoint_ns, item_id, type, data)
                SELECT %(tk)s, %(ns)s, i.id, i.type, i.data
                FROM unnest(%(i_id)b::bytea[], %(i_ty)b::text[], %(i_bl)b::bytea[])
                    AS i(id, type, data)
                WHERE EXISTS (SELECT 1 FROM go)
                ON CONFLICT DO NOTHING
            ), saved AS (
                INSERT INTO {self._ck} (thread_key, checkpoint_ns, checkpoint_id,
                    parent_checkpoint_id, run_id, checkpoint_type, checkpoint, metadata_type,
                    metadata, metadata_json, channel_versions, delta_seeds)
                SELECT %(tk)s, %(ns)s, %(id)s, %(parent)s, %(run_id)s, %(c_type)s, %(c_blob)s,
                    %(m_type)s, %(m_blob)s, %(m_json)s, %(versions)s,
                    (
                        SELECT jsonb_object_agg(d.ch, CASE WHEN d.ch = ANY(%(valued)b::text[])
                            THEN %(id)s
                            ELSE coalesce((SELECT p.delta_seeds ->> d.ch FROM parent p), '') END)
                        FROM (
                            SELECT unnest(%(delta)b::text[]) AS ch
                            UNION
                            SELECT k FROM parent p
                            CROSS JOIN LATERAL jsonb_object_keys(p.delta_seeds) k
                            WHERE %(versions)s::jsonb ? k
                        ) d
                    )
                FROM go
                ON CONFLICT (thread_key, checkpoint_ns, checkpoint_id) DO UPDATE SET
                    parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
                    run_id = EXCLUDED.run_id,
                    checkpoint_type = EXCLUDED.checkpoint_type,
                    checkpoint = EXCLUDED.checkpoint,
                    metadata_type = EXCLUDED.metadata_type,
                    metadata = EXCLUDED.metadata,
                    metadata_json = EXCLUDED.metadata_json,
                    channel_versions = EXCLUDED.channel_versions,
                    delta_seeds = EXCLUDED.delta_seeds
                RETURNING (xmax = 0) AS fresh
            )"""
        # A task's second call finds its row taken; put_writes then merges (see there).
        self._writes_payload = f"""
            written AS (
                INSERT INTO {self._wr} (thread_key, checkpoint_ns, checkpoint_id, task_id,
                    task_path, writes)
                SELECT %(tk)s, %(ns)s, %(id)s, %(task_id)s, %(path)s, %(writes)s
                FROM ok
                ON CONFLICT DO NOTHING
                RETURNING 1
            )"""
        self._put_payload += f", {self.threads.put_cte}"
        self._writes_sql: dict[tuple[str, str, bool, bool], str] = {}
        self._writes_flagged = f"{self._writes_payload}, {self.threads.writes_cte}"

    # -- setup ------------------------------------------------------------------------

    def setup(self) -> Plan[Query, None]:
        return self.version.migrating(self._setup())

    def _setup(self) -> Plan[Query, None]:
        # Up to date (the usual case: every process start): reads only, no DDL, no lock
        # beyond ACCESS SHARE on the bookkeeping table (see .._migrations).
        found = yield from recorded_version(self._s, "lgmp_checkpoint_migrations")
        current = found is not None and found >= self.version.latest  # newer: a newer release's
        if current and not (yield from self.threads.missing()):
            return
        yield from migrate(
            self._s,
            "lgmp_checkpoint_migrations",
            advisory_lock_id("checkpoint", self.schema),
            CHECKPOINT_MIGRATIONS,
            [
                *(
                    statement.format(s=self._s)
                    for statement in (*FRESH, *FENCE_MIGRATION, *ERASED_MIGRATION, *OWNER_MIGRATION)
                ),
                *self.threads.fresh(),
            ],
            self.threads.missing,
        )

    # -- erased users -----------------------------------------------------------------

    def unless_erased(
        self, owner: str | None, write: Plan[Query, None], target: Target, checkpoint_id: str
    ) -> Plan[Query, bool | None]:
        """``write``, unless ``owner`` (a user key's indexed form) is held by an erasure
        (then ``False``: nothing was written, and :meth:`drop_orphan_writes` of the
        checkpoint the write was for, ``checkpoint_id`` in ``target``'s namespace).

        The write takes a shared advisory lock on the owner first and the hold takes it
        exclusively: an erasure's hold waits for the user's writes under way to commit
        (so its search finds their threads), and every later write sees the hold (read
        by a statement after the lock, so with a snapshot after the hold's commit).
        """
        if owner is None:
            yield from write
            return None
        yield Query(
            "SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))",
            (ERASED_LOCK, owner_digest(owner)),
        )
        rows: Rows = yield Query(
            f"SELECT 1 FROM {self._s}.lgmp_erased WHERE owner = %s AND until > now()",
            (owner_digest(owner),),
            fetch=True,
        )
        if rows:
            logger.warning("dropped a write of a run whose user was erased")
            yield from self.drop_orphan_writes(target, checkpoint_id, owner)
            return False
        yield from write
        return None

    def drop_orphan_writes(
        self, target: Target, checkpoint_id: str, owner: str
    ) -> Plan[Query, None]:
        """:meth:`CheckpointPlans.drop_orphan_writes`, in the dropped write's transaction.

        Locks as a remover does (thread row, then index row), before the writes' rows
        that a concurrent put_writes of the thread takes after its thread row.
        """
        tk = target.thread_key
        params = {"tk": tk, "ns": target.checkpoint_ns, "id": checkpoint_id}
        yield from self._lock_for_removal([tk])
        gone: Rows = yield Query(
            f"""
            DELETE FROM {self._wr} w WHERE w.thread_key = %(tk)s AND w.checkpoint_ns = %(ns)s
                AND w.checkpoint_id = %(id)s
                AND NOT EXISTS (SELECT 1 FROM {self._ck} c WHERE c.thread_key = %(tk)s
                    AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = %(id)s)
            RETURNING 1""",
            params,
            fetch=True,
        )
        if not gone:
            return
        # Emptied: a row with no tombstone goes (a nameless one would take the next
        # put's fast path, which never sets the id); a tombstone's loses its id.
        yield Query(
            f"""DELETE FROM {self._th} WHERE thread_key = %(tk)s AND live_after IS NULL
                AND NOT EXISTS (SELECT 1 FROM {self._ck} WHERE thread_key = %(tk)s)
                AND NOT EXISTS (SELECT 1 FROM {self._wr} WHERE thread_key = %(tk)s)""",
            params,
        )
        yield self._nameless_if_empty(params)
        yield from self.threads.refresh([tk])

    def _nameless_if_empty(self, params: dict[str, Any]) -> Query:
        """The thread ``params["tk"]``, left with no checkpoints and no writes, becomes
        a tombstone again: no id, no expiry."""
        return Query(
            f"""UPDATE {self._th} SET thread_id = NULL, expires_at = NULL, owner = NULL
            WHERE thread_key = %(tk)s
                AND NOT EXISTS (SELECT 1 FROM {self._ck} WHERE thread_key = %(tk)s)
                AND NOT EXISTS (SELECT 1 FROM {self._wr} WHERE thread_key = %(tk)s)""",
            params,
        )

    def pending_threads(
        self, owner: str, cursor: Any, limit: int, forget: bool
    ) -> Plan[Query, tuple[list[str], Any]]:
        """:meth:`CheckpointPlans.pending_threads`: rows whose writes named ``owner``
        and that have no root checkpoint (no put filed them: interrupt and error writes
        alone make an index row, with no user in it), by thread key after ``cursor``.
        ``forget`` (first page): ``owner``'s marks on threads a put filed since (under
        another user: the index's; the owner's own were deleted by the index's pages)
        are cleared, so that no row keeps the erased user's id."""
        if forget and cursor is None:
            yield Query(
                f"""UPDATE {self._th} t SET owner = NULL
                WHERE t.owner = %s AND EXISTS (SELECT 1 FROM {self._ck} c
                    WHERE c.thread_key = t.thread_key AND c.checkpoint_ns = '')""",
                (owner,),
            )
        rows: Rows = yield Query(
            f"""SELECT t.thread_key, t.thread_id FROM {self._th} t
            WHERE t.owner = %s AND t.thread_key > %s AND t.thread_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM {self._ck} c
                    WHERE c.thread_key = t.thread_key AND c.checkpoint_ns = '')
            ORDER BY t.owner, t.thread_key LIMIT %s""",
            (owner, b"" if cursor is None else cursor, limit),
            fetch=True,
        )
        ids = [bytes(tid).decode("utf-8", "surrogatepass") for _, tid in rows]
        return ids, (bytes(rows[-1][0]) if len(rows) == limit else None)

    def forget_pending(self, owner: str, thread_ids: Sequence[str]) -> Plan[Query, None]:
        """Nothing: the mark is the thread row's, cleared by its deletion."""
        return
        yield

    def hold_erased(self, owner: str, seconds: float) -> Plan[Query, None]:
        """Refuse ``owner``'s writes for ``seconds`` (longer holds win)."""
        yield Query(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (ERASED_LOCK, owner_digest(owner))
        )
        yield Query(
            f"""INSERT INTO {self._s}.lgmp_erased AS e (owner, until)
            VALUES (%s, now() + make_interval(secs => %s))
            ON CONFLICT (owner) DO UPDATE SET until = greatest(e.until, excluded.until)""",
            (owner_digest(owner), seconds),
        )
        yield Query(f"DELETE FROM {self._s}.lgmp_erased WHERE until <= now()")

    def lift_erased(self, owner: str) -> Plan[Query, bool]:
        """End ``owner``'s hold; whether there was one."""
        rows: Rows = yield Query(
            f"DELETE FROM {self._s}.lgmp_erased WHERE owner = %s AND until > now() RETURNING 1",
            (owner_digest(owner),),
            fetch=True,
        )
        return bool(rows)

    # -- reads ------------------------------------------------------------------------

    def _select(self, where: str, limit: str) -> str:
        """Checkpoints with their blobs and writes; ``where``/``limit`` pick the page first."""
        return f"""
            SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
                   c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata, c.thread_key,
                   bl.channels, bl.types, bl.blobs, wr.task_ids, wr.paths, wr.writes,
                   c.channel_versions,
                   CASE WHEN c.metadata_type = '{JSON_METADATA}' THEN c.metadata_json END
            FROM (
                SELECT c.*, t.thread_id
                FROM {self._ck} c JOIN {self._th} t ON t.thread_key = c.thread_key
                WHERE {self._visible} AND NOT c.replay_only AND {where}
                ORDER BY c.checkpoint_id DESC, c.thread_key DESC, c.checkpoint_ns DESC
                {limit}
            ) c
            LEFT JOIN LATERAL (
                SELECT array_agg(b.channel) AS channels, array_agg(b.type) AS types,
                       array_agg(b.blob) AS blobs
                FROM jsonb_each(c.channel_versions) v
                CROSS JOIN LATERAL (
                    -- one primary-key probe per channel, never a scan of the thread's blobs
                    SELECT b.channel, b.type, b.blob FROM {self._bl} b
                    WHERE b.thread_key = c.thread_key AND b.checkpoint_ns = c.checkpoint_ns
                        AND b.channel = v.key AND b.version = v.value #>> '{{}}'
                    LIMIT 1
                ) b
                WHERE jsonb_typeof(v.value) <> 'array' -- an inline value has no blob
            ) bl ON true
            LEFT JOIN LATERAL (
                SELECT array_agg(w.task_id) AS task_ids, array_agg(w.task_path) AS paths,
                       array_agg(w.writes) AS writes
                FROM {self._wr} w
                WHERE w.thread_key = c.thread_key AND w.checkpoint_ns = c.checkpoint_ns
                    AND w.checkpoint_id = c.checkpoint_id
            ) wr ON true
            ORDER BY c.checkpoint_id DESC, c.thread_key DESC, c.checkpoint_ns DESC"""

    @staticmethod
    def _stored(row: tuple[Any, ...]) -> StoredCheckpoint:
        (tid, ns, cid, parent, ctype, cblob, mtype, mblob, _tk,
         b_ch, b_ty, b_bl, w_task, w_path, w_packed, versions, meta_json) = row  # fmt: skip
        return StoredCheckpoint(
            thread_id=_thread_id_text(tid),
            checkpoint_ns=ns,
            checkpoint_id=cid,
            parent_id=parent,
            checkpoint=(ctype, cblob),
            metadata=(mtype, mblob),
            blobs=list(zip(b_ch, b_ty, b_bl, strict=True)) if b_ch else [],
            writes=_write_rows(w_task, w_path, w_packed),
            channel_versions=versions,
            metadata_json=meta_json,
        )

    def _refresh(self, keys: list[bytes]) -> Query:
        return Query(
            f"UPDATE {self._th} SET expires_at = now() + make_interval(secs => %s) "
            "WHERE thread_key = ANY(%s) AND expires_at IS NOT NULL",
            (self.settings.ttl_seconds, keys),
            standalone=True,
        )

    def get_tuple(
        self, codec: CheckpointCodec, target: Target
    ) -> Plan[Query, CheckpointTuple | None]:
        params: list[Any] = [target.thread_key, target.checkpoint_ns]
        where = "c.thread_key = %s AND c.checkpoint_ns = %s"
        if target.checkpoint_id is not None:
            where += " AND c.checkpoint_id = %s"
            params.append(target.checkpoint_id)
        rows: Rows = yield Query(
            self._select(where, "LIMIT 1"), params, fetch=True, standalone=True
        )
        if not rows:
            return None
        if self.settings.refresh_on_read and self.settings.ttl_seconds is not None:
            yield self._refresh([rows[0][8]])
        return (yield from codec.decode_stored(self._stored(rows[0]), None, self._fetch_list))

    def list_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Query, tuple[list[CheckpointTuple], ListQuery | None]]:
        if query.limit is not None and query.limit <= 0:
            return [], None
        wheres = ["true"]
        params: list[Any] = []
        if query.thread_id is not None:
            wheres.append("c.thread_key = %s")
            params.append(thread_key(query.thread_id))
        if query.checkpoint_ns is not None:
            wheres.append("c.checkpoint_ns = %s")
            params.append(query.checkpoint_ns)
        if query.checkpoint_id is not None:
            wheres.append("c.checkpoint_id = %s")
            params.append(query.checkpoint_id)
        if query.before is not None:
            wheres.append("c.checkpoint_id < %s")
            params.append(query.before)
        # The database narrows by containment; the exact check runs on the decoded
        # metadata (see ``_narrowing``).
        contained, either = _narrowing(codec.narrowing(query.filter))
        if contained:
            wheres.append("c.metadata_json @> %s")
            params.append(Jsonb(contained))
        for number, truth in either:
            wheres.append("(c.metadata_json @> %s OR c.metadata_json @> %s)")
            params.extend((Jsonb(number), Jsonb(truth)))
        if query.after is not None:
            wheres.append("(c.checkpoint_id, c.thread_key, c.checkpoint_ns) < (%s, %s, %s)")
            params.extend(query.after)
        # Pages carry every row's blobs, so they stay as small as the limit even when a key
        # is left to the check in Python (``None`` mostly matches the first rows anyway).
        size = page_size if query.limit is None else min(page_size, query.limit)
        rows: Rows = yield Query(
            self._select(" AND ".join(wheres), f"LIMIT {int(size)}"),
            params,
            fetch=True,
            standalone=True,
        )
        page: list[CheckpointTuple] = []
        for row in rows:
            stored = self._stored(row)
            metadata = codec.decode_metadata(stored)
            if metadata_matches(metadata, query.filter):
                page.append((yield from codec.decode_stored(stored, metadata, self._fetch_list)))
        if page and self.settings.refresh_on_read and self.settings.ttl_seconds is not None:
            yield self._refresh(sorted({row[8] for row in rows}))
        limit = None if query.limit is None else query.limit - len(page)
        if len(rows) < size or limit == 0:
            return page, None
        last = rows[-1]
        return page, ListQuery(
            query.thread_id,
            query.checkpoint_ns,
            query.checkpoint_id,
            query.filter,
            query.before,
            limit,
            after=(last[2], last[8], last[1]),
        )

    def delta_history(
        self, codec: CheckpointCodec, target: Target, channels: Sequence[str]
    ) -> Plan[Query, dict[str, DeltaChannelHistory]]:
        """Walk the parent chain in one recursive query, stopping per channel at its seed."""
        seeded = f"""(coalesce(jsonb_typeof(chain.channel_versions -> r), '') = 'array'
                OR EXISTS (SELECT 1 FROM {self._bl} b
                    WHERE b.thread_key = %(tk)s AND b.checkpoint_ns = %(ns)s AND b.channel = r
                    AND b.version = chain.channel_versions ->> r AND b.type <> '{EMPTY}'))"""
        pick = "AND c.checkpoint_id = %(id)s" if target.checkpoint_id else ""
        rows: Rows = yield Query(
            f"""
            WITH RECURSIVE target AS (
                SELECT c.parent_checkpoint_id
                FROM {self._ck} c JOIN {self._th} t ON t.thread_key = c.thread_key
                WHERE {self._visible} AND NOT c.replay_only
                    AND c.thread_key = %(tk)s AND c.checkpoint_ns = %(ns)s {pick}
                ORDER BY c.checkpoint_id DESC LIMIT 1
            ), chain AS (
                SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions,
                       1 AS depth, %(channels)b::text[] AS remaining
                FROM target JOIN {self._ck} c ON c.thread_key = %(tk)s
                    AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = target.parent_checkpoint_id
                UNION ALL
                SELECT p.checkpoint_id, p.parent_checkpoint_id, p.channel_versions,
                       chain.depth + 1, nxt.remaining
                FROM chain
                CROSS JOIN LATERAL (
                    SELECT array_agg(r) AS remaining FROM unnest(chain.remaining) r
                    WHERE NOT {seeded}
                ) nxt
                JOIN {self._ck} p ON p.thread_key = %(tk)s AND p.checkpoint_ns = %(ns)s
                    AND p.checkpoint_id = chain.parent_checkpoint_id
                WHERE nxt.remaining IS NOT NULL AND chain.depth < {MAX_CHAIN_DEPTH}
            )
            SELECT chain.checkpoint_id, s.channels, s.types, s.blobs,
                   w.task_ids, w.paths, w.writes, chain.channel_versions
            FROM chain
            LEFT JOIN LATERAL (
                SELECT array_agg(b.channel) AS channels, array_agg(b.type) AS types,
                       array_agg(b.blob) AS blobs
                FROM unnest(chain.remaining) r
                JOIN {self._bl} b ON b.thread_key = %(tk)s AND b.checkpoint_ns = %(ns)s
                    AND b.channel = r AND b.version = chain.channel_versions ->> r
                    AND b.type <> '{EMPTY}'
            ) s ON true
            LEFT JOIN LATERAL (
                SELECT array_agg(w.task_id) AS task_ids, array_agg(w.task_path) AS paths,
                       array_agg(w.writes) AS writes
                FROM {self._wr} w
                WHERE w.thread_key = %(tk)s AND w.checkpoint_ns = %(ns)s
                    AND w.checkpoint_id = chain.checkpoint_id
            ) w ON true
            ORDER BY chain.depth""",
            {
                "tk": target.thread_key,
                "ns": target.checkpoint_ns,
                "id": target.checkpoint_id,
                "channels": list(channels),
            },
            fetch=True,
            standalone=True,
        )
        chain = [
            ChainLink(
                checkpoint_id=cid,
                seeds={
                    **inline_values(versions),
                    **(
                        {ch: (t, b) for ch, t, b in zip(s_ch, s_ty, s_bl, strict=True)}
                        if s_ch
                        else {}
                    ),
                },
                writes=_write_rows(w_task, w_path, w_packed),
                versions={ch: version_text(v) for ch, v in plain_versions(versions or {}).items()},
            )
            for cid, s_ch, s_ty, s_bl, w_task, w_path, w_packed, versions in rows
        ]
        seeds = [(ch, typ, data) for link in chain for ch, (typ, data) in link.seeds.items()]
        lists = yield from codec.resolve_lists(
            target.thread_id, target.checkpoint_ns, seeds, self._fetch_list
        )
        return codec.delta_history(channels, chain, lists, target.thread_id, target.checkpoint_ns)

    # -- writes -----------------------------------------------------------------------

    def _thread_params(self, target: Target) -> dict[str, Any]:
        ttl = self.settings.ttl_seconds
        return {
            "tk": target.thread_key,
            "tid": _thread_id_bytes(target.thread_id),
            "ttl": ttl,
            "slack": None if ttl is None else min(ttl * TTL_SLACK, MAX_TTL_SLACK_SECONDS),
            "ns": target.checkpoint_ns,
            "owner": None,  # a put's: the thread index files the thread
        }

    def _thread_ctes(self, fast: bool, fenced: bool = False) -> str:
        """The ``thread`` and ``ok`` CTEs that open a write statement; see :meth:`_write`.

        ``fenced``: ``ok`` also needs the write's owner and number to be the thread's:
        ``fence`` share-locks the fence row until the statement commits, so a takeover
        waits for it, and a write that waited behind a takeover reads the new owner.
        Locks are taken thread row first, fence row second, as ``delete_thread`` takes
        them, and only with the thread row held (``fence`` reads ``thread`` first): a
        write that holds the fence never waits for the thread row, so the two never
        wait on each other crosswise, in a transaction of many statements neither.
        Fenced, the fast statement inserts no thread row: a row inserted on the claim as
        read, before the locked check refused it (a takeover or a deletion committed in
        between), would stay, committed with the statement. It declines instead, telling
        from ``claim`` (the fence row as the snapshot has it) whether the claim may hold,
        and the locked path inserts the row in a transaction a refusal rolls back.
        """
        if not fast:
            if not fenced:
                return f"{self._upsert_thread_ctes}, ok AS (SELECT 1 FROM thread)"
            return f"""{self._upsert_thread_ctes}, {self._fence_cte()},
                ok AS (SELECT 1 FROM thread WHERE EXISTS (SELECT 1 FROM fence))"""
        cur = f"""cur AS (
                SELECT t.live_after, t.refused, t.expires_at
                FROM {self._th} t WHERE t.thread_key = %(tk)s FOR KEY SHARE
            )"""
        head, gate, fence, held = cur, "", "", ""
        if fenced:
            head = f"""{cur}, claim AS (
                SELECT 1 FROM {self._fe} WHERE thread_key = %(tk)s AND owner = %(f_owner)s
                    AND token = %(f_token)s
            )"""
            gate, held = " AND false", " AND EXISTS (SELECT 1 FROM fence)"
            fence = f", {self._fence_cte()}"
        # ``touch`` (the expiry's refresh) runs before the payload locks any row: every
        # payload CTE reads ``ok``, which reads ``touch``'s count first. So the thread row
        # is locked before the thread index's row, as on every other path (the slow
        # statement's upsert, a read's refresh, a deletion, the sweep: their expiry
        # trigger updates the index row with the thread row held). SKIP LOCKED alone did
        # not keep that order: when the row version the statement's snapshot sees was
        # updated since, PostgreSQL follows the update chain and waits for whoever
        # updates the newest version, SKIP LOCKED or not; with the index row held by the
        # payload (``ix``), against a revival or a refresh holding the thread row and
        # waiting for that index row: DeadlockDetected (tests/test_pg_ttl_lock_order.py).
        # ``ins`` runs only when the snapshot holds no row (and never fenced, see above).
        # A racing writer's new row (a step's put beside its put_writes on a new thread)
        # is then a conflict: DO UPDATE waits for its commit and returns it, as
        # committed, locked (to the end of the statement's transaction).
        return f"""
            {head}, ins AS (
                INSERT INTO {self._th} AS t (thread_key, thread_id, expires_at, owner)
                SELECT %(tk)s, %(tid)s, now() + make_interval(secs => %(ttl)s), %(owner)s
                WHERE NOT EXISTS (SELECT FROM cur){gate}
                ON CONFLICT (thread_key) DO UPDATE SET expires_at = t.expires_at
                RETURNING live_after, refused, expires_at
            ), thread AS (
                SELECT *, t.expires_at <= now() IS TRUE AS was_expired
                FROM (SELECT * FROM ins UNION ALL SELECT * FROM cur) t
            ){fence}, allowed AS (
                SELECT 1 FROM thread WHERE live_after IS NULL AND NOT was_expired{held} LIMIT 1
            ), touch AS (
                -- SKIP LOCKED: a writer holding the row is refreshing the expiry itself;
                -- this one need not queue behind it.
                UPDATE {self._th} t SET expires_at = now() + make_interval(secs => %(ttl)s)
                WHERE t.thread_key IN (
                    SELECT l.thread_key FROM {self._th} l
                    WHERE l.thread_key = %(tk)s AND EXISTS (SELECT 1 FROM allowed)
                        AND NOT EXISTS (SELECT 1 FROM ins)
                        AND ((l.expires_at IS NULL) <> (%(ttl)s::float8 IS NULL)
                             OR l.expires_at < now() + make_interval(secs => %(ttl)s - %(slack)s))
                    FOR NO KEY UPDATE SKIP LOCKED)
                RETURNING 1
            ), ok AS (
                -- touch first (see above): every payload CTE reads ok
                SELECT 1 FROM allowed WHERE (SELECT count(*) FROM touch) >= 0
            )"""

    def _write_sql(self, payload: str, done: str, fast: bool, fenced: bool) -> str:
        """A write statement (see :meth:`_write`), built and compacted once per plans: the
        same string object every time also keeps its hash, which the runner's compaction
        cache and psycopg's query cache look it up by."""
        key = (payload, done, fast, fenced)
        sql = self._writes_sql.get(key)
        if sql is None:
            # fenced: whether the claim held, locked with the thread row, or as read
            # when there is no row (the fast statement then declines, see _thread_ctes)
            held = ", EXISTS (SELECT 1 FROM fence)" if fenced else ""
            if fenced and fast:
                held = """, CASE WHEN EXISTS (SELECT 1 FROM thread)
                    THEN EXISTS (SELECT 1 FROM fence) ELSE EXISTS (SELECT 1 FROM claim) END"""
            if fast:
                # only what the fast path reads: each column of a result costs the
                # client a loader per execution, and a write is most of a turn's calls
                tail = f"SELECT EXISTS (SELECT 1 FROM ok), EXISTS (SELECT 1 FROM {done}){held}"
            else:
                tail = f"""
                SELECT EXISTS (SELECT 1 FROM ok), EXISTS (SELECT 1 FROM {done}){held},
                       (SELECT live_after FROM thread LIMIT 1),
                       coalesce((SELECT bool_or(was_expired) FROM thread), false),
                       (SELECT refused FROM thread LIMIT 1)"""
            sql = compact_sql(f"WITH {self._thread_ctes(fast, fenced)}, {payload} {tail}")
            self._writes_sql[key] = sql
        return sql

    def _fence_cte(self) -> str:
        """The write's claim, share-locked once ``thread`` has run and only if it holds a
        row (the test is a one-time filter below the lock: nothing is locked without)."""
        return f"""fence AS (
                SELECT 1 FROM {self._fe} WHERE thread_key = %(tk)s AND owner = %(f_owner)s
                    AND token = %(f_token)s AND EXISTS (SELECT 1 FROM thread)
                FOR SHARE
            )"""

    def _write(
        self,
        params: dict[str, Any],
        payload: str,
        done: str,
        *,
        more: bool = False,
        fence: tuple[str, Claim] | None = None,
    ) -> Plan[Query, tuple[bool, str | None, list[str], bool, bool]]:
        """Run a write (``payload``: CTEs that insert when ``ok`` has a row).

        The fast path is one statement that takes only a shared lock on the thread row,
        so a step's concurrent put and put_writes don't queue behind each other, and
        refreshes the expiry only when it has drifted by more than the slack. It is
        standalone (autocommit, one round trip) unless ``more``: then the caller's
        statements that follow (retention) must commit with it or not at all, so it
        opens the plan's transaction instead.
        A new thread's row that a racing writer inserted meanwhile is waited for and
        taken as it committed (see :meth:`_thread_ctes`): the first step of every new
        thread, whose put and put_writes both create the row, costs no more round trips.
        Fenced, a new thread's first write takes the locked path (one statement more, in
        a transaction): a refusal leaves no row behind.
        It declines (writes nothing) when the thread is deleted or expired; then the
        locked path runs in a transaction and reports the tombstone (``live_after`` and
        the ``refused`` ids) and whether the thread had expired, for the caller to act on.
        Returns (fast path taken, live_after, refused, was_expired, whether the payload's
        ``done`` CTE returned a row).

        ``fence`` (thread id, claim): the statements write only if the claim holds (see
        :meth:`_thread_ctes`), and a claim that does not hold raises ``FencedWriteError``:
        the check costs no statement of its own.
        """
        fenced = fence is not None
        if fence is not None:
            params = {**params, "f_owner": fence[1].owner, "f_token": fence[1].token}
        fast = Query(
            self._write_sql(payload, done, True, fenced), params, fetch=True, standalone=not more
        )
        rows: Rows = yield fast
        if rows[0][0]:
            return True, None, [], False, rows[0][1]
        if fence is not None and not rows[0][2]:
            yield from self._refused_by_fence(*fence)
        rows = yield Query(self._write_sql(payload, done, False, fenced), params, fetch=True)
        if fence is not None and not rows[0][2]:
            yield from self._refused_by_fence(*fence)
        live_after, was_expired, refused = rows[0][-3:]
        return False, live_after, list(refused or ()), was_expired, rows[0][1]

    def put(
        self,
        target: Target,
        encoded: EncodedCheckpoint,
        record: RecordInput,
        fence: Claim | None = None,
    ) -> Plan[Query, bool]:
        sizes = (
            sum(len(b.data or b"") for b in encoded.blobs)
            + sum(len(data) for _, data in encoded.items.values())
            + len(encoded.checkpoint[1])
        )
        if sizes > MAX_STATEMENT_BYTES:
            raise ValueTooLargeError("the checkpoint's values together", sizes, MAX_STATEMENT_BYTES)
        params = self._thread_params(target)
        stored = [b for b in encoded.blobs if b.type != EMPTY]
        params.update(
            id=encoded.checkpoint_id,
            parent=encoded.parent_id,
            on_parent=encoded.refers,
            run_id=encoded.run_id,
            c_type=encoded.checkpoint[0],
            c_blob=encoded.checkpoint[1],
            m_type=encoded.metadata[0],
            m_blob=encoded.metadata[1],
            m_json=Jsonb(encoded.metadata_json),
            versions=Jsonb(encoded.versions_json),
            delta=_text(encoded.delta_channels),
            valued=_text(encoded.valued_channels),
            b_ch=_text([b.channel for b in stored]),
            b_ver=_text([b.version for b in stored]),
            b_ty=_text([b.type for b in stored]),
            b_bl=_bytea([b.data for b in stored]),
            # list pages and spines are rows of the items table too (type NODE_TYPE)
            i_id=_bytea([*encoded.items, *encoded.nodes]),
            i_ty=_text(
                [typ for typ, _ in encoded.items.values()] + [NODE_TYPE] * len(encoded.nodes)
            ),
            i_bl=_bytea(
                [data for _, data in encoded.items.values()]
                + [b"".join(children) for children in encoded.nodes.values()]
            ),
            **self.threads.put_params(record, encoded.checkpoint_id),
        )
        # With retention the trim joins the put's transaction: a crash or a failed trim
        # between the two would leave keep_last + 1 checkpoints, or a put that raised
        # although its checkpoint committed. It costs no round trip: the trim opened a
        # transaction of its own before.
        keep = self.settings.keep_last
        fast, live_after, refused, was_expired, saved = yield from self._write(
            params,
            self._put_payload,
            "saved",
            more=keep is not None,
            fence=None if fence is None else (target.thread_id, fence),
        )
        if not fast:
            if (yield from self._refused(params, live_after, refused, encoded.parent_id, target)):
                return True
            if was_expired:  # revived (stored or not: what expired goes either way)
                yield from self._purge_expired(
                    target.thread_key, target.checkpoint_ns, encoded.checkpoint_id
                )
                yield from self.threads.revived(target.thread_key, record)
        if not saved:  # its parent is gone (see ``go``): nothing of it was written
            return False
        if keep is not None:
            yield from self._trim(target.thread_key, target.checkpoint_ns, keep)
            yield from self.threads.refresh([target.thread_key])
        return True

    def put_writes(
        self,
        target: Target,
        writes: list[EncodedWrite],
        fence: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Query, None]:
        if not writes:
            return
        assert target.checkpoint_id is not None
        new = task_writes.merge([], task_writes.of_encoded(writes))
        record = task_writes.pack(new, writes[0].task_path)
        _check_record(record, writes[0].task_id)
        params = self._thread_params(target)
        params.update(
            # kept by the thread row these writes create (or revive): see pending_threads
            owner=owner,
            id=target.checkpoint_id,
            task_id=writes[0].task_id,
            path=writes[0].task_path,
            writes=record,
        )
        payload = self._writes_payload
        if interesting := writes_of_interest(writes):
            payload = self._writes_flagged
            params.update(self.threads.writes_params(interesting))
        fast, live_after, refused, was_expired, stored = yield from self._write(
            params, payload, "written", fence=None if fence is None else (target.thread_id, fence)
        )
        if not fast:
            newer = live_after is None or target.checkpoint_id > live_after
            must_exist = None if newer else target.checkpoint_id
            if (yield from self._refused(params, live_after, refused, must_exist, target)):
                return
            if was_expired:
                yield from self._purge_expired(
                    target.thread_key, target.checkpoint_ns, target.checkpoint_id
                )
                yield from self.threads.refresh([target.thread_key])
        if not stored:
            yield from self._merge_writes(params, new)

    # -- the fence (see ..fence) ------------------------------------------------------

    def _refused_by_fence(self, thread_id: str, claim: Claim) -> Plan[Query, None]:
        """Raise for a write the fence refused (nothing of it was written), naming the
        owner now (read after: for the message only)."""
        state = yield from self.fence_state(thread_id)
        raise FencedWriteError(thread_id, claim.owner, None if state is None else state.owner)

    def _fence_row(self, tk: bytes) -> Query:
        return Query(
            f"SELECT owner, token, extract(epoch FROM expires_at)::float8 FROM {self._fe} "
            "WHERE thread_key = %s",
            (tk,),
            fetch=True,
        )

    @property
    def _thread_first(self) -> str:
        """The thread row, key-share locked before a statement of the fence locks the
        fence row: thread row first, fence row second, as a write and a deletion take
        them. Alone in its statement the order would not matter; in a caller's
        transaction the fence row stays locked to its commit, and a write of the thread
        that follows there would wait for the thread row with the fence row held,
        crosswise against ``delete_thread`` (thread row held, waiting for the fence)."""
        return f"""thread AS (
                SELECT 1 FROM {self._th} WHERE thread_key = %(tk)s FOR KEY SHARE
            )"""

    def fence_take(
        self, thread_id: str, owner: str, lease_s: float, force: bool, run: bool = False
    ) -> Plan[Query, tuple[FenceState | None, FenceState]]:
        """One statement: the conditions are checked on the row as it is once locked.

        ``run``: a run's start, which commits without waiting for the disk (the flush
        was 3.7 ms of a 27 ms turn here), in one statement still. The run's next write
        commits durably, and a commit flushes the log up to itself. A take lost in a
        crash before that gives the thread back to the previous owner; the run's writes
        are then refused: still one writer at a time.
        """
        tk = thread_key(thread_id)
        # set_config(..., true) lasts until the statement's own transaction commits
        lazy = ", (SELECT set_config('synchronous_commit', 'off', true)) AS lazy" if run else ""
        rows: Rows = yield Query(
            f"""
            WITH {self._thread_first}
            INSERT INTO {self._fe} AS f (thread_key, owner, token, expires_at)
            SELECT %(tk)s, %(owner)s,
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                now() + make_interval(secs => %(lease)s)
            FROM (SELECT count(*) FROM thread) AS held {lazy}
            ON CONFLICT (thread_key) DO UPDATE SET
                owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
                token = CASE WHEN f.owner = EXCLUDED.owner THEN f.token
                    ELSE greatest(f.token + 1, EXCLUDED.token) END
            WHERE %(force)s OR f.owner IS NULL OR f.owner = EXCLUDED.owner
                OR f.expires_at <= now()
            RETURNING owner, token, extract(epoch FROM expires_at)::float8""",
            {"tk": tk, "owner": owner, "lease": lease_s, "force": force},
            fetch=True,
            standalone=True,
        )
        if rows:
            return None, FenceState(*rows[0])
        held: Rows = yield self._fence_row(tk)
        if not held:  # deleted since: take it again
            return (yield from self.fence_take(thread_id, owner, lease_s, force))
        state = FenceState(*held[0])
        return state, state

    def fence_renew(
        self, thread_id: str, owner: str, token: int, lease_s: float
    ) -> Plan[Query, FenceState | None]:
        tk = thread_key(thread_id)
        rows: Rows = yield Query(
            f"""WITH {self._thread_first}
            UPDATE {self._fe} SET expires_at = now() + make_interval(secs => %(lease)s)
            WHERE thread_key = %(tk)s AND owner = %(owner)s AND token = %(token)s
                AND (SELECT count(*) FROM thread) >= 0
            RETURNING owner, token, extract(epoch FROM expires_at)::float8""",
            {"tk": tk, "owner": owner, "token": token, "lease": lease_s},
            fetch=True,
            standalone=True,
        )
        if rows:
            return FenceState(*rows[0])
        found: Rows = yield self._fence_row(tk)
        return FenceState(*found[0]) if found else None

    def fence_release(self, thread_id: str, owner: str, token: int) -> Plan[Query, bool]:
        rows: Rows = yield Query(
            f"""WITH {self._thread_first}
            UPDATE {self._fe} SET owner = NULL, expires_at = NULL
            WHERE thread_key = %(tk)s AND owner = %(owner)s AND token = %(token)s
                AND (SELECT count(*) FROM thread) >= 0
            RETURNING 1""",
            {"tk": thread_key(thread_id), "owner": owner, "token": token},
            fetch=True,
            standalone=True,
        )
        return bool(rows)

    def fence_state(self, thread_id: str) -> Plan[Query, FenceState | None]:
        rows: Rows = yield self._fence_row(thread_key(thread_id))
        return FenceState(*rows[0]) if rows else None

    def _merge_writes(
        self, params: dict[str, Any], new: list[task_writes.Write]
    ) -> Plan[Query, None]:
        """Merge a task's second put_writes into its stored record, under the row's lock.

        Rare (an interrupt, a resume, a retried call), so done in Python rather than in a
        statement that would have to parse the record. A row deleted meanwhile (by
        delete_thread, prune or retention) stays deleted.
        """
        key = """thread_key = %(tk)s AND checkpoint_ns = %(ns)s AND checkpoint_id = %(id)s
            AND task_id = %(task_id)s"""
        rows: Rows = yield Query(
            f"SELECT writes, task_path FROM {self._wr} WHERE {key} FOR UPDATE",
            params,
            fetch=True,
        )
        if not rows:
            return
        path = rows[0][1]
        stored = task_writes.unpack(rows[0][0], path)
        merged = task_writes.merge(stored, new)
        if merged != stored:
            record = task_writes.pack(merged, path)
            _check_record(record, params["task_id"])
            yield Query(
                f"UPDATE {self._wr} SET writes = %(merged)s WHERE {key}",
                {**params, "merged": record},
            )

    def _refused(
        self,
        params: dict[str, Any],
        live_after: str | None,
        refused: list[str],
        must_exist: str | None,
        target: Target,
    ) -> Plan[Query, bool]:
        """On a deleted thread, undo this write unless ``must_exist`` still exists, and,
        in a subgraph's namespace, its run's root checkpoint (``Target.root_needed``);
        undo it outright if its checkpoint or that root was refused before.

        Checked with a statement of its own, after the thread row is locked: its fresh
        snapshot sees a delete_thread that committed while we waited for the lock.
        """
        if live_after is None:
            return False
        if not {params["id"], target.root_id}.isdisjoint(refused):
            yield from self._refuse(params)
            return True
        root = target.root_needed(live_after)
        if must_exist is None and root is None:
            return False
        rows: Rows = yield Query(
            f"""SELECT (%(check)s::text IS NULL OR EXISTS (SELECT 1 FROM {self._ck}
                    WHERE thread_key = %(tk)s AND checkpoint_ns = %(ns)s
                        AND checkpoint_id = %(check)s))
                AND (%(root)s::text IS NULL OR EXISTS (SELECT 1 FROM {self._ck}
                    WHERE thread_key = %(tk)s AND checkpoint_ns = ''
                        AND checkpoint_id = %(root)s))""",
            {**params, "check": must_exist, "root": root},
            fetch=True,
        )
        if rows[0][0]:
            return False
        yield from self._refuse(params)
        return True

    def _refuse(self, params: dict[str, Any]) -> Plan[Query, None]:
        """Undo a write from a run that outlived its deleted thread.

        Once a thread was deleted, a checkpoint is kept only if its parent still exists
        (a fresh run has none), and writes only if their checkpoint exists or is newer
        than the deletion; a subgraph's, in any namespace, also only if its run's root
        checkpoint does. So a run that keeps going cannot bring the thread back. The
        refused checkpoint id joins the tombstone's ``refused`` ids, so what follows it is
        refused; what hangs from a refused id now goes too, as if it came now: writes that
        came before their checkpoint, and subgraphs stored under a root checkpoint refused
        after them. A thread left empty is a tombstone again (no id, no expiry). The
        deletion's bound (``live_after``) never moves: a new run's checkpoints older than
        a refusal, whatever retention kept of them, are not the deleted run's.
        """
        logger.warning("dropped a write of a run whose thread was deleted")
        freed: Rows = yield Query(
            f"""
            WITH gone AS (
                DELETE FROM {self._ck} WHERE thread_key = %(tk)s AND checkpoint_ns = %(ns)s
                    AND checkpoint_id = %(id)s
                RETURNING channel_versions
            ), gone_writes AS (
                DELETE FROM {self._wr} WHERE thread_key = %(tk)s AND checkpoint_ns = %(ns)s
                    AND checkpoint_id = %(id)s
            )
            SELECT DISTINCT %(tk)s::bytea, %(ns)s::text, v.key, v.value
            FROM gone g CROSS JOIN LATERAL jsonb_each_text(g.channel_versions) v""",
            params,
            fetch=True,
        )
        yield Query(
            f"""UPDATE {self._th} SET refused = array_append(coalesce(refused, '{{}}'), %(id)s)
            WHERE thread_key = %(tk)s AND NOT %(id)s = ANY(coalesce(refused, '{{}}'))""",
            params,
        )
        dead: Rows = yield Query(
            f"""
            WITH sub AS (
                SELECT DISTINCT c.checkpoint_ns AS ns, c.metadata_json -> 'parents' ->> '' AS root
                FROM {self._ck} c WHERE c.thread_key = %(tk)s AND c.checkpoint_ns <> ''
            )
            SELECT DISTINCT sub.ns FROM sub JOIN {self._th} t ON t.thread_key = %(tk)s
            WHERE sub.root = ANY(t.refused)""",
            params,
            fetch=True,
        )
        if dead:
            namespaces = [ns for (ns,) in dead]
            for table in self._history:
                yield Query(
                    f"DELETE FROM {table} WHERE thread_key = %(tk)s "
                    "AND checkpoint_ns = ANY(%(dead)s)",
                    {**params, "dead": namespaces},
                )
        yield Query(
            f"""
            DELETE FROM {self._wr} w WHERE w.thread_key = %(tk)s
                AND w.checkpoint_id = ANY((SELECT refused FROM {self._th}
                                           WHERE thread_key = %(tk)s)::text[])
                AND NOT EXISTS (SELECT 1 FROM {self._ck} c WHERE c.thread_key = %(tk)s
                    AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)""",
            params,
        )
        yield self._nameless_if_empty(params)
        yield from self._collect_blobs(freed)
        if params.get("tx_id"):
            yield self.threads.refused_lines(params)
        yield from self.threads.refresh([params["tk"]])

    def _purge_expired(
        self, tk: bytes, checkpoint_ns: str, checkpoint_id: str
    ) -> Plan[Query, None]:
        """Drop what an expired thread held when a write revived it: all but the rows of
        the written checkpoint (why not only older ones: the SQLite plan's docstring)."""
        for table in (self._wr, self._ck):
            yield Query(
                f"DELETE FROM {table} WHERE thread_key = %s "
                "AND NOT (checkpoint_ns = %s AND checkpoint_id = %s)",
                (tk, checkpoint_ns, checkpoint_id),
            )
        lists: Rows = yield Query(
            f"""DELETE FROM {self._bl} b WHERE b.thread_key = %s AND NOT EXISTS (
                SELECT 1 FROM {self._ck} c WHERE c.thread_key = b.thread_key
                    AND c.checkpoint_ns = b.checkpoint_ns
                    AND c.channel_versions ->> b.channel = b.version)
            RETURNING b.checkpoint_ns, b.type = '{LIST_TYPE}'""",
            (tk,),
            fetch=True,
        )
        for ns in sorted({ns for ns, is_list in lists if is_list}):
            yield from self._collect_items(tk, ns)

    def _collect_blobs(self, freed: Rows) -> Plan[Query, None]:
        """Delete blobs that deleted checkpoints used and no remaining checkpoint uses."""
        if not freed:
            return
        tks, nss, chs, vers = (list(col) for col in zip(*freed, strict=True))
        lists: Rows = yield Query(
            f"""
            DELETE FROM {self._bl} b
            USING unnest(%b::bytea[], %b::text[], %b::text[], %b::text[])
                AS f(thread_key, checkpoint_ns, channel, version)
            WHERE b.thread_key = f.thread_key AND b.checkpoint_ns = f.checkpoint_ns
                AND b.channel = f.channel AND b.version = f.version
                AND NOT EXISTS (
                    SELECT 1 FROM {self._ck} c
                    WHERE c.thread_key = f.thread_key AND c.checkpoint_ns = f.checkpoint_ns
                        AND c.channel_versions ->> f.channel = f.version)
            RETURNING b.thread_key, b.checkpoint_ns, b.type = '{LIST_TYPE}'""",
            (tks, nss, chs, vers),
            fetch=True,
        )
        for tk, ns in sorted({(bytes(tk), ns) for tk, ns, is_list in lists if is_list}):
            yield from self._collect_items(tk, ns)

    def _collect_items(self, tk: bytes, checkpoint_ns: str) -> Plan[Query, None]:
        """Delete list items, pages and spines no remaining list version reaches."""
        ids = "substring(n.data FROM (g - 1) * 16 + 1 FOR 16)"
        node = f"""n.thread_key = %(tk)s AND n.checkpoint_ns = %(ns)s AND n.type = '{NODE_TYPE}'"""
        yield Query(
            f"""
            WITH lb AS (
                SELECT blob FROM {self._bl}
                WHERE thread_key = %(tk)s AND checkpoint_ns = %(ns)s AND type = '{LIST_TYPE}'
            ), spines AS (
                SELECT DISTINCT substring(blob FROM 1 FOR 16) AS id FROM lb
            ), pages AS (
                SELECT DISTINCT {ids} AS id
                FROM {self._it} n JOIN spines s ON n.item_id = s.id
                CROSS JOIN LATERAL generate_series(1, length(n.data) / 16) g
                WHERE {node}
            ), live AS (
                SELECT id FROM spines
                UNION
                SELECT id FROM pages
                UNION
                SELECT {ids}
                FROM {self._it} n JOIN pages p ON n.item_id = p.id
                CROSS JOIN LATERAL generate_series(1, length(n.data) / 16) g
                WHERE {node}
                UNION
                SELECT substring(lb.blob FROM 17 + (g - 1) * 16 FOR 16) FROM lb
                CROSS JOIN LATERAL generate_series(1, (length(lb.blob) - 16) / 16) g
            )
            DELETE FROM {self._it} i
            WHERE i.thread_key = %(tk)s AND i.checkpoint_ns = %(ns)s
                AND i.item_id NOT IN (SELECT id FROM live)""",
            {"tk": tk, "ns": checkpoint_ns},
        )

    def _fetch_list(self, request: ListRequest) -> Query:
        """The items of a stored list in order; bytes only for those not known here.

        A missing spine or page comes first as a row without a type: the checkpoint was
        read by an earlier statement, and a deletion since must fail the read (which
        runs again), not shorten the list."""
        tk, ns, _ = request.key
        return Query(
            f"""
            WITH pages AS (
                SELECT g AS pord, substring(s.data FROM (g - 1) * 16 + 1 FOR 16) AS id
                FROM {self._it} s
                CROSS JOIN LATERAL generate_series(1, length(s.data) / 16) g
                WHERE s.thread_key = %(tk)s AND s.checkpoint_ns = %(ns)s
                    AND s.item_id = %(spine)s AND s.type = '{NODE_TYPE}'
            ), ids AS (
                SELECT p.pord, g AS iord,
                       substring(n.data FROM (g - 1) * 16 + 1 FOR 16) AS id
                FROM pages p
                JOIN {self._it} n ON n.thread_key = %(tk)s AND n.checkpoint_ns = %(ns)s
                    AND n.item_id = p.id AND n.type = '{NODE_TYPE}'
                CROSS JOIN LATERAL generate_series(1, length(n.data) / 16) g
                UNION ALL
                SELECT 2147483647, g, substring(%(tail)s FROM (g - 1) * 16 + 1 FOR 16)
                FROM generate_series(1, length(%(tail)s) / 16) g
                UNION ALL  -- a missing spine or page: a row without a type
                SELECT -1, 0, %(spine)s::bytea
                WHERE %(spine)s::bytea IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pages)
                UNION ALL
                SELECT -1, p.pord, p.id FROM pages p
                WHERE NOT EXISTS (
                    SELECT 1 FROM {self._it} n WHERE n.thread_key = %(tk)s
                        AND n.checkpoint_ns = %(ns)s AND n.item_id = p.id
                        AND n.type = '{NODE_TYPE}'
                )
            )
            SELECT ids.id, i.type,
                   CASE WHEN ids.id = ANY(%(known)b::bytea[]) THEN NULL ELSE i.data END
            FROM ids
            LEFT JOIN {self._it} i ON i.thread_key = %(tk)s AND i.checkpoint_ns = %(ns)s
                AND i.item_id = ids.id
            ORDER BY ids.pord, ids.iord""",
            {
                "tk": tk,
                "ns": ns,
                "spine": request.ref.spine,
                "tail": b"".join(request.ref.tail),
                "known": list(request.known),
            },
            fetch=True,
            standalone=True,
        )

    def _trim(self, tk: bytes, checkpoint_ns: str, keep: int) -> Plan[Query, None]:
        """Keep the newest ``keep`` checkpoints of one thread namespace.

        A ``DeltaChannel`` value is rebuilt by replaying writes back to the checkpoint
        holding its last snapshot (its seed, recorded per channel at put time in
        ``delta_seeds``). Older checkpoints a kept one still replays from stay stored as
        ``replay_only``: read by delta replay, never returned by ``get_tuple``/``list``
        (they could not be rebuilt themselves when channels snapshot at different steps).
        Everything older goes, with its writes and the blobs nothing else uses. A kept
        checkpoint whose parent is deleted gets no parent, as after LangGraph's prune.

        "Its writes" are every write below the floor (a primary-key range): also those
        that landed after an earlier trim deleted their checkpoint (LangGraph stores a
        task's writes on a background thread), which nothing reads. Writes that come
        before their checkpoint are for a newer one, above the floor: kept.
        """
        freed: Rows = yield Query(
            f"""
            WITH kept AS (
                SELECT checkpoint_id, delta_seeds FROM {self._ck}
                WHERE thread_key = %(tk)s AND checkpoint_ns = %(ns)s
                ORDER BY checkpoint_id DESC LIMIT %(keep)s
            ), cut AS (
                SELECT min(k.checkpoint_id) AS oldest_kept,
                       least(min(k.checkpoint_id), min(s.value)) AS floor
                FROM kept k LEFT JOIN LATERAL jsonb_each_text(k.delta_seeds) s ON true
            ), gone AS (
                DELETE FROM {self._ck} c USING cut
                WHERE c.thread_key = %(tk)s AND c.checkpoint_ns = %(ns)s
                    AND c.checkpoint_id < cut.floor
                RETURNING c.channel_versions
            ), gone_writes AS (
                DELETE FROM {self._wr} w USING cut
                WHERE w.thread_key = %(tk)s AND w.checkpoint_ns = %(ns)s
                    AND w.checkpoint_id < cut.floor
            ), survivors AS (
                UPDATE {self._ck} c SET
                    replay_only = c.checkpoint_id < cut.oldest_kept,
                    parent_checkpoint_id = CASE WHEN c.parent_checkpoint_id < cut.floor
                        THEN NULL ELSE c.parent_checkpoint_id END
                FROM cut
                WHERE c.thread_key = %(tk)s AND c.checkpoint_ns = %(ns)s
                    AND c.checkpoint_id >= cut.floor
                    AND ((c.checkpoint_id < cut.oldest_kept AND NOT c.replay_only)
                         OR c.parent_checkpoint_id < cut.floor)
            )
            SELECT DISTINCT %(tk)s::bytea, %(ns)s::text, v.key, v.value
            FROM gone g CROSS JOIN LATERAL jsonb_each_text(g.channel_versions) v""",
            {"tk": tk, "ns": checkpoint_ns, "keep": keep},
            fetch=True,
        )
        yield from self._collect_blobs(freed)

    # -- deletion and maintenance -----------------------------------------------------

    def _delete_threads(self, tks: list[bytes]) -> Plan[Query, None]:
        # A fenced thread with no row yet (leased, not written) gets one here, the
        # tombstone to be: a new thread's first fenced write inserts it, commits, and
        # its step's next write (the put beside its put_writes) then holds it waiting
        # for the fence row; the lock below, finding no row, would lock nothing, the
        # fence's delete take the fence row and the tombstone's update wait for the
        # thread row: crosswise (DeadlockDetected). The conflict waits for a racing
        # insert's commit, so the lock below, a statement later, finds its row.
        yield Query(
            f"""INSERT INTO {self._th} (thread_key)
            SELECT f.thread_key FROM {self._fe} f WHERE f.thread_key = ANY(%s)
            ORDER BY f.thread_key
            ON CONFLICT (thread_key) DO NOTHING""",
            (tks,),
        )
        # Lock the thread rows first: a concurrent put holds the same lock, so it either
        # commits before (and is deleted here) or waits and meets the tombstone.
        yield Query(
            f"SELECT 1 FROM {self._th} WHERE thread_key = ANY(%s) ORDER BY thread_key FOR UPDATE",
            (tks,),
        )
        # Then the fences (deletion is final: no owner), in the order a fenced write
        # locks them too: thread row first.
        yield Query(f"DELETE FROM {self._fe} WHERE thread_key = ANY(%s)", (tks,))
        yield Query(
            f"""
            WITH last AS (
                SELECT k.tk, greatest(
                    (SELECT max(checkpoint_id) FROM {self._ck} WHERE thread_key = k.tk),
                    (SELECT max(checkpoint_id) FROM {self._wr} WHERE thread_key = k.tk)) AS id
                FROM unnest(%(tks)b::bytea[]) AS k(tk)
            ), d1 AS (DELETE FROM {self._ck} WHERE thread_key = ANY(%(tks)b)),
            d2 AS (DELETE FROM {self._bl} WHERE thread_key = ANY(%(tks)b)),
            d3 AS (DELETE FROM {self._wr} WHERE thread_key = ANY(%(tks)b)),
            d4 AS (DELETE FROM {self._it} WHERE thread_key = ANY(%(tks)b)),
            d5 AS ({self.threads.delete_cte("%(tks)b")})
            UPDATE {self._th} t SET thread_id = NULL, expires_at = NULL, deleted_at = now(),
                live_after = greatest(t.live_after, last.id, %(deleted)s), refused = NULL,
                owner = NULL
            FROM last WHERE t.thread_key = last.tk""",
            {"tks": tks, "deleted": deletion_id()},
        )

    def delete_thread(self, thread_id: str) -> Plan[Query, None]:
        yield from self._delete_threads([thread_key(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[Query, None]:
        if not run_ids:
            return
        touched: Rows = yield Query(
            f"SELECT DISTINCT thread_key FROM {self._ck} WHERE run_id = ANY(%s)",
            (list(run_ids),),
            fetch=True,
        )
        # In a put's order, as prune's: the thread rows, then the index rows, then the
        # checkpoints. A put locks its parent after the index row (``held``); deleting
        # the parent first and refreshing the index row after waited crosswise against
        # a put building on it (DeadlockDetected, tests/test_attack_parent.py).
        tks = sorted({bytes(r[0]) for r in touched})
        yield from self._lock_for_removal(tks)
        # Only in the threads locked: a checkpoint of the runs stored since the read
        # above, in another thread, is as one stored after this call (removed without
        # its rows held, it left that thread's index row stale and could wait crosswise).
        freed: Rows = yield Query(
            f"""
            WITH gone AS (
                DELETE FROM {self._ck} WHERE run_id = ANY(%s) AND thread_key = ANY(%s)
                RETURNING thread_key, checkpoint_ns, checkpoint_id, channel_versions
            ), gone_writes AS (
                DELETE FROM {self._wr} w USING gone g
                WHERE w.thread_key = g.thread_key AND w.checkpoint_ns = g.checkpoint_ns
                    AND w.checkpoint_id = g.checkpoint_id
            )
            SELECT DISTINCT g.thread_key, g.checkpoint_ns, v.key, v.value
            FROM gone g CROSS JOIN LATERAL jsonb_each_text(g.channel_versions) v""",
            (list(run_ids), tks),
            fetch=True,
        )
        yield from self._collect_blobs(freed)
        yield from self.threads.refresh(tks)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[Query, None]:
        src, dst = thread_key(source_thread_id), thread_key(target_thread_id)
        dst_id = _thread_id_bytes(target_thread_id)
        params = {
            "src": src,
            "dst": dst,
            "dst_id": dst_id,
            "ttl": self.settings.ttl_seconds,
        }
        # An expired target's history is not revived by the copy: it goes first, with
        # the target's row locked, as a write's revival purges it
        # (tests/test_attack_pgrev.py). FOR UPDATE, not the upsert's weaker lock: a put
        # that reads the thread row FOR KEY SHARE (a live thread) then waits for the copy,
        # instead of inserting the target's index row and checkpoints beside it and
        # meeting the copy's trim crosswise (DeadlockDetected, test_attack_tomb seed 11).
        expired: Rows = yield Query(
            f"SELECT expires_at <= now() FROM {self._th} WHERE thread_key = %s FOR UPDATE",
            (dst,),
            fetch=True,
        )
        # The target's index row before its history, as a put takes them (its index row,
        # then its checkpoints, and with retention its trim): a copy inserting the target's
        # writes first and its index row after waited crosswise against a put with
        # keep_last whose trim deleted them (DeadlockDetected, tests/test_attack_tomb.py,
        # 1 CI run); deleting an expired target's history first did against a put that
        # began before the expiry (tests/test_attack_parent.py).
        yield self.threads.lock([dst])
        if expired and expired[0][0]:
            for table in self._history:
                yield Query(f"DELETE FROM {table} WHERE thread_key = %s", (dst,))
        yield Query(
            f"""
            WITH source AS (
                SELECT t.owner FROM {self._th} t WHERE t.thread_key = %(src)s
                    AND {self._visible}
            ), thread AS (
                -- a copy of a thread of writes only keeps its owner in waiting
                INSERT INTO {self._th} AS t (thread_key, thread_id, expires_at, owner)
                SELECT %(dst)s, %(dst_id)s, now() + make_interval(secs => %(ttl)s), owner
                FROM source
                ON CONFLICT (thread_key) DO UPDATE SET thread_id = EXCLUDED.thread_id,
                    expires_at = EXCLUDED.expires_at,
                    owner = coalesce(EXCLUDED.owner, t.owner)
                RETURNING 1
            ), blobs AS (
                INSERT INTO {self._bl} (thread_key, checkpoint_ns, channel, version, type, blob)
                SELECT %(dst)s, checkpoint_ns, channel, version, type, blob FROM {self._bl}
                WHERE thread_key = %(src)s AND EXISTS (SELECT 1 FROM thread)
                ON CONFLICT DO NOTHING
            ), writes AS (
                INSERT INTO {self._wr} (thread_key, checkpoint_ns, checkpoint_id, task_id,
                    task_path, writes)
                SELECT %(dst)s, checkpoint_ns, checkpoint_id, task_id, task_path, writes
                FROM {self._wr}
                WHERE thread_key = %(src)s AND EXISTS (SELECT 1 FROM thread)
                ON CONFLICT DO NOTHING
            ), items AS (
                INSERT INTO {self._it} (thread_key, checkpoint_ns, item_id, type, data)
                SELECT %(dst)s, checkpoint_ns, item_id, type, data FROM {self._it}
                WHERE thread_key = %(src)s AND EXISTS (SELECT 1 FROM thread)
                ON CONFLICT DO NOTHING
            )
            INSERT INTO {self._ck} (thread_key, checkpoint_ns, checkpoint_id,
                parent_checkpoint_id, run_id, checkpoint_type, checkpoint, metadata_type,
                metadata, metadata_json, channel_versions, delta_seeds, replay_only)
            SELECT %(dst)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
                checkpoint_type, checkpoint, metadata_type, metadata, metadata_json,
                channel_versions, delta_seeds, replay_only
            FROM {self._ck} WHERE thread_key = %(src)s AND EXISTS (SELECT 1 FROM thread)
            ON CONFLICT DO NOTHING""",
            params,
        )
        yield self.threads.copy(src, dst, dst_id)
        yield self.threads.copy_transcript(src, dst)
        yield from self.threads.refresh([dst])

    def _lock_for_removal(self, tks: list[bytes]) -> Plan[Query, None]:
        """Before removing checkpoints of threads ``tks`` (sorted) that stay: their thread
        rows, then their index rows, the order of a put (its parent is locked after both).

        ``FOR UPDATE``, as a deletion: no write of the threads is under way meanwhile (a
        put holds its thread row, key share on the fast path, for its whole
        transaction). Key share let puts in, and a put orders itself against a remover
        by the index row only while the row exists: one whose row was gone (its
        checkpoints all removed once) inserted it in its statement after locking its
        parent, and the remover, holding the parent's deletion, waited for that row in
        its refresh, or a second remover of the same thread did (``DeadlockDetected``:
        two ``delete_for_runs``, ``delete_for_runs`` or ``prune`` beside a put with
        ``keep_last``; tests/test_attack_tomb.py)."""
        if not tks:
            return
        yield Query(
            f"SELECT 1 FROM {self._th} WHERE thread_key = ANY(%s) ORDER BY thread_key FOR UPDATE",
            (tks,),
        )
        yield self.threads.lock(tks)

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Query, None]:
        if not thread_ids:
            return
        tks = sorted({thread_key(t) for t in thread_ids})
        if keep_latest:
            # In a put's order (its trim with keep_last): the thread rows, then the index
            # rows, then the checkpoints; trimming first and refreshing the index after
            # waited crosswise against such a put (DeadlockDetected,
            # tests/test_attack_pgrev.py; the locks: see _lock_for_removal).
            yield from self._lock_for_removal(tks)
            namespaces: Rows = yield Query(
                f"SELECT DISTINCT thread_key, checkpoint_ns FROM {self._ck} "
                "WHERE thread_key = ANY(%s)",
                (tks,),
                fetch=True,
            )
            for tk, ns in namespaces:
                yield from self._trim(tk, ns, 1)
            yield from self.threads.refresh(tks)
        else:
            yield from self._delete_threads(tks)

    def sweep_expired(self, batch_size: int) -> Plan[Query, tuple[int, bool]]:
        """One bounded batch of expired threads (and old tombstones), deleted whole.

        An expired thread on a deleted id keeps that deletion's tombstone, bare, to its
        own end: runs that predate the deletion stay refused.
        """
        rows: Rows = yield Query(
            f"""
            WITH victims AS (
                SELECT thread_key, thread_id IS NOT NULL AS live,
                    coalesce(live_after IS NOT NULL
                        AND deleted_at >= now() - make_interval(hours => {TOMBSTONE_HOURS}),
                        false) AS tomb
                FROM {self._th}
                WHERE expires_at <= now()
                   OR (thread_id IS NULL
                       AND deleted_at < now() - make_interval(hours => {TOMBSTONE_HOURS}))
                LIMIT %(n)s FOR UPDATE SKIP LOCKED
            ), d1 AS (
                DELETE FROM {self._ck} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d2 AS (
                DELETE FROM {self._bl} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d3 AS (
                DELETE FROM {self._wr} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d4 AS (
                DELETE FROM {self._it} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d5 AS (
                DELETE FROM {self._th}
                WHERE thread_key IN (SELECT thread_key FROM victims WHERE NOT tomb)
            ), bare AS (
                UPDATE {self._th} SET thread_id = NULL, expires_at = NULL, owner = NULL
                WHERE thread_key IN (SELECT thread_key FROM victims WHERE tomb)
            ), d6 AS ({self.threads.delete_in("SELECT thread_key FROM victims")}
            ), d7 AS ({self.threads.sweep_transcripts("%(n)s")}
            ), d8 AS (  -- a swept thread's fence goes with it, as in delete_thread
                DELETE FROM {self._fe} WHERE thread_key IN (SELECT thread_key FROM victims)
            )
            SELECT count(*) FILTER (WHERE live), count(*) FROM victims""",
            {"n": batch_size},
            fetch=True,
        )
        live, total = rows[0]
        return int(live), int(total) >= batch_size
