"""Attacks on the Redis thread index's two-step writes and its in-flight rule (1561b7b).

Each test names the promise it checks; the interleavings are made deterministic by
running another client's call between two commands of a write (as the last tests of
``test_threads_promises.py`` do), or by a raw ``ZADD`` standing for a writer that
crashed between its two steps.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from chat_support import chat_graph, run_config
from langchain_core.messages import HumanMessage
from langgraph.types import Interrupt
from test_threads_promises import _between_steps

from langgraph_memory_plus.privacy.erasure import erase_user
from langgraph_memory_plus.threads.redis import REUSE_MS

REDIS = pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)


def _sorted_sets(keys: list[bytes]) -> list[bytes]:
    """The index's sorted sets among ``keys``: the sets of threads of pending writes only
    (``...:pending:<user digest>``, plain sets) live in the index's slot too."""
    return [k for k in keys if b":pending:" not in k]


def _graph() -> Any:
    return chat_graph(str.upper)


def _say(graph: Any, thread_id: str, user: str, text: str = "hi", n: int = 1) -> None:
    graph.invoke(
        {"messages": [HumanMessage(f"{text} {n}", id=f"{user}-{n}")]}, run_config(thread_id, user)
    )


def _entries(saver: Any, thread_id: str) -> list[bytes]:
    """The index's sets that hold ``thread_id`` (all of the saver's prefix)."""
    from langgraph_memory_plus.drivers.redis import Batch, Scan

    def plan() -> Any:
        prefix = saver._plans.threads.prefix
        keys = _sorted_sets((yield Scan(f"{prefix}:{{{prefix}:tix}}:*".encode())))
        if not keys:
            return []
        member = thread_id.encode("utf-8", "surrogatepass")
        scores = yield Batch([("ZSCORE", key, member) for key in keys])
        return sorted(k for k, s in zip(keys, scores, strict=True) if s is not None)

    return list(saver._run(plan()))


def _user_sets(saver: Any, user: Any, status: str = "idle") -> list[bytes]:
    """The sets a thread of ``user`` in ``status`` is in."""
    from langgraph_memory_plus.threads.core import index_value

    tix = saver._plans.threads
    form = index_value(user)
    return [
        tix.all_key,
        tix.set_key("user_id", form),
        tix.status_key(status),
        tix.status_key(status, ("user_id", form)),
    ]


def _ghost(saver: Any, thread_id: str, keys: list[bytes], score: int) -> None:
    """A writer that crashed between its two steps: entries, no record."""
    from langgraph_memory_plus.drivers.redis import Batch

    def plan() -> Iterator[Any]:
        yield Batch([("ZADD", key, score, thread_id.encode()) for key in keys])

    saver._run(plan())


def _now_ms() -> int:
    from langgraph_memory_plus.threads.redis import now_ms

    return now_ms()


def _u_ms(saver: Any, thread_id: str) -> int:
    """The thread's record's time (now, before it has one)."""
    record = saver._run(saver._plans.threads.get(thread_id))
    return _now_ms() if record is None else int(record.updated_at * 1000)


# -- 3: a page is exact --------------------------------------------------------------------


@REDIS
@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("status", [None, "idle"])
def test_pages_around_a_write_in_flight_are_full_and_skip_nothing(
    saver_factory: Any, status: str | None, order: str
) -> None:
    """Five threads of a user and one entry of a write in flight (newest: at the top of
    a newest-first page). Pages of two must list the five once each, in full pages."""
    user = f"pia-{uuid.uuid4().hex[:6]}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        for i in range(5):
            _say(graph, f"{user}-t{i}", user)
        _ghost(saver, f"{user}-ghost", _user_sets(saver, user), _now_ms() + 1000)
        _ghost(saver, f"{user}-older", _user_sets(saver, user), _now_ms() - 20_000)
        query: dict[str, Any] = {
            "metadata": {"user_id": user},
            "status": status,
            "sort_order": order,
        }
        full = [t["thread_id"] for t in saver.threads.search(**query, limit=10)]
        assert len(full) == 5
        pages = [
            [t["thread_id"] for t in saver.threads.search(**query, limit=2, offset=offset)]
            for offset in (0, 2, 4)
        ]
        assert [len(p) for p in pages] == [2, 2, 1]
        assert [t for p in pages for t in p] == full


