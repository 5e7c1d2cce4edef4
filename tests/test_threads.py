"""The thread index: kept by every saver in step with its checkpoints.

The central test runs random operation sequences (runs, interrupts, resumes, failures,
copies, prunes, deletes, deletes by run) through a real graph on every backend, sync and
async, and after each step compares what the index says with what ``list()`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from chat_support import State, chat_graph, run_config
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.threads import status_of
from langgraph_memory_plus.threads.core import graphemes, title_of


def _graph() -> StateGraph:
    """One node that answers in capitals, asks a human when told "ask", and fails when told
    "boom"."""
    return chat_graph(str.upper)


def _truth(saver: Any, thread_ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """What ``list()`` says: per existing thread, its latest root checkpoint's status."""
    out = {}
    for tid in thread_ids:
        tuples = list(saver.list({"configurable": {"thread_id": tid}}))
        if not tuples:
            continue
        root = [t for t in tuples if t.config["configurable"]["checkpoint_ns"] == ""]
        out[tid] = status_of(root[0].pending_writes or []) if root else ("idle", {})
    return out


def _check(saver: Any, thread_ids: list[str], users: dict[str, str]) -> None:
    truth = _truth(saver, thread_ids)
    found = {r["thread_id"]: r for r in saver.threads.search(ids=thread_ids, limit=1000)}
    assert set(found) == set(truth)
    assert saver.threads.count(ids=thread_ids) == len(truth)
    for tid, (status, interrupts) in truth.items():
        record = found[tid]
        assert (record["status"], record["interrupts"]) == (status, interrupts), tid
        assert saver.threads.get(tid) == record
        assert record["size"]["checkpoints"] >= 1
    for user in set(users.values()):
        mine = [r["thread_id"] for r in saver.threads.sessions(user, limit=1000)]
        expected = {t for t in truth if found[t]["metadata"].get("user_id") == user}
        assert set(mine) == expected
        assert saver.threads.count(metadata={"user_id": user}) == len(expected)
        stamps = [r["updated_at"] for r in saver.threads.sessions(user, limit=1000)]
        assert stamps == sorted(stamps, reverse=True)
    for status in ("idle", "interrupted", "error"):
        got = {r["thread_id"] for r in saver.threads.search(status=status, ids=thread_ids)}
        assert got == {t for t, (s, _) in truth.items() if s == status}


def _operations(seed: int) -> Iterator[tuple[str, int, int]]:
    rng = random.Random(seed)
    kinds = ["run"] * 6 + ["ask"] * 3 + ["boom"] * 2 + ["resume"] * 3
    kinds += ["copy", "prune", "prune_all", "delete", "delete_runs"]
    for _ in range(28):
        yield rng.choice(kinds), rng.randrange(5), rng.randrange(5)


def _run_sequence(saver: Any, seed: int) -> None:
    graph = _graph().compile(checkpointer=saver)
    thread_ids = [f"t{seed}-{i}" for i in range(5)]
    users = {t: f"u{seed}-{i % 2}" for i, t in enumerate(thread_ids)}
    run_ids: list[str] = []
    for step, (kind, a, b) in enumerate(_operations(seed)):
        tid = thread_ids[a]
        config = run_config(tid, users[tid])
        if kind in ("run", "ask", "boom"):
            text = {"run": "hello", "ask": "ask me", "boom": "boom now"}[kind]
            run_id = f"00000000-0000-4000-8000-{seed:04d}{step:08d}"
            run_ids.append(run_id)
            message = HumanMessage(content=f"{text} {step}", id=f"m{seed}-{step}")
            with contextlib.suppress(ValueError):  # "boom" fails the step, as planned
                graph.invoke({"messages": [message]}, {**config, "run_id": run_id})
        elif kind == "resume":
            if graph.get_state(config).interrupts:
                graph.invoke(Command(resume=f"yes {step}"), config)
        elif kind == "copy":
            saver.copy_thread(tid, thread_ids[b])
            users[thread_ids[b]] = users[tid]
        elif kind == "prune":
            saver.prune([tid])
        elif kind == "prune_all":
            saver.prune([tid], strategy="delete")
        elif kind == "delete":
            saver.delete_thread(tid)
        elif kind == "delete_runs" and run_ids:
            saver.delete_for_runs([run_ids[b % len(run_ids)]])
        _check(saver, thread_ids, users)


