"""List channels (``messages``) stored as items and pages: O(T) bytes, same values back.

Every test runs on each backend (postgres, redis, redis-cluster, sqlite) through the conftest
factories, and compares what the graph sees with ``InMemorySaver`` where it can.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from contextlib import closing
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import TypedDict

from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.lists import PAGE_SIZE
from langgraph_memory_plus.checkpoint.sqlite import SqlitePool

pytestmark = pytest.mark.storage


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(**compile_options: Any) -> Any:
    def model(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n}", id=f"ai-{n}")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(**compile_options)


def ask(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"question {turn} " + "x" * 40, id=f"human-{turn}")]}


def new_config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"lists-{uuid.uuid4()}"}}


def on_sqlite(saver: Any) -> bool:
    return isinstance(getattr(saver, "conn", None), SqlitePool)


def sqlite_rows(saver: Any, sql: str, tk: bytes) -> list[tuple[Any, ...]]:
    """Rows of a query on a SQLite saver's file, from a connection of the test's own."""
    with closing(sqlite3.connect(saver.conn.path)) as conn:
        return conn.execute(sql, (tk,)).fetchall()


def stored_items(saver: Any, thread_id: str) -> tuple[int, int]:
    """(list items, list pages + spines) stored for a thread, read from the backend."""
    tk = thread_key(thread_id)
    if on_sqlite(saver):
        [(items, nodes)] = sqlite_rows(
            saver,
            "SELECT (SELECT count(*) FROM lgmp_items WHERE thread_key = ?1), "
            "(SELECT count(*) FROM lgmp_nodes WHERE thread_key = ?1)",
            tk,
        )
        return int(items), int(nodes)
    if hasattr(saver, "client"):
        keys = saver._plans.keys(thread_id)
        client = saver.client
        return int(client.hlen(keys[8])), int(client.hlen(keys[9]))
    with saver.conn.connection() as conn:
        schema = saver._plans.schema
        # pages and spines are rows of lgmp_items too, of their own type
        items = conn.execute(
            f'SELECT count(*) FROM "{schema}".lgmp_items WHERE thread_key = %s '
            "AND type <> 'lgmp:node'",
            (tk,),
        ).fetchone()
        nodes = conn.execute(
            f'SELECT count(*) FROM "{schema}".lgmp_items WHERE thread_key = %s '
            "AND type = 'lgmp:node'",
            (tk,),
        ).fetchone()
        assert items is not None and nodes is not None
        return int(items[0]), int(nodes[0])


def history_values(graph: Any, config: dict[str, Any]) -> list[list[tuple[str, Any]]]:
    return [
        [(m.id, m.content) for m in h.values.get("messages", [])]
        for h in graph.get_state_history(config)
    ]


@pytest.fixture
def sync_saver_of(saver_factory: Any) -> Any:
    return saver_factory


def test_long_chat_is_stored_once_and_reads_back_the_same(saver_factory: Any) -> None:
    """120 turns (240 messages, several full pages) across a restart: every checkpoint in
    the history equals InMemorySaver's, and each message is stored exactly once."""
    config = new_config()
    reference = chat_graph(checkpointer=InMemorySaver())
    turns = 120
    with saver_factory() as saver:
        graph = chat_graph(checkpointer=saver)
        for turn in range(turns // 2):
            graph.invoke(ask(turn), config)
            reference.invoke(ask(turn), config)
    with saver_factory() as saver:  # a new process: nothing remembered
        graph = chat_graph(checkpointer=saver)
        assert graph.get_state(config).values == reference.get_state(config).values
        for turn in range(turns // 2, turns):
            graph.invoke(ask(turn), config)
            reference.invoke(ask(turn), config)
        state = graph.get_state(config)
        assert len(state.values["messages"]) == 2 * turns
        assert state.values == reference.get_state(config).values
        assert history_values(graph, config) == history_values(reference, config)
        items, nodes = stored_items(saver, config["configurable"]["thread_id"])
        assert items == 2 * turns, "every message stored once"
        # full pages, plus one spine per page count the list reached
        assert nodes <= 2 * (2 * turns // PAGE_SIZE) + 1


class Numbers(TypedDict):
    nums: list[int]


def test_message_lists_are_items_from_two_and_short_scalar_lists_stay_whole(
    saver_factory: Any,
) -> None:
    """A chat's list is stored as items from its second message (each version whole would
    cost more); a short list of numbers stays one value, as it is as often replaced."""
    chat, numbers = new_config(), new_config()
    builder = StateGraph(Numbers)
    builder.add_node("count", lambda state: {"nums": list(range(10))})
    builder.add_edge(START, "count")
    with saver_factory() as saver:
        chat_graph(checkpointer=saver).invoke(ask(0), chat)
        assert stored_items(saver, chat["configurable"]["thread_id"]) == (2, 0)
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"nums": [1]}, numbers)
        assert stored_items(saver, numbers["configurable"]["thread_id"]) == (0, 0)
        assert graph.get_state(numbers).values == {"nums": list(range(10))}


async def test_async_long_chat_round_trips(async_saver_factory: Any) -> None:
    config = new_config()
    reference = chat_graph(checkpointer=InMemorySaver())
    async with async_saver_factory() as saver:
        graph = chat_graph(checkpointer=saver)
        for turn in range(40):
            await graph.ainvoke(ask(turn), config)
            await reference.ainvoke(ask(turn), config)
    async with async_saver_factory() as saver:
        graph = chat_graph(checkpointer=saver)
        ours = [h.values async for h in graph.aget_state_history(config)]
        theirs = [h.values async for h in reference.aget_state_history(config)]
        assert ours == theirs


def test_a_reassigned_field_is_stored(saver_factory: Any) -> None:
    """A node that edits a message object it got from state (reassigning ``content``) and
    returns it: the edit is stored, even though the object is the remembered one."""

    def edit(state: State) -> dict[str, Any]:
        first = state["messages"][0]
        first.content = "edited"
        return {"messages": [first]}

    builder = StateGraph(State)
    builder.add_node("edit", edit)
    builder.add_edge(START, "edit")
    config = new_config()
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        for turn in range(12):  # 24 messages: stored as items
            chat.invoke(ask(turn), config)
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
    with saver_factory() as saver:
        state = chat_graph(checkpointer=saver).get_state(config)
        assert state.values["messages"][0].content == "edited"
        assert len(state.values["messages"]) == 24


def test_a_field_reassigned_twice_is_stored() -> None:
    """The second value of a field may be allocated where the replaced first one was
    freed: the remembered fingerprint must still tell it from the original."""
    from langgraph_memory_plus.checkpoint.lists import fingerprint, unchanged

    for turn in range(50):
        # Built at run time, so only the message holds the text (no constant keeps it).
        message = HumanMessage("".join(["original ", str(turn), "x" * 40]), id="h")
        before = fingerprint(message)
        message.content = message.content.upper()  # frees the original text
        message.content = message.content.lower()  # same size: may land at its address
        assert message.content.startswith("original ")
        assert not unchanged(fingerprint(message), before)
        assert unchanged(fingerprint(message), fingerprint(message))


def test_unchanged_prefix_stops_at_the_first_element_changed() -> None:
    """A put's one pass over the fields of a whole list (issue 39) finds the first
    element with a field reassigned, added or deleted, the same as comparing element by
    element; lists of dicts and scalars take the element-by-element way."""
    from langgraph_memory_plus.checkpoint.lists import fingerprints_of, unchanged_prefix

    def messages() -> list[Any]:
        return [HumanMessage(f"m{i}", id=f"h{i}") for i in range(40)]

    for edit in ("reassign", "add", "delete", "none"):
        values = messages()
        prints = fingerprints_of(values)
        if edit == "reassign":
            values[17].content = "other"
        elif edit == "add":
            vars(values[17])["extra_field"] = 1
        elif edit == "delete":
            del vars(values[17])["name"]
        assert unchanged_prefix(values, prints) == (40 if edit == "none" else 17)
        assert unchanged_prefix(values[:10], prints) == 10
    dicts: list[Any] = [{"k": i} for i in range(5)] + [3, "x"]
    prints = fingerprints_of(dicts)
    dicts[2]["k"] = 99
    assert unchanged_prefix(dicts, prints) == 2


def test_removed_messages_are_collected_under_retention(saver_factory: Any) -> None:
    """With keep_last=1, items that no kept version uses are deleted with it."""

    def forget(state: State) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id=m.id) for m in state["messages"][:-20]]}

    config = new_config()
    with saver_factory(keep_last=1) as saver:
        chat = chat_graph(checkpointer=saver)
        for turn in range(40):
            chat.invoke(ask(turn), config)
        builder = StateGraph(State)
        builder.add_node("forget", forget)
        builder.add_edge(START, "forget")
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
        # one more step so the version that still had 80 messages is trimmed away
        chat.invoke(ask(99), config)
        state = chat.get_state(config)
        assert len(state.values["messages"]) == 22
        items, _ = stored_items(saver, config["configurable"]["thread_id"])
        assert items == 22