# -- 5: what depends on a hidden entry being removed ----------------------------------------


@REDIS
def test_erasure_does_not_stop_at_a_hidden_entry(saver_factory: Any) -> None:
    """Erasure reads the user's oldest page until it is empty. An entry of a writer that
    crashed ten seconds ago (older than the user's thread, under ``IN_FLIGHT_MS``) is
    hidden and stays: the page it fills is empty, and erasure stops before the thread."""
    user = f"eve-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        _ghost(saver, f"{user}-ghost", _user_sets(saver, user), _now_ms() - 10_000)
        _say(graph, thread, user)
        report = erase_user(user, checkpointer=saver, batch_size=1, tombstone_hours=None)
        assert report.counts["threads"] == 1
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
        assert saver.threads.sessions(user) == []


@REDIS
def test_a_crashed_writers_entry_is_hidden_then_removed(saver_factory: Any) -> None:
    """The 30 s rule itself: fresh, hidden and kept; older, removed by a read."""
    user = f"cro-{uuid.uuid4().hex[:6]}"
    with saver_factory() as saver:
        sets = _user_sets(saver, user)
        _ghost(saver, f"{user}-fresh", sets, _now_ms())
        _ghost(saver, f"{user}-old", sets, _now_ms() - 31_000)
        assert saver.threads.sessions(user) == []
        assert saver.threads.count() >= 0  # the set of all threads
        assert saver.threads.count(status="idle") >= 0
        assert saver.threads.count(metadata={"user_id": user}) == 0
        assert saver.threads.count(metadata={"user_id": user}, status="idle") == 0
        assert saver.threads.search(status="idle", metadata={"user_id": user}) == []
        assert len(_entries(saver, f"{user}-fresh")) == 4
        assert _entries(saver, f"{user}-old") == []


# -- 2: after a deletion, no set holds the thread ---------------------------------------------


@REDIS
def test_an_interrupt_written_to_a_deleted_thread_leaves_no_entry(saver_factory: Any) -> None:
    """A run still going after its thread was deleted stores an interrupt for the
    deleted checkpoint: the script refuses it, and the entries its step 1 added must go
    (the refusal removed only the set of all threads, not the status's sets)."""
    user = f"del-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user)
        latest = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert latest is not None
        saver.delete_thread(thread)
        assert _entries(saver, thread) == []
        saver.put_writes(latest.config, [("__interrupt__", [Interrupt(value="q")])], "task-1")
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
        assert _entries(saver, thread) == []


@REDIS
def test_two_deletions_of_one_thread_racing_leave_no_entry(saver_factory: Any) -> None:
    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.drivers.redis import Eval

    user = f"two-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver, saver_factory() as other:
        _say(_graph().compile(checkpointer=saver), thread, user)
        run = driver.RedisRunner._execute
        raced: list[bool] = []

        def execute(self: Any, command: Any) -> Any:
            if isinstance(command, Eval) and command.script == "delete" and not raced:
                raced.append(True)
                worker = threading.Thread(target=other.delete_thread, args=(thread,))
                worker.start()
                worker.join()
            return run(self, command)

        driver.RedisRunner._execute = execute  # type: ignore[method-assign]
        try:
            saver.delete_thread(thread)
        finally:
            driver.RedisRunner._execute = run  # type: ignore[method-assign]
        assert raced
        assert _entries(saver, thread) == []


@REDIS
@pytest.mark.xfail(
    strict=True,
    reason="the delete returns only the record's present metadata: the former user's "
    "sets keep the id (hidden, no record; removed by a read once older than "
    "IN_FLIGHT_MS, where before 1561b7b the next read removed it)",
)
def test_a_thread_moved_to_another_user_then_deleted_leaves_no_entry(
    saver_factory: Any,
) -> None:
    """A thread written by gus, then by bea (it moves to her), then deleted: gus's sets
    kept the id (a stale entry that reads used to remove at once, now hidden for 30 s as
    an entry without a record)."""
    tag = uuid.uuid4().hex[:6]
    gus, bea, thread = f"gus-{tag}", f"bea-{tag}", f"mv-{tag}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, gus)
        _say(graph, thread, bea, n=2)
        assert [t["thread_id"] for t in saver.threads.sessions(bea)] == [thread]
        saver.delete_thread(thread)
        assert _entries(saver, thread) == []


