"""PostgreSQL tables of the store and their versioned migrations.

Layout (in the configured schema, prefixed ``lgmp_`` so it can sit beside LangGraph's own
``store`` table in one database):

- ``lgmp_store``: one row per item. ``prefix`` is the namespace's labels joined by ``.``
  (labels cannot contain ``.``), ``key`` the item key; both use the ``C`` collation so a
  namespace-prefix search is a btree range scan (``prefix >= 'a.b.' AND prefix < 'a.b/'``)
  and namespaces sort as Python sorts tuples. ``value`` is ``jsonb`` for filtering in SQL;
  ``escaped`` marks values holding strings that had to be escaped (``\\u0000``).
  ``version`` comes from a sequence, so it changes on every write and never repeats, even
  across a delete and re-create. TTL is data: ``expires_at`` (indexed for the sweep) and
  the item's ``ttl_minutes`` for refresh on read.
- ``lgmp_store_vectors``: one row per embedded text of an item, as ``float8[]`` with its
  norm, deleted with the item; on a database set up by stores without an index it is
  missing until the first ``setup()`` of a store with one (see ``FRESH``).
- ``lgmp_store_tombstones``: namespace prefixes whose puts are dropped until ``until``
  (see :mod:`..tombstones`), by a hex SHA-256 of the prefix text, so an erased user's id
  is not kept in them. No index on ``until``: a put must find its tombstones by hash
  (with one, a generic plan scanned every live tombstone); pruning reads the whole table,
  which holds only the hold window's erasures.
- ``lgmp_store_value_idx``: a GIN index (``jsonb_path_ops``) on ``value``, so a filtered
  search with a string equality across many namespaces adds a containment test it can
  answer from the index (see :mod:`..tokens`); the exact filter still decides each row.
  Version 2 builds it; on a large existing table that takes a while and holds puts back.

Migrations run in order under a transaction-scoped advisory lock (see
:mod:`langgraph_memory_plus.drivers.migrations`), so several processes may call ``setup()`` at once.
"""

from __future__ import annotations

from ...drivers.pgnames import quote_schema

__all__ = ["FRESH", "MIGRATIONS", "VECTORS", "quote_schema"]

# Only a store with an index writes or reads it: see FRESH.
VECTORS = """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_store_vectors (
            prefix text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            field text COLLATE "C" NOT NULL,
            embedding double precision[] NOT NULL,
            norm double precision NOT NULL,
            PRIMARY KEY (prefix, key, field),
            FOREIGN KEY (prefix, key) REFERENCES {s}.lgmp_store (prefix, key) ON DELETE CASCADE
        )
        """

# Position in this list is the migration's version; append only. Each migration is a
# sequence of single statements; ``{s}`` is the quoted schema.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE SEQUENCE IF NOT EXISTS {s}.lgmp_store_version_seq",
        """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_store (
            prefix text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value jsonb NOT NULL,
            escaped boolean NOT NULL DEFAULT false,
            version bigint NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz,
            ttl_minutes double precision,
            PRIMARY KEY (prefix, key)
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS lgmp_store_expires_at_idx
            ON {s}.lgmp_store (expires_at) WHERE expires_at IS NOT NULL
        """,
        VECTORS,
    ),
    (
        """
        CREATE TABLE IF NOT EXISTS {s}.lgmp_store_tombstones (
            prefix_hash text COLLATE "C" PRIMARY KEY,
            until timestamptz NOT NULL
        )
        """,
    ),
    (
        """
        CREATE INDEX IF NOT EXISTS lgmp_store_value_idx
            ON {s}.lgmp_store USING gin (value jsonb_path_ops)
        """,
    ),
)

FRESH: tuple[str, ...] = tuple(
    statement for migration in MIGRATIONS for statement in migration if statement != VECTORS
)
"""The latest layout but ``lgmp_store_vectors``, for a database with none of the tables.
The vectors table is created by the ``setup()`` of a store with an index (as LangGraph's
``PostgresStore`` creates its vector table), in the same transaction when the database is
new: a store without one never reads or writes it (an item's vectors go with it by the
foreign key), and creating it was a fifth of a new database's setup. A store with an
index that never ran ``setup()`` on such a database gets ``SetupRequiredError``."""
