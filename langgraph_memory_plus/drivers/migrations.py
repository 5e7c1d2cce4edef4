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

from ..errors import SetupRequiredError
from .plan import Plan
from .postgres import Query, Rows, script


def advisory_lock_id(component: str, schema: str) -> int:
    """A stable 64-bit lock id per (component, schema): setups of others don't wait."""
    digest = hashlib.sha256(f"langgraph-memory-plus:{component}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def migrate(
    quoted_schema: str,
    table: str,
    lock_id: int,
    migrations: Sequence[Sequence[str]],
    fresh: Sequence[str] = (),
) -> Plan[Query, bool]:
    """Apply the migrations not yet recorded in ``quoted_schema.table``, in order.

    ``migrations[v]`` is version ``v``: single statements with ``{s}`` standing for the
    quoted schema. ``fresh``, if given, is the layout of the last version, ready to run:
    a database whose bookkeeping table this setup creates gets it directly (and every
    version recorded), which the plan's result says. A bookkeeping table that exists but
    records nothing (its rows deleted by hand) replays every migration instead: the
    component's tables may exist then, holding rows a fresh layout would not backfill.
    ``quoted_schema`` must already be checked and quoted; ``table`` is a constant of the
    caller.
    """
    rows: Rows = yield script(
        (
            f"SELECT pg_advisory_xact_lock({int(lock_id)})",
            f"CREATE SCHEMA IF NOT EXISTS {quoted_schema}",
            f"CREATE TABLE IF NOT EXISTS {quoted_schema}.{table} "
            "(v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
            # Created by this transaction: its catalog row has this transaction's xid.
            f"SELECT coalesce(max(v), -1), (SELECT c.xmin = pg_current_xact_id()::xid "
            f"FROM pg_class c WHERE c.oid = '{quoted_schema}.{table}'::regclass) "
            f"FROM {quoted_schema}.{table}",
        ),
        fetch=True,
    )
    pending = range(rows[0][0] + 1, len(migrations))
    created = bool(fresh) and pending.start == 0 and bool(rows[0][1])
    statements = (
        fresh if created else [s.format(s=quoted_schema) for v in pending for s in migrations[v]]
    )
    if pending:  # all of them in one round trip, still in the plan's one transaction
        yield script(
            [
                *statements,
                f"INSERT INTO {quoted_schema}.{table} (v) "
                f"SELECT generate_series({pending.start}, {pending.stop - 1})",
            ]
        )
    return created


class SchemaVersion:
    """Whether a component's tables are at the version this package migrates them to.

    A missing table or column already fails as :class:`SetupRequiredError`; a schema that
    ``setup()`` of an older release made may have every table and column and still lack a
    later migration (an index, a constraint, a backfill). So each saver or store reads its
    bookkeeping table once, before its first statement, and refuses to run on an older
    schema. Its own ``setup()`` skips the check (it is what brings the schema up to date).
    """

    def __init__(self, quoted_schema: str, table: str, migrations: Sequence[Sequence[str]]) -> None:
        self._query = f"SELECT max(v) FROM {quoted_schema}.{table}"
        self.latest = len(migrations) - 1
        self.current = False

    def pending(self, owner: str) -> Plan[Query, None] | None:
        """The check to run before the next plan, or ``None`` once it has passed."""
        return None if self.current else self._check(owner)

    def _check(self, owner: str) -> Plan[Query, None]:
        rows: Rows = yield Query(self._query, fetch=True)
        found = rows[0][0]
        if found is None or found < self.latest:
            at = "no recorded schema version" if found is None else f"schema version {found}"
            raise SetupRequiredError(
                f"{owner}: the database's tables are at {at}, this version of "
                f"langgraph-memory-plus needs {self.latest}; run {owner}.setup() once to "
                "migrate them"
            )
        self.current = True

    def migrating(self, plan: Plan[Query, None]) -> Plan[Query, None]:
        """``setup()``'s plan: marked current before it runs, so no check precedes it (a
        fresh database has no bookkeeping table to read), and unmarked if it fails."""
        self.current = True
        return self._migrate(plan)

    def _migrate(self, plan: Plan[Query, None]) -> Plan[Query, None]:
        try:
            yield from plan
        except BaseException:
            self.current = False
            raise
