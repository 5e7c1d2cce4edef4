"""A smoke run of ``benchmarks/interleaved.py``: two copies of this tree's package beside
rung 6, the official and the featureless savers, each keeping its conversation, every
paired ratio reported, and nothing left behind. Not a benchmark: nothing
here depends on speed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from test_benchmarks_smoke import assert_nothing_left  # noqa: E402

from benchmarks import interleaved  # noqa: E402
from benchmarks import targets as tg  # noqa: E402

pytestmark = pytest.mark.storage


@pytest.mark.parametrize("backend", ["postgres", "sqlite", "redis"])
def test_interleaved_run_reports_both_trees_rung_6_the_official_and_the_featureless(
    pg_url: str, redis_url: str, backend: str
) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    report = interleaved.run(
        env, {"A": str(ROOT), "B": str(ROOT)}, turns=2, threads=3, warmup=1, backend=backend
    )
    official = backend != "redis"  # no official saver runs on plain Redis
    rows = [
        line.split(" | ")[0].strip("| ") for line in report.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == ["featureless", *(["official"] if official else []), "rung6", "A", "B"]
    expected = {"B/A", "A/rung6", "B/rung6", "A/featureless", "B/featureless"}
    expected |= {"rung6/featureless"}
    if official:
        expected |= {"A/official", "B/official", "rung6/official"}
    for label in ("cpu", "wall"):
        line = next(x for x in report.splitlines() if x.startswith(f"paired medians ({label})"))
        ratios = dict(part.rsplit(" ", 1) for part in line.split(": ", 1)[1].split(", "))
        assert set(ratios) == expected
        assert all(float(v) > 0 for v in ratios.values())
    # the server's CPU beside the client's, where there is a server to read
    server = [x for x in report.splitlines() if x.startswith("server CPU per turn")]
    both = [x for x in report.splitlines() if x.startswith("client + server CPU per turn")]
    assert len(server) == len(both) == (backend != "sqlite")
    for line in server + both:
        means = dict(part.rsplit(" ", 1) for part in line.split(": ", 1)[1].split(", "))
        assert set(means) == set(rows[1:])
        assert all(float(v) >= 0 for v in means.values())
    for name in ("lgmp_a", "lgmp_b"):  # the copies, not this tree's package, ran
        assert sys.modules[name].__file__ != sys.modules["langgraph_memory_plus"].__file__
    assert_nothing_left(pg_url, redis_url, env.run_id)
