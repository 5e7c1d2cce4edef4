"""Day two with the package: what a user meets once the quickstart ran.

- ``from_url`` takes ``listeners=``, and separate TTLs for threads and store items
  (``checkpoint_ttl``, ``store_ttl``; ``ttl`` still sets both), as keywords and in the URL.
- ``async with from_url("redis://...")`` raises no warning (redis-py's "synchronous Retry
  passed to an asyncio client").
- The LangGraph server entry points (``langgraph_memory_plus.server``) sweep expired
  threads and items while they run, and stop sweeping when they close.
- The context tools keep the first message (``keep_first``) and send the summary as a
  system message (``summary_role="system"``) as plain functions, as a graph hook and as
  agent middleware.
- ``ProfileInjector(language="zh", sources=[...])`` writes every heading in Chinese.
- Small things: "did you mean" for a misspelt ``from_url`` option, a PostgreSQL URL typo
  that lists our options (not libpq's 40), a Redis that wants a password and got none.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
import uuid
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import as_url
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from messages_support import AgentModel, SummaryModel, lookup
from test_first_steps import password_redis_port  # noqa: F401  (a fixture)
from test_messages_agents import SummaryAgentState, react_agent

from langgraph_memory_plus import InvalidConfigError, MemoryConnectionError, from_url
from langgraph_memory_plus.messages import SUMMARY_ID, Summarizer, Trimmer, provider_problems
from langgraph_memory_plus.messages.summarization import summarize
from langgraph_memory_plus.nodes import ProfileInjector, Source
from langgraph_memory_plus.observability import MemoryEvent
from langgraph_memory_plus.store.ttl import SWEEPER_NAME

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"configurable": {"thread_id": "t1"}}


def chat(memory: Any) -> Any:
    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=memory.checkpointer, store=memory.store)


def urls(tmp_path: Path, pg_url: str, redis_url: str, **query: str) -> dict[str, str]:
    """One URL per backend (a schema / key prefix of this test's own), with ``query``."""
    tag = uuid.uuid4().hex[:8]
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    return {
        "sqlite": f"sqlite:///{tmp_path / 'm.db'}" + (f"?{extra[1:]}" if extra else ""),
        "postgres": as_url(pg_url, schema=f"d2_{tag}", pool_max_size="4") + extra,
        "redis": f"{redis_url}?key_prefix=d2-{tag}{extra}",
    }


BACKENDS = ["sqlite", "postgres", "redis"]


# --------------------------------------------------------------------------------------------
# from_url: listeners, separate TTLs
# --------------------------------------------------------------------------------------------


@pytest.mark.storage
@pytest.mark.parametrize("backend", BACKENDS)
def test_from_url_gives_listeners_to_the_saver_and_the_store(
    backend: str, tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    seen: list[MemoryEvent] = []
    with from_url(urls(tmp_path, pg_url, redis_url)[backend], listeners=[seen.append]) as memory:
        chat(memory).invoke({"messages": [("user", "hi")]}, CONFIG)
        memory.store.put(("users", "u1"), "profile", {"name": "Ada"})
    names = {event.name for event in seen}
    assert {"checkpoint.saved", "checkpoint.loaded", "store.written"} <= names, names


async def test_from_url_listeners_async_and_not_on_memory(tmp_path: Path) -> None:
    seen: list[MemoryEvent] = []
    async with from_url(f"sqlite:///{tmp_path / 'a.db'}", listeners=[seen.append]) as memory:
        await memory.store.aput(("users", "u1"), "profile", {"name": "Ada"})
    assert [event.name for event in seen] == ["store.written"]
    with pytest.raises(InvalidConfigError, match="'listeners' does not apply"):
        from_url("memory://", listeners=[seen.append])


def _ttls(memory: Any) -> tuple[float | None, float | None]:
    saver_ttl = memory.checkpointer.settings.ttl_seconds
    store_ttl = (memory.store.ttl_config or {}).get("default_ttl")
    return saver_ttl, store_ttl


@pytest.mark.storage
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_and_store_ttls_apart(
    backend: str, tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A week for threads, forever for the user's items, by keyword and in the URL; ``ttl``
    still sets both, and the specific option wins over it."""
    week = 7 * 24 * 60
    given = urls(tmp_path, pg_url, redis_url)[backend]
    with from_url(given, checkpoint_ttl=week) as memory:
        assert _ttls(memory) == (week * 60.0, None)
    sep = "&" if "?" in given else "?"
    with from_url(f"{given}{sep}checkpoint_ttl={week}&store_ttl=60") as memory:
        assert _ttls(memory) == (week * 60.0, 60)
    with from_url(given, ttl=30) as memory:
        assert _ttls(memory) == (30 * 60.0, 30)
    with from_url(f"{given}{sep}ttl=30", store_ttl=90) as memory:
        assert _ttls(memory) == (30 * 60.0, 90)


def test_ttl_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="store_ttl must be a number greater than 0"):
        from_url(f"sqlite:///{tmp_path / 'x.db'}?store_ttl=-1")
    with pytest.raises(InvalidConfigError, match="'checkpoint_ttl' does not apply"):
        from_url("memory://", checkpoint_ttl=5)


@pytest.mark.storage
def test_an_expired_thread_goes_while_items_stay(tmp_path: Path) -> None:
    """What the options are for: the thread expires, the user's item does not."""
    with from_url(f"sqlite:///{tmp_path / 'e.db'}", checkpoint_ttl=0.01) as memory:
        chat(memory).invoke({"messages": [("user", "hi")]}, CONFIG)
        memory.store.put(("users", "u1"), "profile", {"name": "Ada"})
        time.sleep(0.8)
        assert memory.checkpointer.get_tuple(CONFIG) is None
        assert memory.checkpointer.sweep_expired() == 1
        item = memory.store.get(("users", "u1"), "profile")
        assert item is not None and item.value == {"name": "Ada"}


# --------------------------------------------------------------------------------------------
# Redis asyncio clients: no warning
# --------------------------------------------------------------------------------------------


@pytest.mark.storage
def test_async_from_url_on_redis_warns_nothing(redis_url: str) -> None:
    """In a fresh interpreter under ``-W error`` (a warning already shown in this process
    would not show again)."""
    code = f"""
import asyncio
from langgraph_memory_plus import from_url

async def main():
    async with from_url({redis_url!r}, key_prefix="d2-warn") as memory:
        await memory.checkpointer.aget_tuple({{"configurable": {{"thread_id": "t"}}}})

asyncio.run(main())
"""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""


# --------------------------------------------------------------------------------------------
# The LangGraph server's entry points sweep
# --------------------------------------------------------------------------------------------


def _rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def sweepers() -> int:
    """The sweeper tasks running on this loop."""
    return sum(task.get_name() == SWEEPER_NAME for task in asyncio.all_tasks())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_server_entry_points_sweep_and_stop(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Rows of expired threads and items go while the server runs (Redis expires its keys
    itself; its sweepers run too, with nothing to do)."""
    from langgraph_memory_plus import server

    if backend == "sqlite":
        path = tmp_path / "server.db"
        url = f"sqlite:///{path}?ttl=0.005"
        rows = partial(_rows, path)
    else:
        pg_url = request.getfixturevalue("pg_url")
        schema = f"d2_sweep_{uuid.uuid4().hex[:8]}"
        url = as_url(pg_url, schema=schema, ttl="0.005", pool_max_size="2")
        rows = partial(_pg_rows, pg_url, schema)
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", url)
    monkeypatch.setenv("LANGGRAPH_MEMORY_SWEEP", "0.005")  # every 0.3 s

    async def main() -> None:
        async with server.checkpointer() as saver, server.store() as store:
            graph = chat(type("M", (), {"checkpointer": saver, "store": store})())
            await graph.ainvoke({"messages": [("user", "hi")]}, CONFIG)
            await store.aput(("users", "u1"), "profile", {"name": "Ada"})
            assert rows("lgmp_threads") == 1 and rows("lgmp_store") == 1
            for _ in range(50):  # expired after 0.3 s, swept within 0.3 s more
                await asyncio.sleep(0.1)
                if rows("lgmp_threads") == 0 and rows("lgmp_store") == 0:
                    break
            assert rows("lgmp_threads") == 0, "the checkpointer's sweeper ran"
            assert rows("lgmp_store") == 0, "the store's sweeper ran"
            assert sweepers() == 2
        assert sweepers() == 0, "both sweepers stopped on close"

    asyncio.run(main())


def _pg_rows(pg_url: str, schema: str, table: str) -> int:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        found = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
    assert found is not None
    return int(found[0])


def test_the_server_sweeper_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_memory_plus import server

    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", f"sqlite:///{tmp_path / 'off.db'}?ttl=1")

    async def tasks_while_open() -> int:
        async with server.checkpointer(), server.store():
            return sweepers()

    assert asyncio.run(tasks_while_open()) == 2
    monkeypatch.setenv("LANGGRAPH_MEMORY_SWEEP", "off")
    assert asyncio.run(tasks_while_open()) == 0
    monkeypatch.setenv("LANGGRAPH_MEMORY_SWEEP", "soon")
    with pytest.raises(InvalidConfigError, match="LANGGRAPH_MEMORY_SWEEP must be"):
        asyncio.run(tasks_while_open())
    monkeypatch.setenv("LANGGRAPH_MEMORY_SWEEP", "")
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", f"sqlite:///{tmp_path / 'none.db'}")
    assert asyncio.run(tasks_while_open()) == 0, "no TTL, nothing to sweep"


# --------------------------------------------------------------------------------------------
# Context tools: keep the first message, the summary as a system message, in three places
# --------------------------------------------------------------------------------------------


def long_chat(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for k in range(turns):
        out.append(HumanMessage(f"q{k}: tell me about topic {k} " + "word " * 30, id=f"q{k}"))
        out.append(AIMessage(f"Answer to q{k}: " + "detail " * 30, id=f"a{k}"))
    return out


def test_trimmer_keep_first_as_a_function() -> None:
    messages = long_chat(10)
    kept = Trimmer(max_messages=3, keep_first=1)(messages)
    assert [m.id for m in kept] == ["sys", "q0", "a8", "q9", "a9"]
    assert provider_problems(kept) == []
    assert [m.id for m in Trimmer(max_messages=3)(messages)] == ["sys", "q9", "a9"]
    kept = Trimmer(max_tokens=200, keep_first=1)(messages)
    assert [m.id for m in kept[:2]] == ["sys", "q0"] and kept[-1].id == "a9"
    with pytest.raises(ValueError, match="keep_first"):
        Trimmer(max_messages=3, keep_first=-1)


def _first_question_always_seen(model: AgentModel) -> None:
    assert len(model.inputs) >= 12
    for n, model_input in enumerate(model.inputs):
        humans = [m.id for m in model_input if isinstance(m, HumanMessage)]
        assert humans[0] == "q0", f"call {n}: {humans}"
        assert provider_problems(model_input) == [], provider_problems(model_input)
    assert any(len(i) < 10 for i in model.inputs[8:]), "it did trim"


def ask(agent: Any, turns: int, thread: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    for k in range(turns):
        agent.invoke(
            {"messages": [HumanMessage(f"q{k}: tell me about topic {k}", id=f"q{k}")]}, config
        )


def test_trimmer_keep_first_as_a_hook() -> None:
    model = AgentModel()
    hook = Trimmer(max_messages=4, keep_first=1).hook("transient")
    ask(react_agent(model, hook, InMemorySaver()), 6, "hook")
    _first_question_always_seen(model)


def test_trimmer_keep_first_as_middleware() -> None:
    model = AgentModel()
    middleware = Trimmer(max_messages=4, keep_first=1).middleware("transient")
    agent = create_agent(
        model, [lookup], middleware=[middleware], checkpointer=InMemorySaver(), system_prompt="Hi"
    )
    ask(agent, 6, "mw")
    _first_question_always_seen(model)


def _summary_as_system(model_input: list[BaseMessage]) -> bool:
    """Whether ``model_input`` has the summary, as a system message right after the system
    prompt (system messages only at the head), followed by a human message."""
    summaries = [m for m in model_input if m.id == SUMMARY_ID]
    if not summaries:
        return False
    assert len(summaries) == 1 and isinstance(summaries[0], SystemMessage), summaries
    at = model_input.index(summaries[0])
    assert all(isinstance(m, SystemMessage) for m in model_input[:at]), "after the prompt"
    assert not any(isinstance(m, SystemMessage) for m in model_input[at + 1 :])
    assert isinstance(model_input[at + 1], HumanMessage), "the rest starts on a human message"
    return True


def test_summary_as_a_system_message_as_a_function() -> None:
    messages = long_chat(10)
    options: dict[str, Any] = {"max_tokens": 300, "keep_last": 2, "summary_role": "system"}
    result = summarize(messages, model=SummaryModel(), **options)
    assert _summary_as_system(result["messages"])
    assert result["messages"][0].id == "sys"
    again = summarize(
        [*messages, HumanMessage("more", id="q10")], result["running_summary"],
        model=SummaryModel(), **options,
    )  # fmt: skip
    assert _summary_as_system(again["messages"])
    default = summarize(messages, model=SummaryModel(), max_tokens=300, keep_last=2)
    assert any(isinstance(m, HumanMessage) and m.id == SUMMARY_ID for m in default["messages"])
    with pytest.raises(ValueError, match="summary_role"):
        Summarizer(SummaryModel(), max_tokens=10, summary_role="tool")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["transient", "persistent"])
def test_summary_as_a_system_message_as_a_hook(mode: Any) -> None:
    model = AgentModel()
    hook = Summarizer(
        SummaryModel(), max_tokens=400, keep_last=4, summary_role="system", keep_first=1
    ).hook(mode)
    agent = react_agent(model, hook, InMemorySaver(), state_schema=SummaryAgentState)
    ask(agent, 12, f"hook-{mode}")
    with_summary = [i for i in model.inputs if _summary_as_system(i)]
    assert len(with_summary) > 5
    assert all(next(m for m in i if isinstance(m, HumanMessage)).id == "q0" for i in model.inputs)


@pytest.mark.parametrize("mode", ["transient", "persistent"])
def test_summary_as_a_system_message_as_middleware(mode: Any) -> None:
    model = AgentModel()
    middleware = Summarizer(
        SummaryModel(), max_tokens=400, keep_last=4, summary_role="system"
    ).middleware(mode)
    agent = create_agent(
        model, [lookup], middleware=[middleware], checkpointer=InMemorySaver(), system_prompt="Hi"
    )
    ask(agent, 12, f"mw-{mode}")
    with_summary = [i for i in model.inputs if _summary_as_system(i)]
    assert len(with_summary) > 5
    assert all(i[0].content == "Hi" for i in model.inputs), "the agent's prompt stays first"


# --------------------------------------------------------------------------------------------
# Chinese profile headings
# --------------------------------------------------------------------------------------------


def test_chinese_profile_with_sources_has_no_english_heading() -> None:
    from langgraph_memory_plus.approvals.drafts import TaskDrafts
    from langgraph_memory_plus.nodes.drafts import drafts_source

    store = InMemoryStore()
    store.put(("users", "u1"), "profile", {"name": "王芳", "seat": "aisle"})
    schema = {
        "type": "object",
        "properties": {"flight": {"type": "string"}, "passport": {"type": "string"}},
        "required": ["flight", "passport"],
    }
    drafts = TaskDrafts(store, {"cancellation": schema})
    drafts.create("u1", "cancellation", {"flight": "LH123"})
    injector = ProfileInjector(
        language="zh", sources=[Source(("users", "{user_id}")), drafts_source(drafts)]
    )
    out = injector([HumanMessage("你好", id="h1")], store=store, context={"user_id": "u1"})
    text = str(out[0].content)
    # the <memory ...> tags around each source are markup, not headings
    headings = [line for line in text.splitlines() if not line.startswith(("- ", "<", "</"))]
    assert len(headings) == 3, text  # the header and one heading per source
    assert not any(c.isascii() and c.isalpha() for line in headings for c in line), headings
    assert "用户资料：" in headings and "- 座位偏好：过道" in text


# --------------------------------------------------------------------------------------------
# Rough edges
# --------------------------------------------------------------------------------------------


def test_a_misspelt_from_url_option_gets_a_did_you_mean() -> None:
    with pytest.raises(InvalidConfigError, match=r"did you mean 'keep_last'\?"):
        from_url("memory://", keeplast=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidConfigError, match=r"did you mean 'store_ttl'\?"):
        from_url("sqlite:///x.db?store_tll=3")


def test_a_postgres_url_typo_lists_our_options_not_libpqs() -> None:
    with pytest.raises(InvalidConfigError) as info:
        from_url("postgresql://app:pw@127.0.0.1:1/db?keep_lst=3")
    text = str(info.value)
    assert "did you mean 'keep_last'?" in text
    assert "libpq's connection parameters" in text
    assert "krbsrvname" not in text and "gssencmode" not in text, text
    with pytest.raises(InvalidConfigError, match=r"did you mean 'sslmode'\?"):
        from_url("postgresql://app:pw@127.0.0.1:1/db?sslmod=require")


@pytest.mark.storage
def test_a_redis_that_wants_a_password_says_so(request: pytest.FixtureRequest) -> None:
    """Not redis-py's text about the ``HELLO`` command it sent first."""
    url = f"redis://127.0.0.1:{request.getfixturevalue('password_redis_port')}/0"

    async def enter_async() -> None:
        async with from_url(url):
            pass

    def enter() -> None:
        with from_url(url):
            pass

    for attempt in (enter, lambda: asyncio.run(enter_async())):
        with pytest.raises(MemoryConnectionError) as info:
            attempt()
        text = str(info.value)
        assert text.startswith("cannot reach Redis at redis://127.0.0.1:"), text
        assert "password required" in text.lower() and "HELLO" not in text, text


def test_no_warning_from_the_blocking_redis_path_either(redis_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with from_url(redis_url, key_prefix="d2-sync") as memory:
            assert memory.checkpointer.get_tuple(CONFIG) is None


class Queue:
    """Anything with ``count()`` is what the pending-approvals gauge asks."""

    def __init__(self, n: int) -> None:
        self.n = n

    def count(self) -> int:
        return self.n


def test_watch_approvals_twice_on_one_registry() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from langgraph_memory_plus.observability.prometheus import PrometheusListener

    registry = CollectorRegistry()
    metrics = PrometheusListener(registry=registry)
    metrics.watch_approvals(Queue(3), max_age=0)
    metrics.watch_approvals(Queue(5), max_age=0)  # DuplicateTimeseries before
    text = generate_latest(registry).decode()
    assert "lgmp_pending_approvals 5.0" in text and text.count("# TYPE lgmp_pending_approvals") == 1


def test_otel_watch_approvals_twice_is_one_gauge() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    reader = InMemoryMetricReader()
    otel = OpenTelemetryListener(meter_provider=MeterProvider(metric_readers=[reader]))
    otel.watch_approvals(Queue(3), max_age=0)
    otel.watch_approvals(Queue(5), max_age=0)
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "lgmp.approvals.pending"
        for point in metric.data.data_points
    ]
    assert points == [5]


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [("prometheus", "prometheus_client", "prometheus"), ("otel", "opentelemetry", "otel")],
)
def test_a_missing_metrics_library_names_its_extra(module: str, blocked: str, extra: str) -> None:
    code = f"""
import sys
sys.modules[{blocked!r}] = None
try:
    import langgraph_memory_plus.observability.{module}
except ImportError as exc:
    print(exc)
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert f"pip install 'langgraph-memory-plus[{extra}]'" in result.stdout, result