@pytest.mark.parametrize("seed", [1, 2])
def test_index_matches_list_after_random_operations(saver_factory: Any, seed: int) -> None:
    with saver_factory() as saver:
        _run_sequence(saver, seed)


def test_index_matches_list_with_retention(saver_factory: Any) -> None:
    with saver_factory(keep_last=2) as saver:
        _run_sequence(saver, 3)


async def test_async_index_matches_list(async_saver_factory: Any) -> None:
    """The async savers keep the same index; read it with the async methods."""
    async with async_saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        config = run_config("at-1", "au")
        await graph.ainvoke({"messages": [HumanMessage(content="ask now", id="a1")]}, config)
        [record] = await saver.threads.asearch(metadata={"user_id": "au"})
        state = await graph.aget_state(config)
        assert record["status"] == "interrupted"
        assert [i.id for i in record["interrupts"][next(iter(record["interrupts"]))]] == [
            i.id for i in state.interrupts
        ]
        await graph.ainvoke(Command(resume="yes"), config)
        assert (await saver.threads.aget("at-1"))["status"] == "idle"  # type: ignore[index]
        assert await saver.threads.acount(metadata={"user_id": "au"}) == 1
        assert [r["thread_id"] for r in await saver.threads.asessions("au")] == ["at-1"]
        await saver.adelete_thread("at-1")
        assert await saver.threads.aget("at-1") is None
        assert await saver.threads.acount(ids=["at-1"]) == 0


def test_record_fields(saver_factory: Any) -> None:
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        long = "Bonjour " + "e\u0301" * 60  # combining accents: never cut inside one
        graph.invoke({"messages": [HumanMessage(content=long, id="h1")]}, run_config("r1", "ru"))
        graph.invoke(
            {"messages": [HumanMessage(content="second", id="h2")]}, run_config("r1", "ru")
        )
        record = saver.threads.get("r1")
        assert record is not None
        assert record["title"] == title_of([HumanMessage(content=long)])
        assert record["title"] is not None and len(graphemes(record["title"])) == 50
        assert record["title"].endswith("e\u0301\u2026")
        assert record["metadata"]["user_id"] == "ru"
        assert record["size"]["checkpoints"] == len(list(saver.list(run_config("r1", "ru"))))
        assert record["size"]["bytes"] > 0
        assert record["created_at"] <= record["updated_at"]
        assert saver.threads.get("r1", user_id="ru") == record
        assert saver.threads.get("r1", user_id="someone-else") is None  # ownership
        assert saver.threads.get("nope") is None


def test_search_paging_sorting_and_filters(saver_factory: Any) -> None:
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        for i in range(7):
            config = {"configurable": {"thread_id": f"p{i}", "user_id": "pu", "team": i % 2}}
            graph.invoke({"messages": [HumanMessage(content=f"hi {i}", id=f"p{i}")]}, config)
        newest = [r["thread_id"] for r in saver.threads.sessions("pu", limit=100)]
        assert newest == [f"p{i}" for i in reversed(range(7))]
        assert [r["thread_id"] for r in saver.threads.sessions("pu", limit=3, offset=3)] == [
            "p3",
            "p2",
            "p1",
        ]
        oldest = saver.threads.search(metadata={"user_id": "pu"}, sort_order="asc", limit=2)
        assert [r["thread_id"] for r in oldest] == ["p0", "p1"]
        by_id = saver.threads.search(
            metadata={"user_id": "pu"}, sort_by="thread_id", sort_order="asc", limit=100
        )
        assert [r["thread_id"] for r in by_id] == sorted(newest)
        team = saver.threads.search(metadata={"team": 1}, limit=100)  # not an indexed key
        assert {r["thread_id"] for r in team} == {"p1", "p3", "p5"}
        assert saver.threads.count(metadata={"team": True, "user_id": "pu"}) == 0  # true != 1
        assert saver.threads.count(ids=["p1", "p2", "zz"]) == 2
        assert saver.threads.search(limit=0) == []


def test_bad_input_names_the_problem(saver_factory: Any) -> None:
    with saver_factory() as saver:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"status": "sleeping"}, "status"),
            ({"sort_by": "size"}, "sort_by"),
            ({"sort_order": "up"}, "sort_order"),
            ({"metadata": {"user_id": object()}}, "JSON"),
            ({"metadata": "user_id=1"}, "metadata"),
            ({"limit": -1}, "limit"),
            ({"offset": -5}, "offset"),
            ({"ids": "t1"}, "ids"),
        ]
        for kwargs, word in cases:
            with pytest.raises(InvalidConfigError, match=word):
                saver.threads.search(**kwargs)
        with (
            pytest.raises(InvalidConfigError, match="thread_index_keys"),
            saver_factory(thread_index_keys="user_id"),
        ):
            pass


