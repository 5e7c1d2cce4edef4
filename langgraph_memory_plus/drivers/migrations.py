"""Versioned PostgreSQL migrations as a plan, shared by the checkpointers and the stores.

Each component keeps its own list of migrations and its own bookkeeping table in the
configured schema. ``setup()`` on a schema that is up to date runs no DDL and takes no
lock beyond ``ACCESS SHARE`` on the bookkeeping table: it reads the recorded version and
the catalog first (:func:`recorded_version`), as LangGraph's own ``setup()`` does, since
even a no-op ``ALTER TABLE ... IF NOT EXISTS`` queues for an exclusive lock behind any
open transaction that read the table, and every reader then queues behind it.

When there is something to do, the plan takes a transaction-scoped advisory lock, so
several processes may run ``setup()`` at once (the others wait, then find nothing to
do), and runs inside the caller's transaction like every plan, so a failed migration
leaves the schema as it was. Its statements run under ``lock_timeout``: the session's
own if it has one (a URL's ``options=-c lock_timeout=30s``, ``ALTER ROLE ... SET
lock_timeout``), else :data:`DEFAULT_LOCK_TIMEOUT`; a table another transaction holds
longer fails with :class:`~.errors.MigrationLockTimeoutError` naming the table and the
sessions holding it, instead of keeping its readers waiting.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

from ..errors import MigrationLockTimeoutError, SetupRequiredError
from .plan import Plan
from .postgres import Query, Rows, script

DEFAULT_LOCK_TIMEOUT = "5s"
"""How long a migration's statement waits for a table's lock, unless the session sets
``lock_timeout`` itself: long enough for ordinary queries to finish, short enough that
readers queued behind the waiting migration are not an outage."""

_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout expired (SQLSTATE lock_not_available)
_SAVED_TIMEOUT = "lgmp.lock_timeout"  # the session's lock_timeout while ours is set

# Other sessions' locks on the tables a migration will touch, and the session's setting.
_HOLDERS = """
    SELECT current_setting('lock_timeout'), h.relname, h.mode, h.pid, h.usename,
        h.application_name, h.state, h.age
    FROM (SELECT 1) one LEFT JOIN (
        SELECT c.relname::text, l.mode, l.pid, a.usename::text, a.application_name,
            a.state, extract(epoch FROM now() - a.xact_start)::float8 AS age
        FROM pg_locks l
        JOIN pg_class c ON c.oid = l.relation
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.granted AND l.pid <> pg_backend_pid() AND n.nspname = %s
            AND c.relname = ANY(%s)
    ) h ON true
    ORDER BY h.relname, h.pid"""


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
    more: Callable[[], Plan[Query, list[str]]] | None = None,
) -> Plan[Query, bool]:
    """Apply the migrations not yet recorded in ``quoted_schema.table``, in order.

    ``migrations[v]`` is version ``v``: single statements with ``{s}`` standing for the
    quoted schema. ``fresh``, if given, is the layout of the last version, ready to run:
    a database whose bookkeeping table this setup creates gets it directly (and every
    version recorded), which the plan's result says. A bookkeeping table that exists but
    records nothing (its rows deleted by hand) replays every migration instead: the
    component's tables may exist then, holding rows a fresh layout would not backfill.
    ``more``, if given, returns statements that go with an existing layout (read from
    the catalog under the lock: the thread index's key columns). Everything runs under
    :func:`run_locked`. ``quoted_schema`` must already be checked and quoted; ``table``
    is a constant of the caller. Call it only when :func:`recorded_version` (and the
    caller's own catalog checks) found something to do.
    """
    # Each component locks only its own setups; creating the schema is every component's,
    # and two concurrent CREATE SCHEMA IF NOT EXISTS of a new schema collide (the second
    # fails with UniqueViolation on pg_namespace: a saver's and a store's setup() started
    # together on a new schema, every time). A missing schema's creators take turns.
    schema_lock = advisory_lock_id("schema", quoted_schema)
    lock_and_read = script(
        (
            f"SELECT pg_advisory_xact_lock({int(lock_id)})",
            f"SELECT pg_advisory_xact_lock({int(schema_lock)}) "
            f"WHERE to_regnamespace('{quoted_schema}') IS NULL",
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
    try:
        rows: Rows = yield lock_and_read
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
            raise
        failed = f"another setup() of {quoted_schema} is migrating it (it holds the lock)"
    else:
        failed = ""
    if failed:  # raised outside the except block: the driver's text adds nothing
        raise MigrationLockTimeoutError(f"{failed}; run setup() again when it is done")
    pending = range(rows[0][0] + 1, len(migrations))
    created = bool(fresh) and pending.start == 0 and bool(rows[0][1])
    statements = (
        list(fresh)
        if created
        else [s.format(s=quoted_schema) for v in pending for s in migrations[v]]
    )
    if pending:
        statements.append(
            f"INSERT INTO {quoted_schema}.{table} (v) "
            f"SELECT generate_series({pending.start}, {pending.stop - 1})"
        )
    if more is not None and not created:
        statements.extend((yield from more()))
    yield from run_locked(quoted_schema, statements)
    return created


def recorded_version(quoted_schema: str, table: str) -> Plan[Query, int | None]:
    """The version recorded in ``quoted_schema.table``; ``None`` if it records none or
        does not exist. Reads only, with no lock but ACCESS SHARE on the bookkeeping table (the
    first query looks the table up in the catalog, so a missing one fails nothing)."""
    rows: Rows = yield Query(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{quoted_schema}.{table}",), fetch=True
    )
    if not rows[0][0]:
        return None
    rows = yield Query(f"SELECT max(v) FROM {quoted_schema}.{table}", fetch=True)
    return None if rows[0][0] is None else int(rows[0][0])


def run_locked(quoted_schema: str, statements: Sequence[str]) -> Plan[Query, None]:
    """Run ``statements`` (one script, one round trip) under ``lock_timeout``.

    The sessions holding locks on the tables they name are read first: if a lock is not
    granted in time, the error names the table and who holds it (by then the transaction
    has failed and can read nothing). Nothing to run sends nothing.
    """
    if not statements:
        return
    names = sorted(
        set(re.findall(re.escape(quoted_schema) + r"\.(lgmp_\w+)", " ".join(statements)))
    )
    holders: Rows = yield Query(_HOLDERS, (quoted_schema.strip('"'), names), fetch=True)
    setting = str(holders[0][0])
    timeout = DEFAULT_LOCK_TIMEOUT if setting in ("0", "") else setting
    ours = f"CASE WHEN current_setting('lock_timeout') = '0' THEN '{DEFAULT_LOCK_TIMEOUT}' "
    try:
        yield script(
            [
                f"SELECT set_config('{_SAVED_TIMEOUT}', current_setting('lock_timeout'), true)",
                f"SELECT set_config('lock_timeout', {ours}ELSE current_setting('lock_timeout') "
                "END, true)",
                *statements,
                # fetched: in pipeline mode a failure above surfaces here, not after the plan
                f"SELECT set_config('lock_timeout', current_setting('{_SAVED_TIMEOUT}'), true)",
            ],
            fetch=True,
        )
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
            raise
        failed = _lock_message(quoted_schema, names, timeout, [r[1:] for r in holders if r[1]])
    else:
        return
    raise MigrationLockTimeoutError(failed)  # outside the except block: no driver text


def _lock_message(
    quoted_schema: str, tables: Sequence[str], timeout: str, held: Sequence[tuple[object, ...]]
) -> str:
    who = "; ".join(
        f"{rel} ({mode}) by pid {pid} (user {user}, application {app or '-'!r}, {state}, "
        f"transaction open {age or 0:.0f} s)"
        for rel, mode, pid, user, app, state, age in held
    )
    if not who:
        who = f"one of {', '.join(tables)} by a transaction that started meanwhile"
    return (
        f"setup() could not lock its tables in {quoted_schema} within lock_timeout={timeout}, "
        f"so it changed nothing and kept no reader waiting longer: held: {who}. End that "
        "transaction (SELECT pg_terminate_backend(pid) if it must go) and run setup() "
        "again, or give it longer with the session's lock_timeout (e.g. "
        "options=-c%20lock_timeout%3D60s in the URL)"
    )


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
