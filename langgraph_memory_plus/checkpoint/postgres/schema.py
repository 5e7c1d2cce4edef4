"""PostgreSQL tables of the checkpointer and their versioned migrations.

Layout (every table in the configured schema, prefixed ``lgmp_`` so it can sit beside
LangGraph's own saver in one database):

- ``lgmp_threads``: one row per thread. Rows are keyed by SHA-256 of the thread id, so
  ids of any length and any characters fit a btree; the id itself is kept as bytes
  (``text`` cannot hold ``\\u0000``). Holds the thread's expiry (TTL is per thread, so
  a thread never half-expires) and, after ``delete_thread``, a tombstone: checkpoint
  ids at or below ``live_after`` belong to deleted history and late writes to them
  are refused.
- ``lgmp_checkpoints``: one row per checkpoint, without channel values. With retention,
  old checkpoints that ``DeltaChannel`` replay still reads stay as ``replay_only`` rows.
- ``lgmp_blobs``: one row per (channel, version); shared by checkpoints.
- ``lgmp_task_writes`` (migration 2, replacing ``lgmp_writes``): pending writes, one
  row per checkpoint and task holding all that task's writes as one record (see
  :mod:`langgraph_memory_plus.checkpoint.task_writes`); a row per write repeated the key
  and its index entry for each of a task's two or three writes.
- ``lgmp_items`` (migration 1): list channels stored as items, pages and spines, so a
  long ``messages`` list costs O(T), not O(T^2); see
  :mod:`langgraph_memory_plus.checkpoint.lists`. Pages and spines were rows of
  ``lgmp_nodes`` until migration 3 moved them here (type ``lgmp:node``): a table of its
  own cost a thread's first pages of every relation fork for a few rows.

Migrations are applied in order under a transaction-scoped advisory lock, so several
processes may call ``setup()`` at once, and inside a caller's open transaction.
"""

from __future__ import annotations

from ...drivers.pgnames import quote_schema as quote_schema  # re-exported for the plans

# The statements that outlive their migration, shared with FRESH.
_THREADS = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_threads (
            thread_key bytea PRIMARY KEY,
            thread_id bytea,
            expires_at timestamptz,
            live_after text,
            deleted_at timestamptz
        )
        """
_THREADS_EXPIRES_AT = """
        CREATE INDEX IF NOT EXISTS lgmp_threads_expires_at_idx
            ON {s}.lgmp_threads (expires_at) WHERE expires_at IS NOT NULL
        """
_THREADS_TOMBSTONE = """
        CREATE INDEX IF NOT EXISTS lgmp_threads_tombstone_idx
            ON {s}.lgmp_threads (deleted_at) WHERE thread_id IS NULL
        """
_CHECKPOINTS = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_checkpoints (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            checkpoint_id text NOT NULL,
            parent_checkpoint_id text,
            run_id text,
            checkpoint_type text NOT NULL,
            checkpoint bytea NOT NULL,
            metadata_type text NOT NULL,
            metadata bytea NOT NULL,
            metadata_json jsonb NOT NULL,
            channel_versions jsonb NOT NULL,
            delta_seeds jsonb,
            replay_only boolean NOT NULL DEFAULT false,
            PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id)
        )
        """
_CHECKPOINTS_RUN_ID = """
        CREATE INDEX IF NOT EXISTS lgmp_checkpoints_run_id_idx
            ON {s}.lgmp_checkpoints (run_id) WHERE run_id IS NOT NULL
        """
_BLOBS = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_blobs (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            channel text NOT NULL,
            version text NOT NULL,
            type text NOT NULL,
            blob bytea,
            PRIMARY KEY (thread_key, checkpoint_ns, channel, version)
        )
        """
_ITEMS = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_items (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            item_id bytea NOT NULL,
            type text NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, item_id)
        )
        """
