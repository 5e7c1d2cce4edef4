"""A smoke run of the benchmark harness in ``benchmarks/``: tiny sizes, a well-formed report.

Not a benchmark: nothing here depends on speed. It proves that the one command runs every
section for our four savers beside ``InMemorySaver`` and the official PostgreSQL savers,
reads back what it wrote, reports medians and ratios, and leaves no database, key or SQLite
file behind. The SQLite rows compare with ``langgraph-checkpoint-sqlite`` (a test dependency).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import floor, goals, workloads  # noqa: E402
from benchmarks import run as bench  # noqa: E402

pytestmark = pytest.mark.storage

OURS = {
    "ours PostgresSaver",
    "ours AsyncPostgresSaver",
    "ours RedisSaver",
    "ours AsyncRedisSaver",
    "ours SqliteSaver",
    "ours AsyncSqliteSaver",
}
ASYNC = {
    "ours AsyncPostgresSaver",
    "ours AsyncRedisSaver",
    "official AsyncPostgresSaver",
    "ours AsyncSqliteSaver",
    "official AsyncSqliteSaver",
}
BASELINES = {
    "official PostgresSaver",
    "official AsyncPostgresSaver",
    "official SqliteSaver",
    "official AsyncSqliteSaver",
}
REDIS = {"ours RedisSaver", "ours AsyncRedisSaver"}
RATIO_UNITS = {"bytes", "ms", "turns/s", "ops/s"}


def assert_nothing_left(pg_url: str, redis_url: str, run_id: str) -> None:
    """A benchmark run removed its databases, keys and SQLite files."""
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
    assert list(Path(tempfile.gettempdir()).glob(f"lgmpb{run_id}*")) == []  # SQLite files


def _by(rows: list[dict[str, Any]], saver: str) -> dict[str, dict[str, Any]]:
    return {row["metric"]: row for row in rows if row["saver"] == saver}


def _by_metric(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["metric"] == metric]


def test_smoke_run_reports_every_section(
    pg_url: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    md = tmp_path / "report.md"
    report = bench.main(
        ["--pg", pg_url, "--redis", redis_url, "--quick", "--rounds", "1",
         "--turns", "1,4", "--short-samples", "3", "--read-checkpoints", "12",
         "--read-reps", "3", "--threads", "3", "--turns-per-thread", "2",
         "--concurrency", "1,2", "--store-items", "30", "--store-reps", "3",
         "--setup-reps", "1", "--unit-seconds", "120",
         "--json", str(out), "--markdown", str(md), "--label", "smoke"]
    )  # fmt: skip

    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["meta"]["label"] == "smoke"
    assert report["meta"]["text"].startswith("natural")
    assert report["meta"]["messages"].startswith("realistic")
    assert report["meta"]["packages"]["langgraph-checkpoint-postgres"]
    sections = report["sections"]
    assert report["meta"]["packages"]["langgraph-checkpoint-sqlite"]
    assert list(sections) == ["chat", "reads", "throughput", "stores", "setup"]

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
            if "Sqlite" in row["saver"]:  # SQLite against the official SQLite saver
                flavour = "Async" if "Async" in row["saver"] else ""
                assert row["baseline"] == f"official {flavour}SqliteSaver"
            elif row["saver"] != "InMemorySaver":
                assert "Postgres" in row["baseline"]
            # Redis rows also against InMemorySaver (its goals are set in multiples of it)
            has_memory_ratio = row["saver"] in REDIS and row["unit"] in RATIO_UNITS
            assert (row["ratio_vs_memory"] is not None) == has_memory_ratio, row

    chat = sections["chat"]["rows"]
    for saver in [*OURS, *BASELINES, "InMemorySaver"]:
        metrics = _by(chat, saver)
        assert metrics["footprint @T=1"]["median"] > 0
        assert metrics["footprint @T=4"]["median"] > 0
        assert {"growth exponent T=1..4", "turn p50, first 10% @T=4", "turn p50, last 10% @T=4",
                "turn p50 last/first @T=4", "turn p50 @T=1", "turn p50 @T=4",
                "first turn p50, new thread"} <= set(metrics)  # fmt: skip
        assert metrics["footprint @T=4"]["ratio"] is not None
        # T=1 needs 3 one-turn threads (the long thread is one): 3 new threads in all
        assert metrics["new threads"]["samples"] == [3.0]

    reads = sections["reads"]["rows"]
    for saver in [*OURS, *BASELINES]:
        metrics = _by(reads, saver)
        assert metrics["checkpoints in the thread"]["median"] >= 12
        assert {"get_tuple latest", "get_tuple by id, middle", "get_tuple by id, 10th",
                "list(limit=10)"} <= set(metrics)  # fmt: skip

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
        assert {"official PostgresStore", "InMemoryStore", "official SqliteStore"} < savers
        for saver in savers:
            metrics = _by(stores["rows"], saver)
            assert {"put", "search(('users',), filter, limit=10)"} <= set(metrics)
            assert metrics["put"]["baseline"] == "official PostgresStore"

    setup = sections["setup"]
    assert setup["errors"] == [], setup["errors"]
    baselines = {row["saver"]: row["baseline"] for row in setup["rows"]}
    assert baselines == {
        "ours PostgresSaver": "official PostgresSaver",
        "official PostgresSaver": "official PostgresSaver",
        "ours SqliteSaver": "official SqliteSaver",
        "official SqliteSaver": "official SqliteSaver",
        "ours PostgresStore": "official PostgresStore",
        "official PostgresStore": "official PostgresStore",
        "ours SqliteStore": "official SqliteStore",
        "official SqliteStore": "official SqliteStore",
    }
    for row in setup["rows"]:
        assert row["metric"] in ("setup()", "from_conn_string + setup()")
        assert row["median"] > 0

    printed = capsys.readouterr().out
    for heading in ("### Chat turns", "### Read paths", "### Throughput", "### Stores",
                    "### setup() on fresh storage"):  # fmt: skip
        assert heading in printed
        assert heading in md.read_text()
    assert "| saver | metric | median | ratio vs official | vs InMemorySaver |" in printed
    assert "turns/s @c=2 of ceiling" in printed
    assert "- chat text: natural" in printed
    assert "- chat messages: realistic" in printed

    assert_nothing_left(pg_url, redis_url, report["meta"]["run_id"])

    # the issue-22 goal table reads the report: measured goals get a ratio, others say so
    table = goals.main([str(out)])
    chat_rows = {row["saver"]: row for row in _by_metric(chat, "turn p50 @T=1")}
    ratio = chat_rows["ours SqliteSaver"]["median"] / chat_rows["official SqliteSaver"]["median"]
    line = "| short threads | turn p50 @T=1 | ours SqliteSaver | official SqliteSaver | "
    assert f"{line}{goals.format_ratio(ratio)} | <= 0.7x |" in table
    assert (
        "| short threads | turn p50 @T=10 | ours RedisSaver | InMemorySaver | - | <= 1.5x | "
        "not measured |" in table
    )  # the smoke run has no T=10


def test_floor_counts_the_calls_and_bounds_from_its_parts(
    pg_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m benchmarks.floor`` at tiny sizes: LangGraph's calls per chat turn are
    what the chat graph makes (1 get_tuple, 4 puts, 3 put_writes), and each bound is
    ``1 / (runtime + calls x bare round trip)``, from numbers it measured."""
    out = floor.main(
        ["--pg", pg_url, "--redis", redis_url, "--threads", "2", "--rounds", "1",
         "--calls", "80"]
    )  # fmt: skip
    assert floor.calls_per_turn() == {"get_tuple": 1.0, "put": 4.0, "put_writes": 3.0}
    assert out["calls/turn"] == 8
    for backend in ("pg", "redis"):
        per_call_ms = out[f"bare {backend} us/call"] / 1000.0
        assert per_call_ms > 0
        bound = 1000.0 / (out["runtime cpu ms/turn"] + 8 * per_call_ms)
        assert math.isclose(out[f"bound {backend} turns/s"], bound)
        assert math.isclose(out[f"bound {backend} vs official"], bound / out["official turns/s"])
        assert math.isclose(out[f"bound {backend} of ceiling"], bound / out["ceiling turns/s"])
        ours = out[f"ours {backend} turns/s"]
        assert ours > 0 and math.isclose(
            out[f"ours {backend} of ceiling"], ours / out["ceiling turns/s"]
        )
        spent = out[f"ours {backend} cpu ms/turn"] - out["runtime cpu ms/turn"]
        assert math.isclose(out[f"ours {backend} storage cpu ms/turn"], spent)
    assert out["ceiling turns/s"] > 0 and out["official turns/s"] > 0
    assert "saver calls per turn" in capsys.readouterr().out


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


