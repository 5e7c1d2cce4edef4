"""``benchmarks.replay``: a turn's storage calls replayed alone, per saver and backend."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import replay


def test_sqlite_replay_reports_every_saver_and_the_engine_by_statement() -> None:
    out = replay.main(["--backend", "sqlite", "--turns", "20"])
    assert list(out) == ["featureless", "official", "rung6", "ours"]
    for label, row in out.items():
        assert row["us/turn"] > 0, label
        assert row["server us/turn"] is None, label  # SQLite runs in this process
        assert row["calls per turn"] >= 8, label  # a get_tuple, four puts, writes
        assert sum(row[name] for name in replay.CALLS) == pytest.approx(row["us/turn"])
        # the engine's time is timed on every saver's connections, and is part of that
        # run's total (not of the untimed run's: on a busy machine the two runs differ by
        # more than the calls around the engine cost the featureless saver)
        inside = sum(us for us, _ in row["sql"].values())
        assert 0 < inside < row["us/turn timed"], label
    # ours sends BEGIN IMMEDIATE/COMMIT around each put; the official commits by method
    assert any(kind.startswith("COMMIT") for kind in out["ours"]["sql"])
    assert "commit()" in out["official"]["sql"]


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_server_backends_replay_with_the_server_s_cpu(backend: str) -> None:
    """The server's CPU is read beside the client's (Redis's own count; PostgreSQL's
    client backends in /proc, 10 ms ticks: enough turns for ours to show some)."""
    out = replay.main(["--backend", backend, "--turns", "60"])
    assert "ours" in out and "rung6" in out and "featureless" in out
    assert ("official" in out) == (backend == "postgres")
    assert all(row["sql"] == {} for row in out.values())
    assert all(row["server us/turn"] is not None for row in out.values())
    assert all(row["server us/turn"] >= 0 for row in out.values())
    assert out["ours"]["server us/turn"] > 0


def test_a_replayed_call_changes_the_thread_id_alone() -> None:
    config = {"configurable": {"thread_id": "a", "checkpoint_ns": "a", "checkpoint_id": "1"}}
    renamed = replay._renamed(config, "b")
    assert renamed == {
        "configurable": {"thread_id": "b", "checkpoint_ns": "a", "checkpoint_id": "1"}
    }
    assert config["configurable"]["thread_id"] == "a"  # the recorded call stays as it was
