"""Versioned PostgreSQL migrations as a plan, shared by the checkpointers and the stores.

Each component keeps its own list of migrations and its own bookkeeping table in the
configured schema. The plan takes a transaction-scoped advisory lock first, so several
processes may run ``setup()`` at once (the others wait, then find nothing to do), and it
runs inside the caller's transaction like every plan, so a failed migration leaves the
schema as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ._plan import Plan
from ._postgres import Query, Rows


def advisory_lock_id(component: str, schema: str) -> int:
    """A stable 64-bit lock id per (component, schema): setups of others don't wait."""
    digest = hashlib.sha256(f"langgraph-memory-plus:{component}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def migrate(
    quoted_schema: str,
    table: str,
    lock_id: int,
    migrations: Sequence[Sequence[str]],
) -> Plan[Query, None]:
    """Apply the migrations not yet recorded in ``quoted_schema.table``, in order.

    ``migrations[v]`` is version ``v``: single statements with ``{s}`` standing for the
    quoted schema. ``quoted_schema`` must already be checked and quoted; ``table`` is a
    constant of the caller.
    """
    yield Query("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
    yield Query(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema}")
    yield Query(
        f"CREATE TABLE IF NOT EXISTS {quoted_schema}.{table} "
        "(v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    rows: Rows = yield Query(
        f"SELECT coalesce(max(v), -1) FROM {quoted_schema}.{table}", fetch=True
    )
    for version in range(rows[0][0] + 1, len(migrations)):
        for statement in migrations[version]:
            yield Query(statement.format(s=quoted_schema))
        yield Query(f"INSERT INTO {quoted_schema}.{table} (v) VALUES (%s)", (version,))