class MessageCountingSerde(JsonPlusSerializer):
    """Counts the messages serialized one by one (list items)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.messages += isinstance(obj, BaseMessage)
        return super().dumps_typed(obj)


def test_retention_keeps_each_message_serialized_once(saver_factory: Any) -> None:
    """With ``keep_last``, a step that leaves ``messages`` alone must not make the next
    put serialize the whole conversation again: each turn's two messages, once each."""

    class Both(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        turns: int

    def model(state: Both) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n}", id=f"ai-{n}")]}

    def count(state: Both) -> dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    builder = StateGraph(Both)
    builder.add_node("model", model)
    builder.add_node("count", count)
    builder.add_edge(START, "model")
    builder.add_edge("model", "count")
    serde = MessageCountingSerde()
    config = new_config()
    with saver_factory(keep_last=2, serde=serde) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(20):
            graph.invoke(ask(turn), config)
        before = serde.messages
        for turn in range(20, 30):
            graph.invoke(ask(turn), config)
        assert serde.messages - before == 2 * 10
        assert len(graph.get_state(config).values["messages"]) == 60


def restore_after_deleting(saver: Any, config: dict[str, Any], delete: Any) -> list[Any]:
    """Chat, keep the messages read back, run ``delete``, then write them back."""
    chat = chat_graph(checkpointer=saver)
    for turn in range(2):
        chat.invoke(ask(turn), config)
    kept = chat.get_state(config).values["messages"]
    delete(chat)
    chat.update_state(config, {"messages": kept})
    return [(m.id, m.content) for m in kept]