_TASK_WRITES = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_task_writes (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            checkpoint_id text NOT NULL,
            task_id text NOT NULL,
            task_path text NOT NULL,
            writes bytea NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id, task_id)
        )
        """

# Position in this list is the migration's version; append only. Each migration is a
# sequence of parameterless statements (``setup()`` sends the pending ones as one script).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _THREADS,
        _THREADS_EXPIRES_AT,
        _THREADS_TOMBSTONE,
        _CHECKPOINTS,
        _CHECKPOINTS_RUN_ID,
        _BLOBS,
        """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_writes (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            checkpoint_id text NOT NULL,
            task_id text NOT NULL,
            idx integer NOT NULL,
            task_path text NOT NULL,
            channel text NOT NULL,
            type text NOT NULL,
            blob bytea NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id, task_id, idx)
        )
        """,
    ),
    (
        _ITEMS,
        """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_nodes (
            thread_key bytea NOT NULL,
            checkpoint_ns text NOT NULL,
            node_id bytea NOT NULL,
            children bytea NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, node_id)
        )
        """,
    ),
    (
        _TASK_WRITES,
        # Existing writes, packed as task_writes.pack does: four netstrings per write, the
        # write's own path after its index where it is not the record's.
        """
        INSERT INTO {s}.lgmp_task_writes
            (thread_key, checkpoint_ns, checkpoint_id, task_id, task_path, writes)
        SELECT w.thread_key, w.checkpoint_ns, w.checkpoint_id, w.task_id, min(w.task_path),
            string_agg(
                convert_to(octet_length(f.idx)::text || ':', 'UTF8') || f.idx
                || convert_to(octet_length(f.ch)::text || ':', 'UTF8') || f.ch
                || convert_to(octet_length(f.ty)::text || ':', 'UTF8') || f.ty
                || convert_to(octet_length(w.blob)::text || ':', 'UTF8') || w.blob,
                ''::bytea ORDER BY w.idx)
        FROM (
            SELECT *, min(task_path) OVER (
                PARTITION BY thread_key, checkpoint_ns, checkpoint_id, task_id) AS path
            FROM {s}.lgmp_writes
        ) w
        CROSS JOIN LATERAL (SELECT convert_to(w.idx::text
                || CASE WHEN w.task_path = w.path THEN '' ELSE ' ' || w.task_path END,
                'UTF8') AS idx,
            convert_to(w.channel, 'UTF8') AS ch, convert_to(w.type, 'UTF8') AS ty) f
        GROUP BY w.thread_key, w.checkpoint_ns, w.checkpoint_id, w.task_id
        ON CONFLICT DO NOTHING
        """,
        "DROP TABLE {s}.lgmp_writes",
    ),
    (
        """
        INSERT INTO {s}.lgmp_items (thread_key, checkpoint_ns, item_id, type, data)
        SELECT thread_key, checkpoint_ns, node_id, 'lgmp:node', children FROM {s}.lgmp_nodes
        ON CONFLICT DO NOTHING
        """,
        "DROP TABLE {s}.lgmp_nodes",
    ),
)

_THREADS_REFUSED = "ALTER TABLE {s}.lgmp_threads ADD COLUMN IF NOT EXISTS refused text[]"
REFUSED_MIGRATION: tuple[str, ...] = (
    # A deleted thread's tombstone keeps the checkpoint ids it refused: what hangs from
    # them is refused too, while the deletion's bound (``live_after``) stays put, so a new
    # run's checkpoints older than a refusal are never taken for the deleted run's
    # (retention may have dropped the roots its subgraphs hang from).
    _THREADS_REFUSED,
)

FRESH: tuple[str, ...] = (
    _THREADS,
    _THREADS_REFUSED,
    _THREADS_EXPIRES_AT,
    _THREADS_TOMBSTONE,
    _CHECKPOINTS,
    _CHECKPOINTS_RUN_ID,
    _BLOBS,
    _ITEMS,
    _TASK_WRITES,
)
"""The tables as the last of ``MIGRATIONS`` leaves them, for a database that has none:
``setup()`` on a fresh database creates them directly instead of replaying the history
(tables created only to be migrated and dropped cost most of its time). A test compares
the two layouts, catalog entry by catalog entry."""


_FENCES = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_fences (
            thread_key bytea PRIMARY KEY,
            owner text,
            token bigint NOT NULL,
            expires_at timestamptz
        )
        """
FENCE_MIGRATION: tuple[str, ...] = (_FENCES,)
"""One writer per thread (see checkpoint/fence.py): the owner, its fencing number and the
lease's expiry; owner NULL once released. A migration of its own, after the thread
index's (versions are positions); ``setup()`` on a fresh database creates it with FRESH."""

ERASED_MIGRATION: tuple[str, ...] = (
    # Users erase_user removed (owner: a SHA-256 digest of the user key as the index stores it), and
    # until when the saver refuses writes of theirs: a run still going for the user
    # cannot bring their data back (see ``checkpoint.context``). ``lift_erasure`` ends it.
    """
    CREATE TABLE IF NOT EXISTS {s}.lgmp_erased (
        owner text PRIMARY KEY,
        until timestamptz NOT NULL
    )
    """,
)

OWNER_MIGRATION: tuple[str, ...] = (
    # A thread of pending writes only (its put never came: the run's process died between
    # the two) has no thread index row; ``owner`` is the user its first writes named (the
    # user key as the index stores it), so ``erase_user`` finds it. Set when a write
    # creates the thread's row; cleared when the thread is deleted.
    "ALTER TABLE {s}.lgmp_threads ADD COLUMN IF NOT EXISTS owner text",
    """
    CREATE INDEX IF NOT EXISTS lgmp_threads_owner_idx
        ON {s}.lgmp_threads (owner, thread_key) WHERE owner IS NOT NULL
    """,
)
