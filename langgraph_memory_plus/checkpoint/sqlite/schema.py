"""SQLite tables of the checkpointer and their versioned migrations.

The same layout as PostgreSQL's (see :mod:`..postgres.schema`), table for table, so the
plans can follow the same rules; SQLite's types stand in where PostgreSQL's are missing:

- ``lgmp_threads``: one row per thread, keyed by 16 bytes of SHA-256 of the thread id (the
  id itself is kept as bytes). Holds the expiry (``expires_at``, seconds since the epoch:
  TTL is data, every read compares it with the clock) and, after ``delete_thread``, the
  tombstone ``live_after``.
- ``lgmp_checkpoints``: one row per checkpoint, without channel values. ``channel_versions``
  is JSON ``{channel: version as text}``, what blob lookups join on; ``versions_json``
  holds the versions as given when they were not all text (decoding needs them back
  exactly). ``metadata_json`` narrows ``list(filter=...)``. With retention, old
  checkpoints that ``DeltaChannel`` replay still reads stay as ``replay_only`` rows.
- ``lgmp_blobs``: one row per (channel, version), shared by checkpoints.
- ``lgmp_writes``: pending writes per checkpoint and task.
- ``lgmp_items`` and ``lgmp_nodes``: list channels stored as items, pages and spines (O(T),
  see :mod:`langgraph_memory_plus.checkpoint.lists`).

Tables are ``WITHOUT ROWID``: every lookup is by primary key, and the rows then live in
the primary key's b-tree instead of beside it.
"""

from __future__ import annotations

# Position in this list is the migration's version; append only.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE IF NOT EXISTS lgmp_threads (
            thread_key BLOB PRIMARY KEY,
            thread_id BLOB,
            expires_at REAL,
            live_after TEXT,
            deleted_at REAL
        ) WITHOUT ROWID
        """,
        """
        CREATE INDEX IF NOT EXISTS lgmp_threads_expires_at_idx
            ON lgmp_threads (expires_at) WHERE expires_at IS NOT NULL
        """,
        """
        CREATE INDEX IF NOT EXISTS lgmp_threads_tombstone_idx
            ON lgmp_threads (deleted_at) WHERE thread_id IS NULL
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_checkpoints (
            thread_key BLOB NOT NULL,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            checkpoint_type TEXT NOT NULL,
            checkpoint BLOB NOT NULL,
            metadata_type TEXT NOT NULL,
            metadata BLOB NOT NULL,
            metadata_json TEXT NOT NULL,
            channel_versions TEXT NOT NULL,
            versions_json TEXT,
            delta_seeds TEXT,
            replay_only INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id)
        ) WITHOUT ROWID
        """,
        """
        CREATE INDEX IF NOT EXISTS lgmp_checkpoints_run_id_idx
            ON lgmp_checkpoints (run_id) WHERE run_id IS NOT NULL
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_blobs (
            thread_key BLOB NOT NULL,
            checkpoint_ns TEXT NOT NULL,
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_key, checkpoint_ns, channel, version)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_writes (
            thread_key BLOB NOT NULL,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id, task_id, idx)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_items (
            thread_key BLOB NOT NULL,
            checkpoint_ns TEXT NOT NULL,
            item_id BLOB NOT NULL,
            type TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, item_id)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_nodes (
            thread_key BLOB NOT NULL,
            checkpoint_ns TEXT NOT NULL,
            node_id BLOB NOT NULL,
            children BLOB NOT NULL,
            PRIMARY KEY (thread_key, checkpoint_ns, node_id)
        ) WITHOUT ROWID
        """,
    ),
)

REFUSED_MIGRATION: tuple[str, ...] = (
    # A deleted thread's tombstone keeps the checkpoint ids it refused (a JSON array): what
    # hangs from them is refused too, while the deletion's bound (``live_after``) stays
    # put, so a new run's checkpoints older than a refusal are never taken for the
    # deleted run's (retention may have dropped the roots its subgraphs hang from).
    "ALTER TABLE lgmp_threads ADD COLUMN refused TEXT",
)

FENCE_MIGRATION: tuple[str, ...] = (
    # One writer per thread (see checkpoint/fence.py): the owner, its fencing number and
    # the lease's expiry (seconds since the epoch); owner NULL once released.
    """
    CREATE TABLE IF NOT EXISTS lgmp_fences (
        thread_key BLOB PRIMARY KEY,
        owner TEXT,
        token INTEGER NOT NULL,
        expires_at REAL
    ) WITHOUT ROWID
    """,
)
"""A migration of its own, after the thread index's (versions are positions)."""

ERASED_MIGRATION: tuple[str, ...] = (
    # Users erase_user removed (owner: a SHA-256 digest of the user key as the index stores it), and
    # until when the saver refuses writes of theirs: a run still going for the user
    # cannot bring their data back (see ``checkpoint.context``). ``lift_erasure`` ends it.
    """
    CREATE TABLE IF NOT EXISTS lgmp_erased (
        owner TEXT PRIMARY KEY,
        until REAL NOT NULL
    ) WITHOUT ROWID
    """,
)

OWNER_MIGRATION: tuple[str, ...] = (
    # A thread of pending writes only (its put never came: the run's process died between
    # the two) has no thread index row; ``owner`` is the user its first writes named (the
    # user key as the index stores it), so ``erase_user`` finds it. Set when a write
    # creates the thread's row; cleared when the thread is deleted.
    "ALTER TABLE lgmp_threads ADD COLUMN owner TEXT",
    """
    CREATE INDEX IF NOT EXISTS lgmp_threads_owner_idx
        ON lgmp_threads (owner, thread_key) WHERE owner IS NOT NULL
    """,
)
