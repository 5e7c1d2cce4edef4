"""A read that loses the race with ``delete_thread`` returns the old state or nothing.

A checkpoint is read first, the items of its list channels (``messages``) after it: on
Redis in a second script, on PostgreSQL in a second statement (SQLite reads both in one
transaction, so it sees the old state whole). A deletion that lands in between leaves the
read with a checkpoint whose spine and pages are gone. These tests put the
deletion exactly there (the plan is driven by hand, no timing) and check that the read
returns the whole old list or nothing, never a shorter one. The deletion is made by a
second saver, as another process would: the reader's list memory is not told.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6

from langgraph_memory_plus.checkpoint.config import ListQuery
from langgraph_memory_plus.checkpoint.lists import PAGE_SIZE
from langgraph_memory_plus.drivers.plan import Plan

pytestmark = pytest.mark.storage


def small(storage: Any) -> dict[str, Any]:
    """Options of a saver that takes few of the shared PostgreSQL server's connections."""
    return {"pool_max_size": 2} if storage.kind == "postgres" else {}


def cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def messages(prefix: str, n: int) -> list[HumanMessage]:
    return [HumanMessage(f"{prefix}-{i}", id=f"{prefix}-{i}") for i in range(n)]


def checkpoint_of(values: list[Any], version: str) -> Checkpoint:
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values={"messages": values},
        channel_versions={"messages": version},
        versions_seen={},
        updated_channels=None,
    )


META: dict[str, Any] = {"source": "loop", "step": 0, "parents": {}}


class Race:
    """Runs ``delete()`` once, just before a read sends its first list-items fetch.

    The backend's fetch builder (Redis ``_resolve``, SQL ``_fetch_list``) is wrapped to
    mark the commands it makes; the read's plan is relayed command by command, and the
    deletion runs when a marked one comes up."""

    def __init__(self, saver: Any, storage: Any, monkeypatch: Any) -> None:
        self.marked: list[Any] = []
        self.delete: Callable[[], None] | None = None
        name = "_resolve" if storage.kind == "redis" else "_fetch_list"
        build = getattr(saver._plans, name)

        def marking(*args: Any) -> Any:
            command = build(*args)
            self.marked.append(command)
            return command

        monkeypatch.setattr(saver._plans, name, marking)

    def on_marked(self) -> None:
        """Before a marked command: the deletion, once."""
        if self.delete is not None:
            delete, self.delete = self.delete, None
            delete()

    def around(self, plan: Plan[Any, Any]) -> Plan[Any, Any]:
        try:
            command = next(plan)
            while True:
                if any(command is m for m in self.marked):
                    self.on_marked()
                try:
                    result = yield command
                except Exception as exc:
                    command = plan.throw(exc)
                else:
                    command = plan.send(result)
        except StopIteration as done:
            return done.value


def read_plan(saver: Any, how: str, thread_id: str) -> Plan[Any, Any]:
    """A read a racing reader makes: ``get_tuple``, or a page of ``list``."""
    if how == "get_tuple":
        return saver._get_tuple_plan(cfg(thread_id))  # type: ignore[no-any-return]
    query = ListQuery.build(cfg(thread_id), None, None, None)
    return saver._list_page_plan(query)  # type: ignore[no-any-return]


def found(how: str, result: Any) -> dict[str, list[Any]]:
    """The messages of each checkpoint a read returned, by checkpoint id."""
    tuples = result[0] if how == "list" else [result] if result is not None else []
    return {
        t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]["messages"]
        for t in tuples
    }


# (whether the reader read the list's last items before, the list's length): a reader
# that knows nothing reading a list of whole pages only; one that read the list's tail
# under an earlier checkpoint reading the list, whose page is new to it.
SHAPES = {"pages-only": (False, 2 * PAGE_SIZE), "known-tail": (True, PAGE_SIZE + 10)}


def setup_thread(writer: Any, thread_id: str, n: int, tag: str = "") -> dict[str, list[Any]]:
    """A checkpoint holding the list's tail, then its child holding the whole list of
    ``n`` messages (texts and ids prefixed by ``tag``); their lists by checkpoint id."""
    tail = messages(f"{tag}tail", max(n % PAGE_SIZE, 2))
    whole = messages(f"{tag}page", n - n % PAGE_SIZE) + tail[: n % PAGE_SIZE]
    first = writer.put(cfg(thread_id), checkpoint_of(tail, "1"), META, {"messages": "1"})
    second = writer.put(first, checkpoint_of(whole, "2"), META, {"messages": "2"})
    return {
        first["configurable"]["checkpoint_id"]: tail,
        second["configurable"]["checkpoint_id"]: whole,
    }