def _chat(turns: int) -> tuple[list[Any], bytes]:
    """A fresh chat thread through the harness's graph; its messages and their stored bytes."""
    graph = workloads.chat_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    for turn in range(1, turns + 1):
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    values = dict(graph.get_state(config).values)
    messages = workloads._check_conversation(values, turns, "test")
    return messages, JsonPlusSerializer().dumps_typed(messages)[1]


@pytest.mark.parametrize("kind", workloads.MESSAGES)
def test_chat_messages_are_deterministic(kind: str) -> None:
    workloads.use_messages(kind)
    try:
        messages, stored = _chat(6)
        again, stored_again = _chat(6)
        assert stored == stored_again  # every saver is handed the same bytes
        assert [m.id for m in messages] == [m.id for m in again]
        assert len({m.id for m in messages}) == len(messages)
        assert workloads.messages_description().startswith(kind)
        assert workloads.current_messages() == kind
    finally:
        workloads.use_messages("realistic")


def test_realistic_messages_look_like_langgraph_and_openai() -> None:
    workloads.use_messages("realistic")
    messages, _ = _chat(14)  # past 1,024 prompt tokens: the prompt cache shows up
    for position, message in enumerate(messages):
        if position % 2 == 0:  # as add_messages assigns an id: str(uuid.uuid4())
            assert isinstance(message, HumanMessage)
            assert str(uuid.UUID(message.id)) == message.id
            assert uuid.UUID(message.id).version == 4
            continue
        assert isinstance(message, AIMessage)
        match = re.fullmatch(r"lc_run--([0-9a-f-]{36})-0", message.id or "")
        assert match and uuid.UUID(match[1]).version == 7
        meta = message.response_metadata
        assert list(meta) == ["token_usage", "model_provider", "model_name", "system_fingerprint",
                              "id", "service_tier", "finish_reason", "logprobs"]  # fmt: skip
        assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", meta["id"])
        assert re.fullmatch(r"fp_[0-9a-f]{10}", meta["system_fingerprint"])
        assert meta["model_provider"] == "openai" and meta["finish_reason"] == "stop"
        assert message.additional_kwargs == {"refusal": None}
        usage, tokens = message.usage_metadata, meta["token_usage"]
        assert usage is not None
        assert usage["input_tokens"] == tokens["prompt_tokens"]
        assert usage["output_tokens"] == tokens["completion_tokens"]
        assert usage["total_tokens"] == tokens["total_tokens"]
        cached = tokens["prompt_tokens_details"]["cached_tokens"]
        assert usage.get("input_token_details") == {"audio": 0, "cache_read": cached}
        assert cached == 0 or (cached >= 1024 and cached % 128 == 0)
    prompts = [m.usage_metadata["input_tokens"] for m in messages[1::2]]
    assert prompts == sorted(prompts)  # the prompt is the whole conversation so far
    assert messages[-1].response_metadata["token_usage"]["prompt_tokens_details"]["cached_tokens"]
    ids = [m.id for m in messages[1::2]]
    assert ids == sorted(ids)  # uuid7: time-ordered