@pytest.mark.parametrize(
    "how",
    [
        "clear here",
        "clear elsewhere",
        "prune delete",
        "prune keep_latest",
        "delete_thread elsewhere",
    ],
)
def test_messages_written_back_after_a_delete_are_stored_again(
    saver_factory: Any, how: str
) -> None:
    """What a saver remembers of a list must not outlive the items deletes removed: a
    chat cleared (retention, keep_last=1, then drops its items), pruned or deleted, by
    this saver or by another process's, then restored from messages read before, must
    store those items again, not refer to deleted ones."""
    config = new_config()
    thread_id = config["configurable"]["thread_id"]
    options = {"keep_last": 1} if how.startswith("clear") else {}

    def delete(chat: Any) -> None:
        with contextlib.ExitStack() as stack:
            if how.endswith("elsewhere"):  # another process, with a saver of its own
                chat = chat_graph(checkpointer=stack.enter_context(saver_factory(**options)))
            if how.startswith("clear"):
                chat.update_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
            elif how.startswith("prune"):
                chat.checkpointer.prune([thread_id], strategy=how.split()[1])
            else:
                chat.checkpointer.delete_thread(thread_id)

    with saver_factory(**options) as saver:
        written = restore_after_deleting(saver, config, delete)
    with saver_factory(**options) as saver:  # another process reads what is stored
        messages = chat_graph(checkpointer=saver).get_state(config).values["messages"]
        assert [(m.id, m.content) for m in messages] == written


