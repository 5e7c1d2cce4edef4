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