def test_bare_messages_are_the_earlier_ones() -> None:
    workloads.use_messages("bare")
    try:
        messages, _ = _chat(2)
    finally:
        workloads.use_messages("realistic")
    text = workloads.sentence("user-2", workloads.USER_CHARS, topic=0)
    assert messages[2] == HumanMessage(content=text, id="user-2")
    assert messages[3] == AIMessage(
        content=workloads.sentence("model-3", workloads.MODEL_CHARS, topic=0),
        id="model-3",
        response_metadata={"model_name": "fake-chat-model", "finish_reason": "stop"},
        usage_metadata={"input_tokens": 144, "output_tokens": 48, "total_tokens": 192},
    )


def test_conversation_check_reads_the_ids() -> None:
    messages, _ = _chat(2)
    messages[1] = messages[1].model_copy(update={"id": "model-1"})
    with pytest.raises(AssertionError, match="message 1"):
        workloads._check_conversation({"messages": messages, "turns": 2}, 2, "test")


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


def test_encryption_and_rekey_benchmarks_run_tiny(tmp_path: Path) -> None:
    """``benchmarks.encryption`` and ``benchmarks.rekey`` at a tiny size, SQLite only."""
    import argparse

    from benchmarks import encryption, rekey

    args = argparse.Namespace(threads=1, turns=2, items=3, rounds=1)
    results = {"SQLite": encryption.measure("SQLite", "", args)}
    assert set(results["SQLite"]) == {"plain", "encrypted"}
    assert "| SQLite |" in encryption.table(results)
    small = argparse.Namespace(threads=4, turns=1, batch_size=5, kill_at=0.5)
    row = rekey.measure("SQLite", f"sqlite:///{tmp_path}/r.db", small)
    assert row.startswith("| SQLite | 4 x 1 |") and row.endswith("| yes |")