def test_delete_and_prune_leave_no_items(saver_factory: Any) -> None:
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        deleted, pruned = new_config(), new_config()
        for config in (deleted, pruned):
            for turn in range(70):
                chat.invoke(ask(turn), config)
        before = chat.get_state(pruned).values
        saver.delete_thread(deleted["configurable"]["thread_id"])
        assert stored_items(saver, deleted["configurable"]["thread_id"]) == (0, 0)
        saver.prune([pruned["configurable"]["thread_id"]], strategy="keep_latest")
        assert chat.get_state(pruned).values == before
        items, _ = stored_items(saver, pruned["configurable"]["thread_id"])
        assert items == 140
        saver.prune([pruned["configurable"]["thread_id"]], strategy="delete")
        assert stored_items(saver, pruned["configurable"]["thread_id"]) == (0, 0)


def test_copy_thread_copies_list_storage(saver_factory: Any) -> None:
    source, target = new_config(), new_config()
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        for turn in range(50):
            chat.invoke(ask(turn), source)
        saver.copy_thread(source["configurable"]["thread_id"], target["configurable"]["thread_id"])
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        assert chat.get_state(target).values == chat.get_state(source).values
        chat.invoke(ask(50), target)
        assert len(chat.get_state(target).values["messages"]) == 102
        assert len(chat.get_state(source).values["messages"]) == 100


