"""The item table's columns as the SQL stores (PostgreSQL, SQLite) write and read them.

Both keep one ``lgmp_store`` layout, each in its own types; the statement parts that name
its columns are written here once, so a column added to one store cannot be left out of
the other's reads or puts.
"""

from __future__ import annotations

INSERTED = "prefix, key, value, escaped, version, created_at, updated_at, expires_at, ttl_minutes"
"""The columns a put writes, in the order each store lists the values."""

READ = "s.prefix, s.key, s.value, s.escaped, s.version, s.created_at, s.updated_at, s.ttl_minutes"
"""What reads select from the table aliased ``s``, in the order the stores decode rows."""


def replace_existing(table: str, now: str) -> str:
    """``ON CONFLICT`` of a put: it replaces everything but the address and ``created_at``,
    except that an item written over an expired row (not swept yet) is a new item.

    ``table`` names the existing row (its alias or name), ``now`` is the store's current time.
    """
    return (
        "ON CONFLICT (prefix, key) DO UPDATE SET value = excluded.value, "
        "escaped = excluded.escaped, version = excluded.version, "
        f"created_at = CASE WHEN {table}.expires_at <= {now} THEN excluded.created_at "
        f"ELSE {table}.created_at END, updated_at = excluded.updated_at, "
        "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes"
    )