def test_expired_threads_are_never_listed(saver_factory: Any) -> None:
    with saver_factory(ttl={"default_ttl": 0.02}) as saver:  # 1.2 s
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="e1")]}, run_config("e1", "eu"))
        assert saver.threads.count(metadata={"user_id": "eu"}) == 1
        time.sleep(1.5)
        assert saver.threads.get("e1") is None
        assert saver.threads.search(metadata={"user_id": "eu"}) == []
        assert saver.threads.count(ids=["e1"]) == 0
        saver.sweep_expired()
        graph.invoke({"messages": [HumanMessage(content="again", id="e2")]}, run_config("e1", "eu"))
        record = saver.threads.get("e1")
        assert record is not None and record["title"] == "again"
        assert record["size"]["checkpoints"] == len(list(saver.list(run_config("e1", "eu"))))


def test_two_savers_writing_one_thread_keep_one_record(saver_factory: Any) -> None:
    """Two processes (two savers, two connections) interleave writes on one thread."""
    with saver_factory() as one, saver_factory() as two:
        graphs = [_graph().compile(checkpointer=s) for s in (one, two)]
        config = run_config("shared", "su")
        for i in range(6):
            message = HumanMessage(content=("ask" if i == 5 else "hi") + f" {i}", id=f"s{i}")
            graphs[i % 2].invoke({"messages": [message]}, config)
        for saver in (one, two):
            record = saver.threads.get("shared")
            assert record is not None and record["status"] == "interrupted"
            assert record["size"]["checkpoints"] == len(list(saver.list(config)))
        assert one.threads.get("shared") == two.threads.get("shared")


def test_concurrent_async_writers(async_saver_factory: Any) -> None:
    async def main() -> None:
        async with async_saver_factory() as saver:
            graph = _graph().compile(checkpointer=saver)

            async def chat(i: int) -> None:
                for j in range(3):
                    message = HumanMessage(content=f"hi {j}", id=f"c{i}-{j}")
                    await graph.ainvoke({"messages": [message]}, run_config(f"c{i}", "cu"))

            await asyncio.gather(*(chat(i) for i in range(4)))
            assert await saver.threads.acount(metadata={"user_id": "cu"}) == 4
            for record in await saver.threads.asessions("cu"):
                stored = [c async for c in saver.alist(run_config(record["thread_id"], "cu"))]
                assert record["size"]["checkpoints"] == len(stored)

    asyncio.run(main())


def test_graphemes_keep_clusters_whole() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    flag = "\U0001f1eb\U0001f1f7"
    assert graphemes(f"a{family}b{flag}c\u0301") == ["a", family, "b", flag, "c\u0301"]
    title = title_of([HumanMessage(content=family * 60)])
    assert title is not None and graphemes(title)[:49] == [family] * 49
    assert title_of([AIMessage(content="x"), HumanMessage(content="  hi\n there ")]) == "hi there"
    assert title_of([{"type": "human", "content": [{"type": "text", "text": "list"}]}]) == "list"


@pytest.mark.parametrize(
    "text",
    ["x" * 49, "x" * 50, "x" * 51, "word " * 40, "a\r\nb " * 30, "e\u0301" * 50,
     "e\u0301" * 51, "\u738b\u82b3" * 30, "\U0001f1eb\U0001f1f7" * 51, "x" * 49 + "e\u0301\u0301"],
)  # fmt: skip
def test_title_walks_only_what_it_keeps(text: str) -> None:
    """The title takes the first graphemes only (and ASCII none): the same title as a cut
    of the whole text's graphemes, at, below and above the limit."""
    collapsed = " ".join(text.split())
    chars = graphemes(collapsed)
    expected = collapsed if len(chars) <= 50 else "".join(chars[:49]).rstrip() + "\u2026"
    assert title_of([HumanMessage(content=text)]) == expected
    assert graphemes(collapsed, 3) == chars[:3]


