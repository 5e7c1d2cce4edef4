"""A smoke run of ``benchmarks/observability.py``: a few turns, a well-formed report.

Not a benchmark: nothing here depends on speed. It proves that the one command runs every
mode (nothing on, the control, Prometheus, OTel metrics deferred and inline, OTel traces)
through the real LangGraph runtime, that every listener saw the turn's events without
raising (the harness asserts ``listener_errors == 0``), and that the JSON and the table
report each mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import observability as bench  # noqa: E402

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

CHAT_TURN_EVENTS = 8
"""The two-node chat graph: one load, four checkpoint puts, three put_writes."""


def test_smoke_run_reports_every_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "obs.json"
    assert (
        bench.main(["--backends", "sqlite", "--turns", "3", "--reps", "20", "--json", str(out)])
        == 0
    )

    report = json.loads(out.read_text())
    (row,) = report["turns"]
    assert (row["backend"], row["turns"]) == ("sqlite", 3)
    assert row["events_per_turn"] == CHAT_TURN_EVENTS
    for mode in bench.MODES:
        assert row[f"{mode}_p50_ms"] > 0, mode
    for mode in bench.MODES[1:]:
        assert isinstance(row[f"{mode}_overhead_pct"], float), mode
        assert isinstance(row[f"{mode}_paired_pct"], float), mode
    # the deferred listener's reader is not collected during the turns: all of them wait
    assert row["otel_metrics_pending"] == 3 * CHAT_TURN_EVENTS
    for key in ("collect_ms", "inline_collect_ms", "drain_us_per_turn", "drain_pct_of_off_p50"):
        assert isinstance(row[f"otel_metrics_{key}"], float), key
    micro = report["micro"]
    for mode in ("off", *bench.MODES[2:]):
        assert micro[f"{mode}_us_per_event"] > 0, mode
    assert micro["sdk_bare_span_us"] > 0 and micro["otel_metrics_drain_us_per_event"] > 0
    assert set(report["load"]) == {"start", "end"}

    table = capsys.readouterr().out
    cells = [line.split(" | ") for line in table.splitlines() if line.startswith("| sqlite |")]
    assert {c[2] for c in cells if len(c) == 7} == set(bench.MODES)
    assert any(len(c) == 2 for c in cells)  # the SDK's floor for traces
    assert "Load average:" in table


@pytest.mark.parametrize("mode", bench.COUNTED)
def test_the_counted_child_runs_every_mode(mode: str) -> None:
    """What ``--instructions`` runs under valgrind, here without it: a turn in each mode,
    with the saver calls wrapped in ``sys.call_tracing`` (the harness asserts no listener
    raised)."""
    assert bench.main(["--count", f"sqlite,{mode},1,storage"]) == 0
