"""A smoke run of the benchmark harness in ``benchmarks/``: tiny sizes, a well-formed report.

Not a benchmark: nothing here depends on speed. It proves that the one command runs every
section for our four savers beside ``InMemorySaver`` and the official PostgreSQL savers,
reads back what it wrote, reports medians and ratios, and leaves no database or key behind.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import run as bench  # noqa: E402
from benchmarks import workloads  # noqa: E402

pytestmark = pytest.mark.storage

OURS = {"ours PostgresSaver", "ours AsyncPostgresSaver", "ours RedisSaver", "ours AsyncRedisSaver"}
ASYNC = {"ours AsyncPostgresSaver", "ours AsyncRedisSaver", "official AsyncPostgresSaver"}
BASELINES = {"official PostgresSaver", "official AsyncPostgresSaver"}
RATIO_UNITS = {"bytes", "ms", "turns/s", "ops/s"}


def _by(rows: list[dict[str, Any]], saver: str) -> dict[str, dict[str, Any]]:
    return {row["metric"]: row for row in rows if row["saver"] == saver}


def test_smoke_run_reports_every_section(
    pg_url: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    md = tmp_path / "report.md"
    report = bench.main(
        ["--pg", pg_url, "--redis", redis_url, "--quick", "--rounds", "1",
         "--turns", "2,4", "--read-checkpoints", "12", "--read-reps", "3",
         "--threads", "3", "--turns-per-thread", "2", "--concurrency", "1,2",
         "--store-items", "30", "--store-reps", "3", "--unit-seconds", "120",
         "--json", str(out), "--markdown", str(md), "--label", "smoke"]
    )  # fmt: skip

    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["meta"]["label"] == "smoke"
    assert report["meta"]["text"].startswith("natural")
    assert report["meta"]["packages"]["langgraph-checkpoint-postgres"]
    sections = report["sections"]
    assert list(sections) == ["chat", "reads", "throughput", "stores"]

    for key in ("chat", "reads", "throughput"):
        section = sections[key]
        assert section["status"] == "ok"
        assert section["errors"] == [], section["errors"]
        rows = section["rows"]
        assert OURS | BASELINES | {"InMemorySaver"} <= {row["saver"] for row in rows}
        for row in rows:
            assert row["samples"] and all(math.isfinite(v) and v >= 0 for v in row["samples"])
            assert row["median"] is not None and math.isfinite(row["median"])
            if row["saver"] in BASELINES and row["unit"] in RATIO_UNITS:
                assert row["ratio"] == pytest.approx(1.0)
            if row["unit"] not in RATIO_UNITS:
                assert row["ratio"] is None

    chat = sections["chat"]["rows"]
    for saver in [*OURS, *BASELINES, "InMemorySaver"]:
        metrics = _by(chat, saver)
        assert metrics["footprint @T=2"]["median"] > 0
        assert metrics["footprint @T=4"]["median"] > 0
        assert {"growth exponent T=2..4", "turn p50, first 10% @T=4", "turn p50, last 10% @T=4",
                "turn p50 last/first @T=4"} <= set(metrics)  # fmt: skip
        assert metrics["footprint @T=4"]["ratio"] is not None

    reads = sections["reads"]["rows"]
    for saver in [*OURS, *BASELINES]:
        metrics = _by(reads, saver)
        assert metrics["checkpoints in the thread"]["median"] >= 12
        assert {"get_tuple latest", "list(limit=10)"} <= set(metrics)

    throughput = sections["throughput"]["rows"]
    at_two = {row["saver"] for row in throughput if row["metric"] == "turns/s @c=2"}
    assert at_two == ASYNC | {"InMemorySaver"}  # other sync savers run at concurrency 1 only
    for saver in [*OURS, *BASELINES]:
        assert _by(throughput, saver)["turns/s @c=1"]["median"] > 0
    memory = _by(throughput, "InMemorySaver")  # the ceiling runs on an event loop at c=2 ...
    assert memory["turns/s @c=1"]["baseline"] == "official PostgresSaver"
    assert memory["turns/s @c=2"]["baseline"] == "official AsyncPostgresSaver"  # ... as async
    assert any(n.startswith("ceiling turns/s @c=2: InMemorySaver") for n in
               sections["throughput"]["notes"])  # fmt: skip

    stores = sections["stores"]
    if stores["status"] == "skipped":
        assert stores["notes"] and "skipped" in stores["notes"][0]
    else:
        assert stores["errors"] == [], stores["errors"]
        savers = {row["saver"] for row in stores["rows"]}
        assert {"official PostgresStore", "InMemoryStore"} < savers

    printed = capsys.readouterr().out
    for heading in ("### Chat turns", "### Read paths", "### Throughput", "### Stores"):
        assert heading in printed
        assert heading in md.read_text()
    assert "| saver | metric | median | ratio vs official PG |" in printed
    assert "turns/s @c=2 of ceiling" in printed
    assert "- chat text: natural" in printed

    run_id = report["meta"]["run_id"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"lgmp_bench_%_{run_id}",)
        ).fetchall()
    assert left == []
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"lgmpb{run_id}*", count=1000)) == []
    finally:
        client.close()


@pytest.mark.parametrize("kind", workloads.TEXTS)
def test_chat_texts_are_deterministic_and_exact(kind: str) -> None:
    workloads.use_text(kind)
    try:
        texts = [workloads.sentence(f"user-{i}", 190, topic=i // 8) for i in range(1, 60)]
        assert all(len(t) == 190 and t.endswith(".") for t in texts)
        assert texts == [workloads.sentence(f"user-{i}", 190, topic=i // 8) for i in range(1, 60)]
        assert len(set(texts)) == len(texts)
        assert workloads.text_description().startswith(kind)
    finally:
        workloads.use_text("natural")


@pytest.mark.parametrize(
    "flag, url",
    [
        ("--pg", "postgresql://postgres@10.0.0.7:5432/test"),
        ("--redis", "redis://192.0.2.1:6379/0"),
        ("--redis-stack", "redis://example.com:6380"),
    ],
)
def test_refuses_non_loopback_servers(flag: str, url: str) -> None:
    with pytest.raises(SystemExit, match="loopback"):
        bench.main([flag, url, "--quick"])
