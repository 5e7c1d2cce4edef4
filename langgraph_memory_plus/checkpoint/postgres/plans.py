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
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from psycopg.types.json import Jsonb

from ..._plan import Plan
from ..._postgres import Query, Rows
from ...errors import ValueTooLargeError
from ..codec import (
    EMPTY,
    ChainLink,
    CheckpointCodec,
    EncodedCheckpoint,
    EncodedWrite,
    StoredCheckpoint,
    json_safe,
    metadata_matches,
)
from ..config import ListQuery, SaverSettings, Target, thread_key
from .schema import MIGRATIONS, advisory_lock_id, quote_schema

logger = logging.getLogger("langgraph_memory_plus.checkpoint.postgres")

# PostgreSQL refuses a field over 1 GiB and a message over 1 GiB; stay clear of both.
MAX_VALUE_BYTES = 512 * 1024 * 1024
MAX_STATEMENT_BYTES = 1000 * 1024 * 1024

# How long a deleted thread's tombstone keeps refusing late writes of its old history.
TOMBSTONE_HOURS = 24

# Rows of a delta-history walk are bounded so a corrupt parent cycle cannot spin forever.
MAX_CHAIN_DEPTH = 1_000_000


def _thread_id_bytes(thread_id: str) -> bytes:
    return thread_id.encode("utf-8", "surrogatepass")