@REDIS
def test_erasure_leaves_none_of_the_users_sets_holding_a_thread_id(saver_factory: Any) -> None:
    """What the erased user's own sets hold after their threads are deleted: the entry of
    a thread that moved to another user and was deleted (its deletion cleaned only its
    last user's sets), and one a writer that crashed between its two steps left (hidden
    for ``IN_FLIGHT_MS``, so no read removes it). Erasure drops the user's sets whole."""
    tag = uuid.uuid4().hex[:6]
    gus, bea, moved, crashed = f"gus-{tag}", f"bea-{tag}", f"mv-{tag}", f"gus-crash-{tag}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, moved, gus)
        _say(graph, moved, bea, n=2)
        saver.delete_thread(moved)
        _ghost(saver, crashed, _user_sets(saver, gus)[1:2], _now_ms())
        kept = f"gus-kept-{tag}"
        _say(graph, kept, gus)
        sets = _user_sets(saver, gus)
        mine = [sets[1], sets[3]]  # the user's own: by user, by user and status
        assert sets[1] in _entries(saver, moved) and sets[1] in _entries(saver, crashed)
        report = erase_user(gus, checkpointer=saver)  # with its hold (see erasure)
        assert report.thread_ids == [kept]
        for tid in (moved, crashed, kept):
            held = [k for k in _entries(saver, tid) if k in mine]
            assert held == [], (tid, held)


# -- 1: a thread stays in its sets ---------------------------------------------------------


@REDIS
@pytest.mark.parametrize("read", ["count", "search"])
def test_an_interrupt_in_the_same_millisecond_as_the_last_write_stays_in_its_sets(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """An interrupt's write whose step 1 has its record's ``u`` as time (a write in the
    same millisecond as the thread's last one): its entry in the interrupted sets is no
    newer than the record, so a read between its two steps takes it for stale and
    removes it; the thread is then interrupted and missing from its status's sets."""
    from langgraph_memory_plus.checkpoint.redis import plans
    from langgraph_memory_plus.drivers import redis as driver

    user = f"ms-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    reads = {
        "count": lambda s: s.threads.count(status="interrupted", metadata={"user_id": user}),
        "search": lambda s: len(s.threads.search(status="interrupted", metadata={"user_id": user})),
    }
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user)
        # the write's time is its record's: the same millisecond as the run's last write
        monkeypatch.setattr(plans, "now_ms", lambda: _u_ms(other, thread))
        run = driver.RedisRunner._execute
        execute, seen = _between_steps("put_writes", lambda: reads[read](other))

        driver.RedisRunner._execute = execute  # type: ignore[method-assign]
        try:
            _say(graph, thread, user, text="ask", n=2)
        finally:
            driver.RedisRunner._execute = run  # type: ignore[method-assign]
        assert seen == [0]
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "interrupted"
        assert saver.threads.count(status="interrupted", metadata={"user_id": user}) == 1
        assert saver.threads.count(status="interrupted") >= 1
        assert set(_user_sets(saver, user, "interrupted")) <= set(_entries(saver, thread))


# -- ids -----------------------------------------------------------------------------------


@REDIS
@pytest.mark.parametrize(
    ("thread", "user"),
    [("a.b/c", "u.1/x"), ("会话/一.二", "用户/甲.乙"), ("*?[x]{y}", "{u}*")],
)
def test_unusual_ids_index_and_leave_cleanly(saver_factory: Any, thread: str, user: str) -> None:
    tag = uuid.uuid4().hex[:6]
    thread, user = f"{thread}-{tag}", f"{user}-{tag}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user)
        _say(graph, thread, user, text="ask", n=2)
        assert [t["thread_id"] for t in saver.threads.sessions(user)] == [thread]
        assert saver.threads.count(metadata={"user_id": user}, status="interrupted") == 1
        assert saver.threads.count(metadata={"user_id": user}, status="idle") == 0
        report = erase_user(user, checkpointer=saver, tombstone_hours=None)
        assert report.counts["threads"] == 1
        assert _entries(saver, thread) == []
        assert saver.threads.sessions(user) == []


