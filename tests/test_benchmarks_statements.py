"""A smoke run of ``benchmarks/statements.py``: the counters count and the breakdown adds up.

Not a benchmark: nothing here depends on speed. The counts are exact for the featureless
savers, whose statements are known (a put is one statement and one round trip), so a
counter that missed a driver path would show here.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import minimal, statements  # noqa: E402
from benchmarks import targets as tg  # noqa: E402

pytestmark = pytest.mark.storage


def test_counts_per_turn_and_cpu_shares(pg_url: str, redis_url: str) -> None:
    statements.install()
    try:
        _check(tg.Env(pg=pg_url, redis=redis_url))
    finally:
        statements.uninstall()


def _check(env: tg.Env) -> None:
    # featureless: per turn 3 puts and 4 put_writes (+ get_tuple), each one statement
    pg = statements.count_turns(minimal.MIN_PG, env, 1, 3, 1)
    assert pg["pg statements"] >= 7 and pg["pg round trips"] >= 7
    sqlite = statements.count_turns(minimal.MIN_SQLITE, env, 1, 3, 1)
    assert sqlite["sqlite statements"] >= 7 and sqlite["sqlite commits"] >= 3
    redis = statements.count_turns(minimal.MIN_REDIS, env, 1, 3, 1)
    assert redis["redis round trips"] >= 7 and redis["redis commands"] >= redis["redis round trips"]
    ours = statements.count_turns(tg.OURS_REDIS, env, 1, 2, 1)
    assert ours["redis Lua calls"] >= 1  # our saver writes through scripts
    found = statements.profile_turns(minimal.MIN_SQLITE, env, 1, 3, 1)
    assert found["cpu ms/turn"] > 0
    assert math.isclose(sum(found["shares"].values()), 1.0)
    assert found["shares"].get("featureless saver", 0) > 0
    assert statements.component("/x/langgraph_memory_plus/checkpoint/codec.py", "f") == (
        "codec (ours)"
    )


def test_a_sqlite_statement_counts_once_whatever_triggers_it_runs(tmp_path: Path) -> None:
    """SQLite's trace callback reports a trigger program and an upsert's update path with
    the text of the statement that ran them: each is still one statement (our thread
    index's upsert read as two a put), while an ``executemany`` counts each parameter
    set and a commit counts as one."""
    import sqlite3

    statements.install()
    try:
        conn = sqlite3.connect(str(tmp_path / "t.db"), isolation_level=None)
        conn.execute("CREATE TABLE t (k PRIMARY KEY, v, w)")
        conn.execute(
            "CREATE TRIGGER tr AFTER UPDATE OF v ON t BEGIN "
            "UPDATE t SET w = new.v WHERE k = new.k; END"
        )
        statements.COUNTS.take()
        upsert = (
            "INSERT INTO t AS i VALUES (?, ?, NULL) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
        )
        conn.execute("BEGIN")
        conn.execute(upsert, (1, "a"))
        conn.execute(upsert, (1, "b"))  # the update path, and the trigger it fires
        conn.execute(upsert, (1, "b"))  # the same statement again: counted again
        conn.cursor().executemany(upsert, [(2, "x"), (3, "y"), (4, "z")])
        conn.execute("COMMIT")
        counted = statements.COUNTS.take()
        conn.close()
    finally:
        statements.uninstall()
    assert counted["sqlite statements"] == 1 + 3 + 3 + 1
    assert counted["sqlite commits"] == 1