def test_a_copied_thread_grows_past_a_page_boundary_and_reads_back_whole(
    saver_factory: Any,
) -> None:
    """A copy's pages are stored under the source thread's key; the copy's next full
    page must get a spine of pages that exist, read back the same by another process."""
    source, target = new_config(), new_config()
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        for turn in range(PAGE_SIZE // 2):  # exactly one full page
            chat.invoke(ask(turn), source)
        saver.copy_thread(source["configurable"]["thread_id"], target["configurable"]["thread_id"])
        for turn in range(PAGE_SIZE // 2, PAGE_SIZE + 1):  # the copy completes a second page
            chat.invoke(ask(turn), target)
        written = [(m.id, m.content) for m in chat.get_state(target).values["messages"]]
    assert len(written) == 2 * PAGE_SIZE + 2
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        assert [(m.id, m.content) for m in chat.get_state(target).values["messages"]] == written
        chat.invoke(ask(PAGE_SIZE + 1), target)
    with saver_factory() as saver:
        messages = chat_graph(checkpointer=saver).get_state(target).values["messages"]
        assert [(m.id, m.content) for m in messages][: len(written)] == written
        assert len(messages) == len(written) + 2


class CountingCipher:
    """A test-only cipher (NOT secure) that records what it was asked to encrypt."""

    def __init__(self) -> None:
        self.plaintexts: list[bytes] = []

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        self.plaintexts.append(plaintext)
        return "counting", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in ciphertext)


def test_encrypted_items_hide_text_and_equality_across_threads(
    saver_factory: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    """Items go through the user's serializer one by one; item ids are keyed by thread,
    so the same message in two threads is stored under unrelated ids."""

    cipher = CountingCipher()
    serde = EncryptedSerializer(cipher, JsonPlusSerializer())
    one, two = new_config(), new_config()
    with saver_factory(serde=serde) as saver:
        chat = chat_graph(checkpointer=saver)
        for config in (one, two):
            for turn in range(10):
                chat.invoke(ask(turn), config)
        assert chat.get_state(one).values == chat.get_state(two).values
        ids = [item_ids(saver, c["configurable"]["thread_id"], request) for c in (one, two)]
        assert ids[0] and ids[1] and not (ids[0] & ids[1])
        assert b"question 3" not in b"".join(stored_item_bytes(saver, one, request))


def item_ids(saver: Any, thread_id: str, request: pytest.FixtureRequest) -> set[bytes]:
    if on_sqlite(saver):
        sql = "SELECT item_id FROM lgmp_items WHERE thread_key = ?"
        return {bytes(r[0]) for r in sqlite_rows(saver, sql, thread_key(thread_id))}
    if hasattr(saver, "client"):
        keys = saver._plans.keys(thread_id)
        return {bytes(f).split(b"\x00", 1)[1] for f in saver.client.hkeys(keys[8])}
    with psycopg.connect(request.getfixturevalue("pg_url")) as conn:
        rows = conn.execute(
            "SELECT item_id FROM lgmp_items WHERE thread_key = %s", (thread_key(thread_id),)
        ).fetchall()
    return {bytes(r[0]) for r in rows}


def stored_item_bytes(
    saver: Any, config: dict[str, Any], request: pytest.FixtureRequest
) -> list[bytes]:
    thread_id = config["configurable"]["thread_id"]
    if on_sqlite(saver):
        sql = "SELECT data FROM lgmp_items WHERE thread_key = ?"
        return [bytes(r[0]) for r in sqlite_rows(saver, sql, thread_key(thread_id))]
    if hasattr(saver, "client"):
        keys = saver._plans.keys(thread_id)
        return [bytes(v) for v in saver.client.hvals(keys[8])]
    with psycopg.connect(request.getfixturevalue("pg_url")) as conn:
        rows = conn.execute(
            "SELECT data FROM lgmp_items WHERE thread_key = %s", (thread_key(thread_id),)
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def test_an_expired_thread_leaves_nothing(saver_factory: Any, backend: str) -> None:
    """After expiry (and, on PostgreSQL and SQLite, a sweep) no row or key of the thread
    remains."""
    import time

    config = new_config()
    thread_id = config["configurable"]["thread_id"]
    with saver_factory(ttl={"default_ttl": 0.02}) as saver:  # 1.2 s
        chat = chat_graph(checkpointer=saver)
        for turn in range(20):
            chat.invoke(ask(turn), config)
        assert stored_items(saver, thread_id)[0] == 40
        time.sleep(1.5)
        assert saver.get_tuple(config) is None
        assert saver.sweep_expired() >= (1 if backend in ("postgres", "sqlite") else 0)
        assert stored_items(saver, thread_id) == (0, 0)
        if on_sqlite(saver):
            for table in ("threads", "checkpoints", "blobs", "writes", "items", "nodes"):
                sql = f"SELECT count(*) FROM lgmp_{table} WHERE thread_key = ?"
                assert sqlite_rows(saver, sql, thread_key(thread_id)) == [(0,)], table
        elif hasattr(saver, "client"):
            assert not any(saver.client.exists(key) for key in saver._plans.keys(thread_id))
        else:
            tk = thread_key(thread_id)
            with saver.conn.connection() as conn:
                for table in ("threads", "checkpoints", "blobs", "task_writes", "items"):
                    row = conn.execute(
                        f"SELECT count(*) FROM lgmp_{table} WHERE thread_key = %s", (tk,)
                    ).fetchone()
                    assert row is not None and row[0] == 0, table


def test_items_are_stored_compressed(
    saver_factory: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    """Messages are deflated with the preset dictionary before they are stored."""
    config = new_config()
    with saver_factory() as saver:
        chat = chat_graph(checkpointer=saver)
        for turn in range(12):
            chat.invoke(ask(turn), config)
        messages = chat.get_state(config).values["messages"]
        stored = sum(map(len, stored_item_bytes(saver, config, request)))
    raw = sum(len(JsonPlusSerializer().dumps_typed(m)[1]) for m in messages)
    assert stored < 0.75 * raw


def test_reading_older_versions_keeps_the_latest_list_in_memory() -> None:
    """History reads (``list()``) remember the versions they rebuild without evicting the
    one the thread is at, so the next ``get_tuple`` of the latest needs no fetch; the
    memory per channel stays bounded, and a put builds on the view its objects came from."""
    from langgraph_memory_plus.checkpoint.lists import ListMemory, chunk_list, remember_stored

    tk, memory = b"k" * 16, ListMemory(versions_per_list=4)
    key = (tk, "", "messages")
    lists = []
    values: list[Any] = []
    for n in range(40):
        values = [*values, f"message {n}"]
        lists.append(chunk_list(tk, values, None, lambda v: ("str", v.encode())))
    latest = lists[-1]
    remember_stored(memory, key, latest, "latest")
    for n, older in enumerate(lists[-4:-1]):  # a page of history read after the latest
        remember_stored(memory, key, older, f"older-{n}")
    assert latest.view is not None
    assert memory.find(key, latest.ref) is latest.view.version
    assert memory.base(key, values, "latest") is latest.view  # the parent's view
    assert memory.base(key, values, "older-0") is lists[-4].view
    assert memory.base(key, values, "unknown") is None  # never another version's
    for n, older in enumerate(lists[:4]):
        remember_stored(memory, key, older, f"oldest-{n}")
    assert memory.find(key, latest.ref) is None  # bounded: four versions per channel


def test_a_put_advances_only_its_own_threads_views_and_eviction_forgets_them() -> None:
    """``advance`` (every put) looks up the thread's own channels, not every thread the
    memory holds; the lookup follows evictions and ``forget_lists`` exactly."""
    from langgraph_memory_plus.checkpoint.lists import ListMemory, chunk_list, remember_stored

    memory = ListMemory(max_lists=3)
    dump = lambda v: ("str", v.encode())  # noqa: E731
    stored = {}
    for n in range(4):  # the first thread's channel is evicted by the fourth
        tk = bytes([n]) * 16
        for name in ("messages", "notes"):
            chunked = chunk_list(tk, [f"{name} {n}", "x"], None, dump)
            if n == 0 or name == "messages":
                remember_stored(memory, (tk, "", name), chunked, "c1")
                stored[(tk, name)] = chunked
    first, last = bytes([0]) * 16, bytes([3]) * 16
    assert memory.base((first, "", "messages"), ["messages 0", "x"], "c1") is None  # evicted
    memory.advance(last, "", "c1", "c2", changed=())
    memory.advance(last, "sub", "c2", "c3", changed=())  # another namespace: untouched
    view = stored[(last, "messages")].view
    assert view is not None and view.at == {"c1", "c2"}
    assert memory.base((last, "", "messages"), ["messages 3", "x"], "c2") is view
    memory.advance(last, "", "c2", "c4", changed={"messages"})  # changed: not carried
    assert "c4" not in view.at
    memory.forget_lists(last)
    assert memory.base((last, "", "messages"), ["messages 3", "x"], "c2") is None
    middle = bytes([2]) * 16
    memory.advance(middle, "", "c1", "c5", changed=())  # still there, still advanced
    assert stored[(middle, "messages")].view.at == {"c1", "c5"}


def test_older_checkpoints_read_by_id_from_memory_when_their_items_are_known(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every older checkpoint of a chat grown past several pages, read by id after reads
    of the others pushed its version out of memory, is built from the items this saver
    knows: no list fetch, a value equal to InMemorySaver's, objects of its own; a fresh
    saver fetches once, for the latest, then derives the rest. A copy (pages hashed under
    the source's key) fetches its own."""
    from langgraph_memory_plus.checkpoint import codec

    fetches: list[Any] = []
    real = codec.resolve_list

    def counted(request: Any, memory: Any, fetch: Any, *rest: Any) -> Any:
        def fetch_counted(r: Any) -> Any:
            fetches.append(r)
            return fetch(r)

        return real(request, memory, fetch_counted, *rest)

    monkeypatch.setattr(codec, "resolve_list", counted)
    config = new_config()
    reference = chat_graph(checkpointer=InMemorySaver())
    with saver_factory() as saver:
        graph = chat_graph(checkpointer=saver)
        for turn in range(3 * PAGE_SIZE // 2):
            graph.invoke(ask(turn), config)
            reference.invoke(ask(turn), config)
        expected = [h.values for h in reference.get_state_history(config)]
        configs = [h.config for h in graph.get_state_history(config)]
        fetches.clear()
        for _ in range(2):
            seen: list[Any] = []
            for at, values in zip(configs, expected, strict=True):
                state = graph.get_state(at)
                assert state.values == values
                seen.extend(state.values.get("messages", []))
            assert len({id(m) for m in seen}) == len(seen)
        assert fetches == []
    with saver_factory() as saver:  # a new process: nothing remembered
        graph = chat_graph(checkpointer=saver)
        graph.get_state(config)
        for at, values in zip(configs[1:], expected[1:], strict=True):
            assert graph.get_state(at).values == values
        assert len(fetches) == 1
        copy = new_config()
        saver.copy_thread(config["configurable"]["thread_id"], copy["configurable"]["thread_id"])
        fetches.clear()
        older = {"configurable": {**copy["configurable"], **configs[9]["configurable"]}}
        older["configurable"]["thread_id"] = copy["configurable"]["thread_id"]
        assert graph.get_state(copy).values == expected[0]
        assert graph.get_state(older).values == expected[9]
        assert len(fetches) == 2


def test_rereading_a_checkpoint_keeps_the_view_a_put_builds_on() -> None:
    """A read's view supersedes an earlier read's of the same checkpoint, never a put's:
    reading one checkpoint again and again keeps the memory a put on the latest builds
    on, and frees only what the earlier reads built."""
    from langgraph_memory_plus.checkpoint.lists import (
        ListMemory,
        ListRef,
        ListRequest,
        chunk_list,
        remember_stored,
        resolve_list,
    )

    tk, memory = b"k" * 16, ListMemory(views_per_list=4)
    key = (tk, "", "messages")
    values = [f"message {n}" for n in range(40)]
    stored = chunk_list(tk, values, None, lambda v: ("str", v.encode()))
    remember_stored(memory, key, stored, "latest")
    older = chunk_list(tk, values[:20], None, lambda v: ("str", v.encode()))

    def read(ref: ListRef, checkpoint_id: str) -> list[Any]:
        plan = resolve_list(
            ListRequest(key, ref, {}), memory, lambda r: pytest.fail("fetched"),
            lambda iid, typ, data: data.decode(), iter, checkpoint_id,
        )  # fmt: skip
        try:
            next(plan)
        except StopIteration as done:
            return list(done.value)
        raise AssertionError("the read asked the backend")

    for _ in range(10):
        assert read(older.ref, "older") == values[:20]
    channel = memory._channels[key]
    assert [v.at for v in channel.views] == [{"latest"}, {"older"}]
    assert memory.base(key, values, "latest") is stored.view
    again = read(stored.ref, "latest")
    assert again == values and memory.base(key, again, "latest").objects[0] is again[0]
    assert memory.base(key, values, "latest") is not None  # the put's view stays


def test_derive_matches_only_this_threads_pages() -> None:
    """A list version not remembered is derived from a remembered longer one only when its
    spine is that version's first pages hashed under this thread's key."""
    from langgraph_memory_plus.checkpoint.lists import ListMemory, chunk_list, remember_stored

    tk, other, memory = b"k" * 16, b"o" * 16, ListMemory()
    key = (tk, "", "messages")
    values = [f"message {n}" for n in range(5 * PAGE_SIZE + 3)]
    dump = lambda v: ("str", v.encode())  # noqa: E731
    remember_stored(memory, key, chunk_list(tk, values, None, dump), "latest")
    for n in (0, 3, PAGE_SIZE, 2 * PAGE_SIZE + 5, 5 * PAGE_SIZE):
        older = chunk_list(tk, values[:n], None, dump)
        derived = memory.derive(key, older.ref)
        assert derived is not None and derived.item_ids == older.view.version.item_ids
        assert derived.page_ids == older.view.version.page_ids
    assert memory.derive(key, chunk_list(other, values[:40], None, dump).ref) is None
    edited = chunk_list(tk, ["edited", *values[1:40]], None, dump)
    assert memory.derive(key, edited.ref) is None