@REDIS
def test_a_nul_in_a_thread_id_is_refused_or_kept_whole(saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    thread, user = f"a\x00b-{tag}", f"nul-{tag}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        try:
            _say(graph, thread, user)
        except Exception as error:  # refused: nothing may be left
            assert "thread_id" in str(error) or "NUL" in str(error) or "\\x00" in str(error)
            assert _entries(saver, thread) == []
            return
        assert [t["thread_id"] for t in saver.threads.sessions(user)] == [thread]
        saver.delete_thread(thread)
        assert _entries(saver, thread) == []


@REDIS
def test_an_interrupt_from_a_clock_behind_stays_in_its_sets(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes, the interrupt's writer's clock 5 ms behind the last writer's: its
    step 1 entry is older than the record, a read in between removed it as stale."""
    from langgraph_memory_plus.checkpoint.redis import plans
    from langgraph_memory_plus.drivers import redis as driver

    user = f"sk-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user)
        monkeypatch.setattr(plans, "now_ms", lambda: _u_ms(other, thread) - 5)
        execute, seen = _between_steps(
            "put_writes",
            lambda: other.threads.count(status="interrupted", metadata={"user_id": user}),
        )
        monkeypatch.setattr(driver.RedisRunner, "_execute", execute)
        _say(graph, thread, user, text="ask", n=2)
        monkeypatch.undo()
        assert seen == [0]
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "interrupted"
        assert saver.threads.count(status="interrupted", metadata={"user_id": user}) == 1
        assert set(_user_sets(saver, user, "interrupted")) <= set(_entries(saver, thread))


BEHIND = pytest.mark.xfail(
    strict=True,
    reason="a put does not read its record before step 1: a resume from a clock behind "
    "the interrupt's writer adds idle entries older than the record, which a read in "
    "between removes as left behind",
)


@REDIS
@pytest.mark.parametrize("behind", [0, pytest.param(5, marks=BEHIND)])
def test_a_resume_from_a_clock_behind_stays_in_its_sets(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch, behind: int
) -> None:
    """A resume whose step 1 has the interrupt's time (0: the same millisecond) or an
    older one (a clock behind), with a read between its two steps."""
    from langgraph.types import Command

    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.threads import redis as tix

    user = f"rs-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user, text="ask")
        u = _u_ms(saver, thread)
        time.sleep(REUSE_MS / 1000)  # the resume's put makes a step 1 of its own
        # interrupted long since: reads removed its idle entries (a put's step 1 that
        # met writes stored before its checkpoint may have left some)
        from langgraph_memory_plus.drivers.redis import Batch

        def forgotten() -> Iterator[Any]:
            yield Batch([("ZREM", k, thread.encode()) for k in _user_sets(saver, user)[2:]])

        saver._run(forgotten())
        monkeypatch.setattr(tix, "now_ms", lambda: u - behind)
        execute, seen = _between_steps(
            "put", lambda: other.threads.count(status="idle", metadata={"user_id": user})
        )
        monkeypatch.setattr(driver.RedisRunner, "_execute", execute)
        graph.invoke(Command(resume="yes"), run_config(thread, user))
        monkeypatch.undo()
        assert seen == [0]
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "idle"
        assert saver.threads.count(status="idle", metadata={"user_id": user}) == 1


@REDIS
def test_a_resume_after_an_interrupt_in_the_runs_millisecond_stays_in_its_sets(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt's write in the millisecond of the run's step 1 left the record's time
    as it was: a read then removed the thread's idle entries (no newer than the record,
    not idle), and the resume's put, under a second later, took the run's step 1 as still
    holding them (the record's time unchanged): idle, in none of its idle sets."""
    from langgraph.types import Command

    from langgraph_memory_plus.checkpoint.redis import plans

    user = f"re-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        monkeypatch.setattr(plans, "now_ms", lambda: _u_ms(other, thread))
        _say(graph, thread, user, text="ask")
        monkeypatch.undo()
        assert saver.threads.count(status="idle", metadata={"user_id": user}) == 0
        graph.invoke(Command(resume="yes"), run_config(thread, user))
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "idle"
        assert saver.threads.count(status="idle", metadata={"user_id": user}) == 1
        assert [
            t["thread_id"] for t in saver.threads.search(status="idle", metadata={"user_id": user})
        ] == [thread]


# -- the same on the async savers ------------------------------------------------------------


async def _aghost(saver: Any, thread_id: str, keys: list[bytes], score: int) -> None:
    from langgraph_memory_plus.drivers.redis import Batch

    def plan() -> Iterator[Any]:
        yield Batch([("ZADD", key, score, thread_id.encode()) for key in keys])

    await saver._arun(plan())


@REDIS
async def test_async_erasure_and_pages_pass_a_hidden_entry(async_saver_factory: Any) -> None:
    from langgraph_memory_plus.privacy.erasure import aerase_user

    user = f"ae-{uuid.uuid4().hex[:6]}"
    async with async_saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        await _aghost(saver, f"{user}-old", _user_sets(saver, user), _now_ms() - 10_000)
        for i in range(3):
            await graph.ainvoke(
                {"messages": [HumanMessage("hi", id=f"{user}-{i}")]},
                run_config(f"{user}-{i}", user),
            )
        await _aghost(saver, f"{user}-new", _user_sets(saver, user), _now_ms() + 1000)
        full = [t["thread_id"] for t in await saver.threads.asessions(user, limit=10)]
        pages = [
            [t["thread_id"] for t in await saver.threads.asessions(user, limit=1, offset=o)]
            for o in range(3)
        ]
        assert [t for p in pages for t in p] == full and len(full) == 3
        assert await saver.threads.acount(metadata={"user_id": user}) == 3
        report = await aerase_user(user, checkpointer=saver, batch_size=1, tombstone_hours=None)
        assert report.counts["threads"] == 3
        assert await saver.threads.asessions(user) == []


@REDIS
async def test_async_interrupt_in_the_runs_millisecond_with_a_read_between(
    async_saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_memory_plus.checkpoint.redis import plans
    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.drivers.redis import Batch

    user = f"am-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    async with async_saver_factory() as saver, async_saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        await graph.ainvoke(
            {"messages": [HumanMessage("hi", id=f"{user}-1")]}, run_config(thread, user)
        )
        # the interrupt's write in the millisecond of the run's last step 1
        from langgraph_memory_plus.threads import redis as tix

        clock = tix.now_ms
        last: list[int] = []

        def step_1_time() -> int:
            last.append(clock())
            return last[-1]

        monkeypatch.setattr(tix, "now_ms", step_1_time)
        monkeypatch.setattr(plans, "now_ms", lambda: last[-1] if last else clock())
        run = driver.AsyncRedisRunner._run_one
        seen: list[int] = []

        async def run_one(self: Any, command: Any) -> Any:
            then = command.then if isinstance(command, Batch) else None
            if then is not None and then.script == "put_writes" and not seen:
                await run(self, Batch(command.commands))
                seen.append(
                    await other.threads.acount(status="interrupted", metadata={"user_id": user})
                )
                return await run(self, then)
            return await run(self, command)

        monkeypatch.setattr(driver.AsyncRedisRunner, "_run_one", run_one)
        await graph.ainvoke(
            {"messages": [HumanMessage("ask", id=f"{user}-2")]}, run_config(thread, user)
        )
        monkeypatch.undo()
        assert seen == [0]
        assert await saver.threads.acount(status="interrupted", metadata={"user_id": user}) == 1


@REDIS
def test_an_interrupt_overtaken_by_a_put_of_its_run_stays_in_its_sets(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async LangGraph stores a step's writes beside its checkpoint: a put of the run,
    with a later time, lands between the interrupt's write taking its time and its step
    1 (a raw ``HSET`` of the record's ``u`` stands for it); a read between the write's
    two steps then meets an entry older than the record and removes it."""
    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.drivers.redis import Batch

    user = f"ov-{uuid.uuid4().hex[:6]}"
    thread = f"{user}-t"
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, thread, user)
        record_key = saver._plans.threads._record_key(thread)
        execute, seen = _between_steps(
            "put_writes",
            lambda: other.threads.count(status="interrupted", metadata={"user_id": user}),
            before=lambda: Batch([("HSET", record_key, "u", _now_ms() + 50)]),  # the put
        )

        monkeypatch.setattr(driver.RedisRunner, "_execute", execute)
        _say(graph, thread, user, text="ask", n=2)
        monkeypatch.undo()
        assert seen == [0]
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "interrupted"
        assert saver.threads.count(status="interrupted", metadata={"user_id": user}) == 1