def _thread_id_text(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


class PostgresCheckpointPlans:
    """SQL and decoding for one schema and one set of saver settings."""

    max_value_bytes = MAX_VALUE_BYTES

    def __init__(self, schema: str, settings: SaverSettings) -> None:
        s = quote_schema(schema)
        self.schema = schema
        self.settings = settings
        self._ck = f"{s}.lgmp_checkpoints"
        self._th = f"{s}.lgmp_threads"
        self._bl = f"{s}.lgmp_blobs"
        self._wr = f"{s}.lgmp_writes"
        self._s = s
        # The thread row a write creates or refreshes. It is also the lock that orders a
        # write against delete_thread; it returns the tombstone left by a deletion.
        self._upsert_thread = f"""
            INSERT INTO {self._th} AS t (thread_key, thread_id, expires_at, updated_at)
            VALUES (%(tk)s, %(tid)s, now() + make_interval(secs => %(ttl)s), now())
            ON CONFLICT (thread_key) DO UPDATE SET
                thread_id = EXCLUDED.thread_id,
                expires_at = EXCLUDED.expires_at,
                updated_at = EXCLUDED.updated_at
            RETURNING (
                SELECT o.expires_at <= now() FROM {self._th} o WHERE o.thread_key = t.thread_key
            ) AS was_expired, t.live_after"""
        self._visible = "t.thread_id IS NOT NULL AND (t.expires_at IS NULL OR t.expires_at > now())"

    # -- setup ------------------------------------------------------------------------

    def setup(self) -> Plan[Query, None]:
        yield Query("SELECT pg_advisory_xact_lock(%s)", (advisory_lock_id(self.schema),))
        yield Query(f"CREATE SCHEMA IF NOT EXISTS {self._s}")
        yield Query(
            f"CREATE TABLE IF NOT EXISTS {self._s}.lgmp_checkpoint_migrations "
            "(v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows: Rows = yield Query(
            f"SELECT coalesce(max(v), -1) FROM {self._s}.lgmp_checkpoint_migrations", fetch=True
        )
        for version in range(rows[0][0] + 1, len(MIGRATIONS)):
            for statement in MIGRATIONS[version]:
                yield Query(statement.format(s=self._s))
            yield Query(
                f"INSERT INTO {self._s}.lgmp_checkpoint_migrations (v) VALUES (%s)", (version,)
            )

    # -- reads ------------------------------------------------------------------------

    def _select(self, where: str, limit: str) -> str:
        """Checkpoints with their blobs and writes; ``where``/``limit`` pick the page first."""
        return f"""
            SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
                   c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata, c.thread_key,
                   bl.channels, bl.types, bl.blobs,
                   wr.task_ids, wr.channels, wr.types, wr.blobs, wr.paths, wr.idxs
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
                FROM jsonb_each_text(c.channel_versions) v
                JOIN {self._bl} b ON b.thread_key = c.thread_key
                    AND b.checkpoint_ns = c.checkpoint_ns
                    AND b.channel = v.key AND b.version = v.value
            ) bl ON true
            LEFT JOIN LATERAL (
                SELECT array_agg(w.task_id) AS task_ids, array_agg(w.channel) AS channels,
                       array_agg(w.type) AS types, array_agg(w.blob) AS blobs,
                       array_agg(w.task_path) AS paths, array_agg(w.idx) AS idxs
                FROM {self._wr} w
                WHERE w.thread_key = c.thread_key AND w.checkpoint_ns = c.checkpoint_ns
                    AND w.checkpoint_id = c.checkpoint_id
            ) wr ON true
            ORDER BY c.checkpoint_id DESC, c.thread_key DESC, c.checkpoint_ns DESC"""

    @staticmethod
    def _stored(row: tuple[Any, ...]) -> StoredCheckpoint:
        (tid, ns, cid, parent, ctype, cblob, mtype, mblob, _tk,
         b_ch, b_ty, b_bl, w_task, w_ch, w_ty, w_bl, w_path, w_idx) = row  # fmt: skip
        return StoredCheckpoint(
            thread_id=_thread_id_text(tid),
            checkpoint_ns=ns,
            checkpoint_id=cid,
            parent_id=parent,
            checkpoint=(ctype, cblob),
            metadata=(mtype, mblob),
            blobs=list(zip(b_ch, b_ty, b_bl, strict=True)) if b_ch else [],
            writes=list(zip(w_task, w_ch, w_ty, w_bl, w_path, w_idx, strict=True))
            if w_task
            else [],
        )

    def _refresh(self, keys: list[bytes]) -> Query:
        return Query(
            f"UPDATE {self._th} SET expires_at = now() + make_interval(secs => %s) "
            "WHERE thread_key = ANY(%s) AND expires_at IS NOT NULL",
            (self.settings.ttl_seconds, keys),
        )

    def get_tuple(
        self, codec: CheckpointCodec, target: Target
    ) -> Plan[Query, CheckpointTuple | None]:
        params: list[Any] = [target.thread_key, target.checkpoint_ns]
        where = "c.thread_key = %s AND c.checkpoint_ns = %s"
        if target.checkpoint_id is not None:
            where += " AND c.checkpoint_id = %s"
            params.append(target.checkpoint_id)
        rows: Rows = yield Query(self._select(where, "LIMIT 1"), params, fetch=True)
        if not rows:
            return None
        if self.settings.refresh_on_read and self.settings.ttl_seconds is not None:
            yield self._refresh([rows[0][8]])
        return codec.decode_tuple(self._stored(rows[0]))

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
        # metadata. ``None`` is left out: it also matches a missing key, as in InMemorySaver.
        present = {k: v for k, v in (query.filter or {}).items() if v is not None}
        if present:
            wheres.append("c.metadata_json @> %s")
            params.append(Jsonb(json_safe(present)))
        if query.after is not None:
            wheres.append("(c.checkpoint_id, c.thread_key, c.checkpoint_ns) < (%s, %s, %s)")
            params.extend(query.after)
        size = page_size if query.limit is None else min(page_size, query.limit)
        rows: Rows = yield Query(
            self._select(" AND ".join(wheres), f"LIMIT {int(size)}"), params, fetch=True
        )
        page: list[CheckpointTuple] = []
        for row in rows:
            stored = self._stored(row)
            metadata = codec.decode_metadata(stored.metadata)
            if metadata_matches(metadata, query.filter):
                page.append(codec.decode_tuple(stored, metadata))
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
        seeded = f"""EXISTS (SELECT 1 FROM {self._bl} b
                    WHERE b.thread_key = %(tk)s AND b.checkpoint_ns = %(ns)s AND b.channel = r
                    AND b.version = chain.channel_versions ->> r AND b.type <> '{EMPTY}')"""
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
                       1 AS depth, %(channels)s::text[] AS remaining
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
                   w.task_ids, w.channels, w.types, w.blobs, w.paths, w.idxs
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
                SELECT array_agg(w.task_id) AS task_ids, array_agg(w.channel) AS channels,
                       array_agg(w.type) AS types, array_agg(w.blob) AS blobs,
                       array_agg(w.task_path) AS paths, array_agg(w.idx) AS idxs
                FROM {self._wr} w
                WHERE w.thread_key = %(tk)s AND w.checkpoint_ns = %(ns)s
                    AND w.checkpoint_id = chain.checkpoint_id AND w.channel = ANY(chain.remaining)
            ) w ON true
            ORDER BY chain.depth""",
            {
                "tk": target.thread_key,
                "ns": target.checkpoint_ns,
                "id": target.checkpoint_id,
                "channels": list(channels),
            },
            fetch=True,
        )
        chain = [
            ChainLink(
                checkpoint_id=cid,
                seeds={ch: (ty, bl) for ch, ty, bl in zip(s_ch, s_ty, s_bl, strict=True)}
                if s_ch
                else {},
                writes=list(zip(w_task, w_ch, w_ty, w_bl, w_path, w_idx, strict=True))
                if w_task
                else [],
            )
            for cid, s_ch, s_ty, s_bl, w_task, w_ch, w_ty, w_bl, w_path, w_idx in rows
        ]
        return codec.delta_history(channels, chain)

    # -- writes -----------------------------------------------------------------------

    def _thread_params(self, target: Target, guard: str | None) -> dict[str, Any]:
        return {
            "tk": target.thread_key,
            "tid": _thread_id_bytes(target.thread_id),
            "ttl": self.settings.ttl_seconds,
            "guard": guard,
            "ns": target.checkpoint_ns,
        }

    def put(self, target: Target, encoded: EncodedCheckpoint) -> Plan[Query, None]:
        sizes = sum(len(b.data or b"") for b in encoded.blobs) + len(encoded.checkpoint[1])
        if sizes > MAX_STATEMENT_BYTES:
            raise ValueTooLargeError("the checkpoint's values together", sizes, MAX_STATEMENT_BYTES)
        params = self._thread_params(target, encoded.parent_id)
        params.update(
            id=encoded.checkpoint_id,
            parent=encoded.parent_id,
            run_id=encoded.run_id,
            c_type=encoded.checkpoint[0],
            c_blob=encoded.checkpoint[1],
            m_type=encoded.metadata[0],
            m_blob=encoded.metadata[1],
            m_json=Jsonb(encoded.metadata_json),
            versions=Jsonb(encoded.channel_versions),
            delta=encoded.delta_channels,
            valued=encoded.valued_channels,
            b_ch=[b.channel for b in encoded.blobs],
            b_ver=[b.version for b in encoded.blobs],
            b_ty=[b.type for b in encoded.blobs],
            b_bl=[b.data for b in encoded.blobs],
        )
        rows: Rows = yield Query(
            f"""
            WITH thread AS ({self._upsert_thread}),
            parent AS (
                SELECT p.delta_seeds FROM {self._ck} p
                WHERE p.thread_key = %(tk)s AND p.checkpoint_ns = %(ns)s
                    AND p.checkpoint_id = %(parent)s
            ),
            blobs AS (
                INSERT INTO {self._bl} (thread_key, checkpoint_ns, channel, version, type, blob)
                SELECT %(tk)s, %(ns)s, b.channel, b.version, b.type, b.blob
                FROM unnest(%(b_ch)s::text[], %(b_ver)s::text[], %(b_ty)s::text[],
                            %(b_bl)s::bytea[]) AS b(channel, version, type, blob)
                WHERE EXISTS (SELECT 1 FROM thread)
                ON CONFLICT (thread_key, checkpoint_ns, channel, version)
                    DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
            )
            INSERT INTO {self._ck} (thread_key, checkpoint_ns, checkpoint_id,
                parent_checkpoint_id, run_id, checkpoint_type, checkpoint, metadata_type,
                metadata, metadata_json, channel_versions, delta_seeds)
            SELECT %(tk)s, %(ns)s, %(id)s, %(parent)s, %(run_id)s, %(c_type)s, %(c_blob)s,
                %(m_type)s, %(m_blob)s, %(m_json)s, %(versions)s,
                (
                    SELECT jsonb_object_agg(d.ch, CASE WHEN d.ch = ANY(%(valued)s::text[])
                        THEN %(id)s
                        ELSE coalesce((SELECT p.delta_seeds ->> d.ch FROM parent p), '') END)
                    FROM (
                        SELECT unnest(%(delta)s::text[]) AS ch
                        UNION
                        SELECT k FROM parent p CROSS JOIN LATERAL jsonb_object_keys(p.delta_seeds) k
                        WHERE %(versions)s::jsonb ? k
                    ) d
                )
            FROM thread
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
            RETURNING (SELECT was_expired FROM thread), (SELECT live_after FROM thread)""",
            params,
            fetch=True,
        )
        was_expired, live_after = rows[0]
        if (yield from self._refused(params, live_after, encoded.parent_id)):
            return
        if was_expired:
            yield from self._purge_before(target.thread_key, encoded.checkpoint_id)
        if self.settings.keep_last is not None:
            yield from self._trim(target.thread_key, target.checkpoint_ns, self.settings.keep_last)

    def put_writes(self, target: Target, writes: list[EncodedWrite]) -> Plan[Query, None]:
        if not writes:
            return
        assert target.checkpoint_id is not None
        params = self._thread_params(target, target.checkpoint_id)
        params.update(
            id=target.checkpoint_id,
            task_id=writes[0].task_id,
            path=writes[0].task_path,
            idx=[w.idx for w in writes],
            ch=[w.channel for w in writes],
            ty=[w.type for w in writes],
            bl=[w.data for w in writes],
        )
        rows: Rows = yield Query(
            f"""
            WITH thread AS ({self._upsert_thread}),
            written AS (
                INSERT INTO {self._wr} (thread_key, checkpoint_ns, checkpoint_id, task_id, idx,
                    task_path, channel, type, blob)
                SELECT %(tk)s, %(ns)s, %(id)s, %(task_id)s, w.idx, %(path)s, w.channel, w.type,
                    w.blob
                FROM unnest(%(idx)s::int[], %(ch)s::text[], %(ty)s::text[], %(bl)s::bytea[])
                    AS w(idx, channel, type, blob)
                WHERE EXISTS (SELECT 1 FROM thread)
                ON CONFLICT (thread_key, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
                    task_path = EXCLUDED.task_path, channel = EXCLUDED.channel,
                    type = EXCLUDED.type, blob = EXCLUDED.blob
                    WHERE EXCLUDED.idx < 0
            )
            SELECT was_expired, live_after FROM thread""",
            params,
            fetch=True,
        )
        was_expired, live_after = rows[0]
        newer = live_after is None or target.checkpoint_id > live_after
        if (yield from self._refused(params, live_after, None if newer else target.checkpoint_id)):
            return
        if was_expired:
            yield from self._purge_before(target.thread_key, target.checkpoint_id)

    def _refused(
        self, params: dict[str, Any], live_after: str | None, must_exist: str | None
    ) -> Plan[Query, bool]:
        """On a deleted thread, undo this write unless ``must_exist`` still exists.

        Checked with a statement of its own, after the thread row is locked: its fresh
        snapshot sees a delete_thread that committed while we waited for the lock.
        """
        if live_after is None or must_exist is None:
            return False
        rows: Rows = yield Query(
            f"SELECT EXISTS (SELECT 1 FROM {self._ck} WHERE thread_key = %(tk)s "
            "AND checkpoint_ns = %(ns)s AND checkpoint_id = %(check)s)",
            {**params, "check": must_exist},
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
        than the deletion; so a run that keeps going cannot bring the thread back. The
        refused checkpoint id joins the tombstone, so writes that follow it are refused.
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
            f"""UPDATE {self._th} SET live_after = greatest(live_after, %(id)s),
                thread_id = CASE WHEN EXISTS (
                    SELECT 1 FROM {self._ck} WHERE thread_key = %(tk)s
                ) THEN thread_id END
            WHERE thread_key = %(tk)s""",
            params,
        )
        yield from self._collect_blobs(freed)

    def _purge_before(self, tk: bytes, checkpoint_id: str) -> Plan[Query, None]:
        """Drop what an expired thread held before a write revived it."""
        for table in (self._wr, self._ck):
            yield Query(
                f"DELETE FROM {table} WHERE thread_key = %s AND checkpoint_id < %s",
                (tk, checkpoint_id),
            )
        yield Query(
            f"""DELETE FROM {self._bl} b WHERE b.thread_key = %s AND NOT EXISTS (
                SELECT 1 FROM {self._ck} c WHERE c.thread_key = b.thread_key
                    AND c.checkpoint_ns = b.checkpoint_ns
                    AND c.channel_versions ->> b.channel = b.version)""",
            (tk,),
        )

    def _collect_blobs(self, freed: Rows) -> Plan[Query, None]:
        """Delete blobs that deleted checkpoints used and no remaining checkpoint uses."""
        if not freed:
            return
        tks, nss, chs, vers = (list(col) for col in zip(*freed, strict=True))
        yield Query(
            f"""
            DELETE FROM {self._bl} b
            USING unnest(%s::bytea[], %s::text[], %s::text[], %s::text[])
                AS f(thread_key, checkpoint_ns, channel, version)
            WHERE b.thread_key = f.thread_key AND b.checkpoint_ns = f.checkpoint_ns
                AND b.channel = f.channel AND b.version = f.version
                AND NOT EXISTS (
                    SELECT 1 FROM {self._ck} c
                    WHERE c.thread_key = f.thread_key AND c.checkpoint_ns = f.checkpoint_ns
                        AND c.channel_versions ->> f.channel = f.version)""",
            (tks, nss, chs, vers),
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
                RETURNING c.checkpoint_id, c.channel_versions
            ), gone_writes AS (
                DELETE FROM {self._wr} w USING gone g
                WHERE w.thread_key = %(tk)s AND w.checkpoint_ns = %(ns)s
                    AND w.checkpoint_id = g.checkpoint_id
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
        # Lock the thread rows first: a concurrent put holds the same lock, so it either
        # commits before (and is deleted here) or waits and meets the tombstone.
        yield Query(
            f"SELECT 1 FROM {self._th} WHERE thread_key = ANY(%s) ORDER BY thread_key FOR UPDATE",
            (tks,),
        )
        yield Query(
            f"""
            WITH last AS (
                SELECT k.tk, greatest(
                    (SELECT max(checkpoint_id) FROM {self._ck} WHERE thread_key = k.tk),
                    (SELECT max(checkpoint_id) FROM {self._wr} WHERE thread_key = k.tk)) AS id
                FROM unnest(%(tks)s::bytea[]) AS k(tk)
            ), d1 AS (DELETE FROM {self._ck} WHERE thread_key = ANY(%(tks)s)),
            d2 AS (DELETE FROM {self._bl} WHERE thread_key = ANY(%(tks)s)),
            d3 AS (DELETE FROM {self._wr} WHERE thread_key = ANY(%(tks)s))
            UPDATE {self._th} t SET thread_id = NULL, expires_at = NULL, updated_at = now(),
                live_after = greatest(t.live_after, last.id)
            FROM last WHERE t.thread_key = last.tk""",
            {"tks": tks},
        )

    def delete_thread(self, thread_id: str) -> Plan[Query, None]:
        yield from self._delete_threads([thread_key(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[Query, None]:
        if not run_ids:
            return
        freed: Rows = yield Query(
            f"""
            WITH gone AS (
                DELETE FROM {self._ck} WHERE run_id = ANY(%s)
                RETURNING thread_key, checkpoint_ns, checkpoint_id, channel_versions
            ), gone_writes AS (
                DELETE FROM {self._wr} w USING gone g
                WHERE w.thread_key = g.thread_key AND w.checkpoint_ns = g.checkpoint_ns
                    AND w.checkpoint_id = g.checkpoint_id
            )
            SELECT DISTINCT g.thread_key, g.checkpoint_ns, v.key, v.value
            FROM gone g CROSS JOIN LATERAL jsonb_each_text(g.channel_versions) v""",
            (list(run_ids),),
            fetch=True,
        )
        yield from self._collect_blobs(freed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[Query, None]:
        params = {
            "src": thread_key(source_thread_id),
            "dst": thread_key(target_thread_id),
            "dst_id": _thread_id_bytes(target_thread_id),
            "ttl": self.settings.ttl_seconds,
        }
        yield Query(
            f"""
            WITH source AS (
                SELECT 1 FROM {self._th} t WHERE t.thread_key = %(src)s AND {self._visible}
            ), thread AS (
                INSERT INTO {self._th} AS t (thread_key, thread_id, expires_at, updated_at)
                SELECT %(dst)s, %(dst_id)s, now() + make_interval(secs => %(ttl)s), now()
                FROM source
                ON CONFLICT (thread_key) DO UPDATE SET thread_id = EXCLUDED.thread_id,
                    expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at,
                    live_after = NULL
                RETURNING 1
            ), blobs AS (
                INSERT INTO {self._bl} (thread_key, checkpoint_ns, channel, version, type, blob)
                SELECT %(dst)s, checkpoint_ns, channel, version, type, blob FROM {self._bl}
                WHERE thread_key = %(src)s AND EXISTS (SELECT 1 FROM thread)
                ON CONFLICT DO NOTHING
            ), writes AS (
                INSERT INTO {self._wr} (thread_key, checkpoint_ns, checkpoint_id, task_id, idx,
                    task_path, channel, type, blob)
                SELECT %(dst)s, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
                    type, blob FROM {self._wr}
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

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Query, None]:
        if not thread_ids:
            return
        tks = sorted({thread_key(t) for t in thread_ids})
        if keep_latest:
            namespaces: Rows = yield Query(
                f"SELECT DISTINCT thread_key, checkpoint_ns FROM {self._ck} "
                "WHERE thread_key = ANY(%s)",
                (tks,),
                fetch=True,
            )
            for tk, ns in namespaces:
                yield from self._trim(tk, ns, 1)
        else:
            yield from self._delete_threads(tks)

    def sweep_expired(self, batch_size: int) -> Plan[Query, tuple[int, bool]]:
        """One bounded batch of expired threads (and old tombstones), deleted whole."""
        rows: Rows = yield Query(
            f"""
            WITH victims AS (
                SELECT thread_key, thread_id IS NOT NULL AS live FROM {self._th}
                WHERE expires_at <= now()
                   OR (thread_id IS NULL
                       AND updated_at < now() - make_interval(hours => {TOMBSTONE_HOURS}))
                LIMIT %(n)s FOR UPDATE SKIP LOCKED
            ), d1 AS (
                DELETE FROM {self._ck} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d2 AS (
                DELETE FROM {self._bl} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d3 AS (
                DELETE FROM {self._wr} WHERE thread_key IN (SELECT thread_key FROM victims)
            ), d4 AS (
                DELETE FROM {self._th} WHERE thread_key IN (SELECT thread_key FROM victims)
            )
            SELECT count(*) FILTER (WHERE live), count(*) FROM victims""",
            {"n": batch_size},
            fetch=True,
        )
        live, total = rows[0]
        return int(live), int(total) >= batch_size