def _tool_graph() -> StateGraph:
    """A turn as an agent does it: a tool call, its result, the answer; plus injected and
    removed messages, none of which a transcript may show except what the user saw."""
    from langchain_core.messages import RemoveMessage, SystemMessage, ToolMessage

    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        n = str(last.id)
        out: list[Any] = [
            SystemMessage(content="profile: likes tea", id="lgmp-profile"),
            AIMessage(
                content="",
                id=f"call-{n}",
                tool_calls=[{"name": "lookup", "args": {}, "id": f"tc-{n}"}],
            ),
            ToolMessage(content="42", tool_call_id=f"tc-{n}", id=f"tool-{n}"),
            AIMessage(content=f"answer to {last.content}", id=f"ai-{n}"),
            SystemMessage(content="summary so far", id="lgmp-summary"),
        ]
        if str(last.content) == "forget":  # trimming: the first question leaves the state
            out.append(RemoveMessage(id="q0"))
        return {"messages": out}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder


def test_transcript_lines_keep_put_order_within_one_clock_tick(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of puts that fall in one tick of the clock keep the order of the puts (they
    were ordered by time, then message id: 'ai-q0' came before 'q0')."""
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
    from langgraph_memory_plus.threads import sqlite as index

    monkeypatch.setattr(index.time, "time", lambda: 1_700_000_000.0)
    with SqliteSaver.from_conn_string(tmp_path / "tick.db", transcripts=True) as saver:
        saver.setup()
        graph = _tool_graph().compile(checkpointer=saver)
        config = run_config("tick", "tu")
        for i in range(3):
            graph.invoke({"messages": [HumanMessage(content=f"q {i}", id=f"q{i}")]}, config)
        ids = [m["id"] for m in saver.threads.transcript("tick")]
    assert ids == ["q0", "ai-q0", "q1", "ai-q1", "q2", "ai-q2"]


def test_transcripts_keep_what_the_user_saw(saver_factory: Any) -> None:
    with saver_factory(transcripts=True) as saver:
        graph = _tool_graph().compile(checkpointer=saver)
        config = run_config("tx-1", "tu")
        for i, text in enumerate(["first question", "second", "forget"]):
            graph.invoke({"messages": [HumanMessage(content=text, id=f"q{i}")]}, config)
        expected = [
            ("q0", "human", "first question"),
            ("ai-q0", "ai", "answer to first question"),
            ("q1", "human", "second"),
            ("ai-q1", "ai", "answer to second"),
            ("q2", "human", "forget"),
            ("ai-q2", "ai", "answer to forget"),
        ]
        got = saver.threads.transcript("tx-1")
        assert [(m["id"], m["role"], m["content"]) for m in got] == expected
        assert "q0" not in {m.id for m in graph.get_state(config).values["messages"]}
        page = saver.threads.transcript("tx-1", limit=2, offset=2)
        assert [m["id"] for m in page] == ["q1", "ai-q1"]
        assert saver.threads.transcript("tx-1", user_id="tu") == got
        assert saver.threads.transcript("tx-1", user_id="intruder") == []  # ownership
        saver.prune(["tx-1"])
        saver.delete_thread("tx-1")
        assert saver.threads.get("tx-1") is None
        assert saver.threads.transcript("tx-1") == got  # outlives the checkpoints
    with saver_factory(transcripts=True) as other:  # a new process: nothing twice
        graph = _tool_graph().compile(checkpointer=other)
        graph.invoke({"messages": [HumanMessage(content="again", id="q3")]}, config)
        ids = [m["id"] for m in other.threads.transcript("tx-1")]
        assert ids == [m[0] for m in expected] + ["q3", "ai-q3"]


def test_transcripts_are_off_by_default_and_expire(saver_factory: Any) -> None:
    with saver_factory() as saver:
        graph = _tool_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="o1")]}, run_config("tx-off", "u"))
        assert saver.threads.transcript("tx-off") == []
    with saver_factory(transcripts=True, transcript_ttl=0.02) as saver:  # 1.2 s
        graph = _tool_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="x1")]}, run_config("tx-ttl", "u"))
        assert len(saver.threads.transcript("tx-ttl")) == 2
        time.sleep(1.5)
        assert saver.threads.transcript("tx-ttl") == []
        saver.sweep_expired()
    with (
        pytest.raises(InvalidConfigError, match="transcript_ttl"),
        saver_factory(transcripts=True, transcript_ttl=-1),
    ):
        pass


async def test_async_transcript(async_saver_factory: Any) -> None:
    async with async_saver_factory(transcripts=True) as saver:
        graph = _tool_graph().compile(checkpointer=saver)
        config = run_config("tx-async", "au")
        await graph.ainvoke({"messages": [HumanMessage(content="yo", id="y1")]}, config)
        lines = await saver.threads.atranscript("tx-async", user_id="au")
        assert [m["content"] for m in lines] == ["yo", "answer to yo"]


def test_from_url_turns_transcripts_on(tmp_path: Any) -> None:
    from langgraph_memory_plus import from_url

    url = f"sqlite:///{tmp_path / 'm.db'}?transcripts=true&thread_index_keys=user_id,team"
    with from_url(url) as memory:
        saver = memory.checkpointer
        assert saver.settings.transcripts and saver.settings.index_keys == ("user_id", "team")
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="f1")]}, run_config("fu", "u"))
        assert [m["content"] for m in saver.threads.transcript("fu")] == ["hi", "HI"]


@pytest.mark.parametrize("table", ["lgmp_thread_index", "lgmp_transcripts", "lgmp_checkpoints"])
def test_connection_killed_mid_write_leaves_index_checkpoint_and_transcript_consistent(
    pg_url: str, table: str
) -> None:
    """PostgreSQL: kill the backend while a turn's put waits on each table in turn."""
    import threading

    import psycopg

    from langgraph_memory_plus import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url, transcripts=True) as saver:
        saver.setup()
        graph = _graph().compile(checkpointer=saver)
        config = run_config(f"kill-{table}", "ku")
        graph.invoke({"messages": [HumanMessage(content="one", id=f"k1-{table}")]}, config)
        before = (saver.threads.get(f"kill-{table}"), saver.threads.transcript(f"kill-{table}"))
        checkpoints = len(list(saver.list(config)))
        errors: list[BaseException] = []

        def turn() -> None:
            message = HumanMessage(content="two", id=f"k2-{table}")
            try:
                graph.invoke({"messages": [message]}, config)
            except BaseException as exc:  # the killed connection's error
                errors.append(exc)

        with psycopg.connect(pg_url) as locker, psycopg.connect(pg_url, autocommit=True) as admin:
            locker.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
            worker = threading.Thread(target=turn)
            worker.start()
            victims: list[Any] = []
            for _ in range(200):  # bounded: 10 s
                victims = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s "
                    "AND datname = current_database()",
                    (locker.info.backend_pid,),
                ).fetchall()
                if victims:
                    break
                time.sleep(0.05)
            assert victims, f"the turn never waited on {table}"
            for (pid,) in victims:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            locker.rollback()
            worker.join(30)
        assert errors, "the killed write did not fail"
        after = (saver.threads.get(f"kill-{table}"), saver.threads.transcript(f"kill-{table}"))
        assert after == before
        assert len(list(saver.list(config))) == checkpoints
        # the next turn on the same pool succeeds, and all three agree again
        graph.invoke({"messages": [HumanMessage(content="three", id=f"k3-{table}")]}, config)
        record = saver.threads.get(f"kill-{table}")
        assert record is not None
        assert record["size"]["checkpoints"] == len(list(saver.list(config)))
        contents = [m["content"] for m in saver.threads.transcript(f"kill-{table}")]
        assert contents[:2] == ["one", "ONE"] and contents[-2:] == ["three", "THREE"]


def test_two_savers_writing_one_thread_at_once(saver_factory: Any) -> None:
    """Two processes (two savers, two connections) write one thread at the same time:
    the record agrees with what ``list()`` says once both are done."""
    import threading

    with saver_factory() as one, saver_factory() as two:
        config = run_config("race", "ru2")
        failures: list[BaseException] = []

        def run(saver: Any, name: str) -> None:
            graph = _graph().compile(checkpointer=saver)
            try:
                for i in range(6):
                    text = "ask" if (name, i) == ("b", 5) else "hi"
                    message = HumanMessage(content=f"{text} {name}{i}", id=f"r-{name}{i}")
                    graph.invoke({"messages": [message]}, config)
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=run, args=(s, n)) for s, n in ((one, "a"), (two, "b"))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert not failures
        for saver in (one, two):
            _check(saver, ["race"], {"race": "ru2"})
            record = saver.threads.get("race")
            assert record is not None
            assert record["size"]["checkpoints"] == len(list(saver.list(config)))