def check(how: str, result: Any, stored: dict[str, list[Any]]) -> None:
    """Nothing (the thread is gone), or whole lists."""
    for checkpoint_id, values in found(how, result).items():
        assert [m.id for m in values] == [m.id for m in stored[checkpoint_id]]
        assert values == stored[checkpoint_id]


@pytest.mark.parametrize("how", ["get_tuple", "list"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_read_losing_the_race_with_deletion_returns_whole_lists_or_nothing(
    saver_factory: Any, storage: Any, monkeypatch: Any, how: str, shape: str
) -> None:
    """The deletion lands between the checkpoint's read and its list items' fetch: the
    read returns each list whole, or nothing (it fails and runs again, after the
    deletion). Before the fix, Redis returned the known tail alone and PostgreSQL an
    empty list of whole pages."""
    knows_tail, n = SHAPES[shape]
    with saver_factory(**small(storage)) as other, saver_factory(**small(storage)) as reader:
        thread_id = f"race-{uuid6().hex[:12]}"
        stored = setup_thread(other, thread_id, n)
        if knows_tail:
            first = next(iter(stored))
            at = {"configurable": {**cfg(thread_id)["configurable"], "checkpoint_id": first}}
            assert reader.get_tuple(at) is not None
        race = Race(reader, storage, monkeypatch)
        race.delete = lambda: other.delete_thread(thread_id)
        result = reader._run(race.around(read_plan(reader, how, thread_id)))
        assert race.delete is None, "the read fetched no list items: no race"
        check(how, result, stored)
        assert reader.get_tuple(cfg(thread_id)) is None


@pytest.mark.parametrize("how", ["get_tuple", "list"])
@pytest.mark.parametrize("shape", SHAPES)
async def test_async_read_losing_the_race_with_deletion_returns_whole_lists_or_nothing(
    saver_factory: Any,
    async_saver_factory: Any,
    storage: Any,
    monkeypatch: Any,
    how: str,
    shape: str,
) -> None:
    """The same on an async saver (the deletion by another, sync, saver)."""
    knows_tail, n = SHAPES[shape]
    with saver_factory(**small(storage)) as other:
        async with async_saver_factory(**small(storage)) as reader:
            thread_id = f"arace-{uuid6().hex[:12]}"
            stored = setup_thread(other, thread_id, n)
            if knows_tail:
                first = next(iter(stored))
                at = {"configurable": {**cfg(thread_id)["configurable"], "checkpoint_id": first}}
                assert await reader.aget_tuple(at) is not None
            race = Race(reader, storage, monkeypatch)
            race.delete = lambda: other.delete_thread(thread_id)
            result = await reader._arun(race.around(read_plan(reader, how, thread_id)))
            assert race.delete is None, "the read fetched no list items: no race"
            check(how, result, stored)
            assert await reader.aget_tuple(cfg(thread_id)) is None


def drop_a_middle_page(storage: Any, saver: Any, thread_id: str) -> None:
    """Delete one page of the thread's stored lists (not the spine), in storage itself."""
    page_bytes = PAGE_SIZE * 16  # a page holds PAGE_SIZE ids of 16 bytes; a spine fewer
    if storage.kind == "redis":
        from tests.test_redis_saver import admin_client

        client = admin_client(storage.url)
        try:
            nodes = saver._plans.keys(thread_id)[9]
            pages = [f for f, v in client.hgetall(nodes).items() if len(v) == page_bytes]
            assert client.hdel(nodes, sorted(pages)[0]) == 1
        finally:
            client.close()
        return
    from langgraph_memory_plus.checkpoint.config import thread_key

    tk = thread_key(thread_id)
    if storage.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(f"{storage.url}/memory.db") as db:
            deleted = db.execute(
                "DELETE FROM lgmp_nodes WHERE thread_key = ?1 AND node_id = (SELECT min(node_id) "
                "FROM lgmp_nodes WHERE thread_key = ?1 AND length(children) = ?2)",
                (tk, page_bytes),
            ).rowcount
    else:
        import psycopg

        schema = saver._plans.schema
        with psycopg.connect(storage.url, autocommit=True) as db:
            deleted = db.execute(
                f'DELETE FROM "{schema}".lgmp_items WHERE ctid = (SELECT min(ctid) FROM '
                f'"{schema}".lgmp_items WHERE thread_key = %s AND type = %s '
                "AND length(data) = %s)",
                (tk, "lgmp:node", page_bytes),
            ).rowcount
    assert deleted == 1


def test_a_list_missing_a_stored_page_is_corrupt_not_shorter(
    saver_factory: Any, storage: Any
) -> None:
    """A page gone from storage (the spine and the other pages still there) fails the
    read with CorruptDataError; it never reads as the list without that page's items."""
    from langgraph_memory_plus.errors import CorruptDataError

    with saver_factory(**small(storage)) as writer:
        thread_id = f"page-{uuid6().hex[:12]}"
        setup_thread(writer, thread_id, 3 * PAGE_SIZE + 5)
        drop_a_middle_page(storage, writer, thread_id)
    with saver_factory(**small(storage)) as reader:  # nothing remembered
        with pytest.raises(CorruptDataError, match="list items"):
            reader.get_tuple(cfg(thread_id))
        with pytest.raises(CorruptDataError, match="list items"):
            list(reader.list(cfg(thread_id)))


class Races(Race):
    """Runs ``again()`` before each of the read's first ``times`` list-items fetches."""

    def __init__(self, saver: Any, storage: Any, monkeypatch: Any, times: int) -> None:
        super().__init__(saver, storage, monkeypatch)
        self.left = times
        self.again: Callable[[], None] = lambda: None
        self.ran = 0

    def on_marked(self) -> None:
        if self.left:
            self.left -= 1
            self.ran += 1
            self.again()


@pytest.mark.parametrize("how", ["get_tuple", "list"])
def test_a_read_losing_the_race_five_times_in_a_row_still_reads_whole(
    saver_factory: Any, storage: Any, monkeypatch: Any, how: str
) -> None:
    """A thread deleted and written anew between each of five reads' checkpoint and its
    items (a loaded machine, a writer and a deleter at work): every failure is another
    checkpoint, so the read goes on and returns the state it then finds, whole. It used
    to give up after 3 reads with "corrupt stored data" (CI, 5 runs in 6 under load)."""
    with saver_factory(**small(storage)) as other, saver_factory(**small(storage)) as reader:
        thread_id = f"races-{uuid6().hex[:12]}"
        stored = setup_thread(other, thread_id, 2 * PAGE_SIZE)
        race = Races(reader, storage, monkeypatch, times=5)

        def again() -> None:
            other.delete_thread(thread_id)
            stored.update(setup_thread(other, thread_id, 2 * PAGE_SIZE, f"w{race.ran}-"))

        race.again = again
        result = reader._run(race.around(read_plan(reader, how, thread_id)))
        assert race.ran >= (1 if storage.kind == "sqlite" else 5)  # SQLite: one transaction
        assert found(how, result), "the thread was written again: the read finds it"
        check(how, result, stored)


def test_stored_damage_is_raised_after_three_alike_reads(
    saver_factory: Any, storage: Any, monkeypatch: Any
) -> None:
    """Damage that is really stored fails every read the same way: raised after three
    reads, not read twelve times."""
    from langgraph_memory_plus.errors import CorruptDataError

    with saver_factory(**small(storage)) as writer:
        thread_id = f"dmg-{uuid6().hex[:12]}"
        setup_thread(writer, thread_id, 3 * PAGE_SIZE + 5)
        drop_a_middle_page(storage, writer, thread_id)
    with saver_factory(**small(storage)) as reader:
        reads = [0]
        get_tuple = reader._plans.get_tuple

        def counted(*args: Any) -> Any:
            reads[0] += 1
            return get_tuple(*args)

        monkeypatch.setattr(reader._plans, "get_tuple", counted)
        with pytest.raises(CorruptDataError, match="list items"):
            reader.get_tuple(cfg(thread_id))
        assert reads[0] == 3
