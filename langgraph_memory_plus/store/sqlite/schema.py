"""SQLite tables of the store and their versioned migrations.

The same layout as PostgreSQL's (:mod:`..postgres.schema`), in SQLite's types:

- ``lgmp_store``: one row per item. ``prefix`` is the namespace's labels joined by ``.``
  and ``key`` the item key, both NUL-free (escaped as on PostgreSQL, since SQLite's JSON
  functions stop at NUL); SQLite compares text bytewise, so a namespace-prefix search is a
  range on the primary key (``prefix >= 'a.b.' AND prefix < 'a.b/'``) and namespaces sort
  as Python sorts tuples. ``value`` is the JSON text (``escaped`` marks strings that were
  escaped). ``version`` comes from the one-row ``lgmp_store_clock``, so it changes on every
  write and never repeats, even across a delete and re-create. Times are microseconds
  since the epoch; TTL is data: ``expires_at`` (seconds, indexed for the sweep) and the
  item's ``ttl_minutes`` for refresh on read.
- ``lgmp_store_vectors``: one row per embedded text of an item: the vector as packed
  little-endian doubles, and its norm. Deleted with the item by the plans (not by a
  foreign key, which a caller's connection may not enforce).
- ``lgmp_store_tombstones``: namespace prefixes whose puts are dropped until ``until``
  (seconds; see :mod:`..tombstones`), by a hex SHA-256 of the prefix text; found by
  hash only (no index on ``until``, as on PostgreSQL).
- ``lgmp_store_fields``: the equality index of filtered searches: one row per token of an
  item (a short string of its value and its path, see :mod:`..tokens`), so a search for
  ``{"kind": "fact"}`` across many namespaces reads the items holding that string, not
  every item under its prefix. Written with the item by the plans; version 2 builds it
  for the rows already stored, with ``json_tree`` by the same rule.
"""

from __future__ import annotations

# The tokens of value_tokens: strings of at most 64 characters along keys that json_tree
# leaves unquoted (letters and digits, a letter first), outside lists.
_FIELDS_BACKFILL = """
        INSERT OR IGNORE INTO lgmp_store_fields (path, atom, prefix, key)
        SELECT substr(t.fullkey, 3), t.atom, s.prefix, s.key
        FROM lgmp_store s, json_tree(s.value) t
        WHERE t.type = 'text' AND length(t.atom) <= 64
            AND t.fullkey NOT GLOB '*[^A-Za-z0-9.$]*'
        """

# Position in this list is the migration's version; append only.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE IF NOT EXISTS lgmp_store (
            prefix TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            escaped INTEGER NOT NULL DEFAULT 0,
            version INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            expires_at REAL,
            ttl_minutes REAL,
            PRIMARY KEY (prefix, key)
        ) WITHOUT ROWID
        """,
        """
        CREATE INDEX IF NOT EXISTS lgmp_store_expires_at_idx
            ON lgmp_store (expires_at) WHERE expires_at IS NOT NULL
        """,
        "CREATE INDEX IF NOT EXISTS lgmp_store_version_idx ON lgmp_store (version)",
        """
        CREATE TABLE IF NOT EXISTS lgmp_store_vectors (
            prefix TEXT NOT NULL,
            key TEXT NOT NULL,
            field TEXT NOT NULL,
            embedding BLOB NOT NULL,
            norm REAL NOT NULL,
            PRIMARY KEY (prefix, key, field)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE IF NOT EXISTS lgmp_store_clock (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            version INTEGER NOT NULL
        )
        """,
        "INSERT INTO lgmp_store_clock (id, version) VALUES (0, 0) ON CONFLICT DO NOTHING",
    ),
    (
        """
        CREATE TABLE IF NOT EXISTS lgmp_store_tombstones (
            prefix_hash TEXT PRIMARY KEY,
            until REAL NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    (
        """
        CREATE TABLE IF NOT EXISTS lgmp_store_fields (
            path TEXT NOT NULL,
            atom TEXT NOT NULL,
            prefix TEXT NOT NULL,
            key TEXT NOT NULL,
            PRIMARY KEY (path, atom, prefix, key)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX IF NOT EXISTS lgmp_store_fields_item_idx ON lgmp_store_fields (prefix, key)",
        _FIELDS_BACKFILL,
    ),
)

FRESH: tuple[str, ...] = tuple(
    statement
    for migration in MIGRATIONS
    for statement in migration
    if statement != _FIELDS_BACKFILL
)
"""The latest layout, for a file with none of the store's tables: every migration but
the backfill of items a new file does not have."""
