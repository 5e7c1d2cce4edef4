"""End to end: ``langgraph dev`` with our checkpointer and store, driven by ``langgraph_sdk``.

For each backend (PostgreSQL, Redis, SQLite) the test writes a ``langgraph.json`` and a small
graph (a fake model, then a node that interrupts for approval) to a temporary directory,
starts the real LangGraph server there on a free loopback port with
``langgraph_memory_plus.server.checkpointer`` / ``.store`` and ``LANGGRAPH_MEMORY_URL``, and
drives it over HTTP: runs, history, an interrupt resumed with ``Command(resume=...)``,
``threads.copy``, the ``rollback`` multitask strategy, the store's put/get/search/
list_namespaces, and thread deletion. After each step it reads our storage directly (a
``from_url`` of its own on the same URL), so a pass means the server really kept its state
with us and not in its in-memory runtime. The server is stopped by its pid.

The conversation with the server is printed (``pytest -s`` shows it) and, with
``LGMP_SERVER_TRANSCRIPT=path``, also written to that file.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import IN_CI, _free_port, as_url
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_memory_plus import server
from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver
from langgraph_memory_plus.errors import InvalidConfigError
from langgraph_memory_plus.url import from_url

REPO = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 90.0  # seconds; the server imports langgraph-api, the graph and our package

GRAPH = '''
"""A graph for the server test: a fake model, then a review that interrupts."""

import asyncio
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


class State(TypedDict):
    messages: Annotated[list, add_messages]


async def model(state: State) -> dict:
    text = state["messages"][-1].content
    if text == "slow":  # long enough for a second run to roll this one back
        await asyncio.sleep(30)
    if text == "wait":  # a run still going when the next one comes, that then ends
        await asyncio.sleep(1)
    return {"messages": [AIMessage(content=f"echo: {text}")]}


def review(state: State) -> dict:
    answer = interrupt({"question": "approve?"})
    return {"messages": [AIMessage(content=f"review: {answer}")]}


graph = (
    StateGraph(State)
    .add_node(model)
    .add_node(review)
    .add_edge(START, "model")
    .add_edge("model", "review")
    .add_edge("review", END)
    .compile()
)
'''

CONFIG = {
    "dependencies": ["."],
    "graphs": {"agent": "./graph.py:graph"},
    "checkpointer": {"path": "langgraph_memory_plus.server.checkpointer"},
    "store": {"path": "langgraph_memory_plus.server.store"},
}


@pytest.fixture(params=["postgres", "redis", "sqlite"])
def memory_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The ``LANGGRAPH_MEMORY_URL`` of one backend, on storage of this test's own."""
    name = f"lgsrv_{uuid.uuid4().hex[:10]}"
    if request.param == "postgres":
        return as_url(request.getfixturevalue("pg_url"), schema=name)
    if request.param == "redis":
        prefix = f"{request.getfixturevalue('redis_prefix')}-{name}"
        return f"{request.getfixturevalue('redis_url')}?key_prefix={prefix}"
    return f"sqlite:///{tmp_path / 'memory.db'}"


def _langgraph_cli() -> str:
    script = Path(sys.executable).with_name("langgraph")
    if not script.exists():
        message = "the langgraph CLI is not installed (pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return str(script)


@contextmanager
def langgraph_dev(
    workdir: Path, memory_url: str, options: dict[str, Any] | None = None
) -> Iterator[tuple[str, Path]]:
    """``langgraph dev`` in ``workdir`` on a free loopback port; its base URL and its log.
    ``options``: ``LANGGRAPH_MEMORY_OPTIONS``. Stopped by its pid."""
    (workdir / "graph.py").write_text(textwrap.dedent(GRAPH))
    (workdir / "langgraph.json").write_text(json.dumps(CONFIG, indent=2))
    # A start of its own: concurrent runs (CI beside a developer's) that all took the first
    # free port from 7271 started two servers on one port; the second failed to bind and its
    # test talked to the other's server, on other storage (a run's checkpoint "missing").
    port = _free_port(7271 + random.randrange(400))
    env = {
        **os.environ,
        "LANGGRAPH_MEMORY_URL": memory_url,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        **({"LANGGRAPH_MEMORY_OPTIONS": json.dumps(options)} if options else {}),
    }
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [_langgraph_cli(), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not (_ready(base) and _listens(server.pid, port)):
            if server.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"langgraph dev did not start (exit {server.poll()}):\n{tail}")
            time.sleep(0.25)
        yield base, log_path
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the listening socket on ``port``: another test's
    server there answers ``/ok`` too (Linux's /proc; elsewhere assumed)."""
    fds = Path(f"/proc/{pid}/fd")
    if not fds.is_dir():
        return True
    inodes = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            listening = fields[3] == "0A"
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                return True
    return False


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/ok", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


class Transcript:
    """What was asked of the server and what it answered, one line each."""

    def __init__(self, backend: str) -> None:
        self.lines = [f"# langgraph dev on {backend}"]

    def __call__(self, call: str, answer: Any) -> Any:
        self.lines.append(f"> {call}\n< {json.dumps(_brief(answer), default=str)[:300]}")
        return answer


def _brief(answer: Any) -> Any:
    """``answer`` with each message as ``"type: content"`` and timestamps left out."""
    if isinstance(answer, list):
        return [_brief(a) for a in answer]
    if not isinstance(answer, dict):
        return answer
    if "type" in answer and "content" in answer:
        return f"{answer['type']}: {answer['content']}"
    return {k: _brief(v) for k, v in answer.items() if not k.endswith("_at")}


@asynccontextmanager
async def ours(memory_url: str) -> AsyncIterator[Any]:
    """Our own view of the storage the server uses."""
    async with from_url(memory_url, setup=False) as memory:
        yield memory


def messages(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


@pytest.mark.storage
@pytest.mark.langgraph_server
async def test_langgraph_dev_keeps_everything_in_our_storage(
    memory_url: str, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import NotFoundError

    backend = memory_url.split(":", 1)[0]
    say = Transcript(backend)
    with langgraph_dev(tmp_path, memory_url) as (base, log):
        client = get_client(url=base)

        # A run that stops at the interrupt, and its history.
        thread = say("threads.create()", await client.threads.create())
        tid = thread["thread_id"]
        hi = {"messages": [{"role": "human", "content": "hi"}]}
        out = say("runs.wait(input='hi')", await client.runs.wait(tid, "agent", input=hi))
        assert messages(out) == ["hi", "echo: hi"]
        state = say("threads.get_state()", await client.threads.get_state(tid))
        assert state["next"] == ["review"]
        assert [i["value"] for t in state["tasks"] for i in t["interrupts"]] == [
            {"question": "approve?"}
        ]
        async with ours(memory_url) as memory:
            stored = await memory.checkpointer.aget_tuple({"configurable": {"thread_id": tid}})
            assert stored is not None
            assert stored.checkpoint["id"] == state["checkpoint"]["checkpoint_id"]

        # Resumed with Command(resume=...).
        out = say(
            "runs.wait(command={'resume': 'yes'})",
            await client.runs.wait(tid, "agent", command={"resume": "yes"}),
        )
        assert messages(out) == ["hi", "echo: hi", "review: yes"]
        history = say("threads.get_history()", await client.threads.get_history(tid, limit=20))
        assert [h["next"] for h in history][:2] == [[], ["review"]]
        async with ours(memory_url) as memory:
            listed = [
                t async for t in memory.checkpointer.alist({"configurable": {"thread_id": tid}})
            ]
        assert [t.checkpoint["id"] for t in listed] == [
            h["checkpoint"]["checkpoint_id"] for h in history
        ]

        # threads.copy: the copy has the same state, stored with us under its own id.
        copy = say("threads.copy()", await client.threads.copy(tid))
        copied = say("threads.get_state(copy)", await client.threads.get_state(copy["thread_id"]))
        assert copy["thread_id"] != tid
        assert messages(copied["values"]) == ["hi", "echo: hi", "review: yes"]
        async with ours(memory_url) as memory:
            config = {"configurable": {"thread_id": copy["thread_id"]}}
            assert await memory.checkpointer.aget_tuple(config) is not None

        # Rollback: a second run cancels the first and deletes its checkpoints.
        other = (await client.threads.create())["thread_id"]
        slow = {"messages": [{"role": "human", "content": "slow"}]}
        first = say(
            "runs.create(input='slow')", await client.runs.create(other, "agent", input=slow)
        )
        await wait_until_running(client, other, first["run_id"])
        fast = {"messages": [{"role": "human", "content": "fast"}]}
        second = say(
            "runs.create(input='fast', multitask_strategy='rollback')",
            await client.runs.create(other, "agent", input=fast, multitask_strategy="rollback"),
        )
        say("runs.join(second)", await client.runs.join(other, second["run_id"]))
        with pytest.raises(NotFoundError):
            await client.runs.get(other, first["run_id"])
        say("runs.get(first)", "404 Not Found (rolled back)")
        rolled = say("threads.get_state()", await client.threads.get_state(other))
        assert messages(rolled["values"]) == ["fast", "echo: fast"]
        async with ours(memory_url) as memory:
            config = {"configurable": {"thread_id": other}}
            runs = {t.metadata.get("run_id") async for t in memory.checkpointer.alist(config)}
        assert second["run_id"] in runs
        assert first["run_id"] not in runs

        # The store.
        await client.store.put_item(["users", "u1"], key="prefs", value={"drink": "tea"})
        await client.store.put_item(["users", "u2"], key="prefs", value={"drink": "coffee"})
        item = say("store.get_item()", await client.store.get_item(["users", "u1"], key="prefs"))
        assert item["value"] == {"drink": "tea"}
        found = say(
            "store.search_items(filter={'drink': 'coffee'})",
            await client.store.search_items(["users"], filter={"drink": "coffee"}),
        )
        assert [i["namespace"] for i in found["items"]] == [["users", "u2"]]
        spaces = say(
            "store.list_namespaces(prefix=['users'])",
            await client.store.list_namespaces(prefix=["users"]),
        )
        assert sorted(spaces["namespaces"]) == [["users", "u1"], ["users", "u2"]]
        async with ours(memory_url) as memory:
            mine = await memory.store.aget(("users", "u1"), "prefs")
            assert mine is not None and mine.value == {"drink": "tea"}

        # Deleting a thread deletes its checkpoints with us.
        say("threads.delete()", await client.threads.delete(tid))
        async with ours(memory_url) as memory:
            assert (
                await memory.checkpointer.aget_tuple({"configurable": {"thread_id": tid}}) is None
            )
            config = {"configurable": {"thread_id": copy["thread_id"]}}
            assert await memory.checkpointer.aget_tuple(config) is not None  # the copy stays

        # Our classes served it, and the server found every method it looks for (else it
        # logs "Custom checkpointer missing <method>" and degrades that feature).
        server_log = log.read_text(errors="replace")
        assert "Using custom checkpointer: Async" in server_log
        assert "Using custom store:" in server_log
        assert "Custom checkpointer missing" not in server_log

    text = "\n".join(say.lines)
    print(text)
    if path := os.environ.get("LGMP_SERVER_TRANSCRIPT"):
        with open(path, "a") as f:
            f.write(text + "\n\n")


async def wait_until_running(client: Any, thread_id: str, run_id: str) -> None:
    """Until the run has started (bounded): rolling back a pending run proves less."""
    for _ in range(100):
        if (await client.runs.get(thread_id, run_id))["status"] == "running":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} did not start within 10 s")


@pytest.mark.storage
@pytest.mark.langgraph_server
async def test_multitask_strategies_with_the_fence_on(memory_url: str, tmp_path: Path) -> None:
    """The server's four multitask strategies on a saver with ``fence=True``: each run
    takes its thread's fence as it starts (the thread's owner afterwards is the run that
    ran last), and each strategy gives what it gives without the fence."""
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import ConflictError, NotFoundError

    backend = memory_url.split(":", 1)[0]
    say = Transcript(f"{backend}, fence on")
    wait = {"messages": [{"role": "human", "content": "wait"}]}
    slow = {"messages": [{"role": "human", "content": "slow"}]}
    fast = {"messages": [{"role": "human", "content": "fast"}]}

    async def owner(tid: str) -> str | None:
        async with ours(memory_url) as memory:
            state = await memory.checkpointer.fence.aget(tid)
        return None if state is None else state.owner

    with langgraph_dev(tmp_path, memory_url, {"fence": True}) as (base, log):
        client = get_client(url=base)

        async def started(text: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            tid = (await client.threads.create())["thread_id"]
            first = await client.runs.create(tid, "agent", input=text)
            await wait_until_running(client, tid, first["run_id"])
            return tid, first

        # reject: the second run is refused; the first ends and owns the thread
        tid, first = await started(wait)
        with pytest.raises(ConflictError):
            await client.runs.create(tid, "agent", input=fast, multitask_strategy="reject")
        say("runs.create(multitask_strategy='reject')", "409 Conflict")
        await client.runs.join(tid, first["run_id"])
        state = say("threads.get_state()", await client.threads.get_state(tid))
        assert messages(state["values"]) == ["wait", "echo: wait"]
        assert (await owner(tid) or "").startswith(f"run:{first['run_id']}@")

        # interrupt: the first run stops where it is; the second runs and owns the thread
        tid, first = await started(slow)
        second = await client.runs.create(tid, "agent", input=fast, multitask_strategy="interrupt")
        say("runs.join(interrupt)", await client.runs.join(tid, second["run_id"]))
        state = await client.threads.get_state(tid)
        assert messages(state["values"])[-2:] == ["fast", "echo: fast"]
        assert "echo: slow" not in messages(state["values"])
        assert (await client.runs.get(tid, first["run_id"]))["status"] == "interrupted"
        assert (await owner(tid) or "").startswith(f"run:{second['run_id']}@")

        # rollback: the first run and its checkpoints are gone; the second owns the thread
        tid, first = await started(slow)
        second = await client.runs.create(tid, "agent", input=fast, multitask_strategy="rollback")
        say("runs.join(rollback)", await client.runs.join(tid, second["run_id"]))
        with pytest.raises(NotFoundError):
            await client.runs.get(tid, first["run_id"])
        state = await client.threads.get_state(tid)
        assert messages(state["values"]) == ["fast", "echo: fast"]
        assert (await owner(tid) or "").startswith(f"run:{second['run_id']}@")

        # enqueue: the second runs after the first, on what it left
        tid, first = await started(wait)
        second = await client.runs.create(tid, "agent", input=fast, multitask_strategy="enqueue")
        await client.runs.join(tid, first["run_id"])
        say("runs.join(enqueue)", await client.runs.join(tid, second["run_id"]))
        state = await client.threads.get_state(tid)
        assert messages(state["values"]) == ["wait", "echo: wait", "fast", "echo: fast"]
        assert (await owner(tid) or "").startswith(f"run:{second['run_id']}@")

        server_log = log.read_text(errors="replace")
        assert "Using custom checkpointer: Async" in server_log
    print("\n".join(say.lines))


# -- the environment server.py reads (no server needed) ------------------------------------


def test_a_server_without_a_url_fails_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGGRAPH_MEMORY_URL", raising=False)
    with pytest.raises(InvalidConfigError, match="LANGGRAPH_MEMORY_URL is not set"):
        server.memory_from_env()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"serde": "x"}', "serde cannot be given"),
        ('{"keep_lst": 2}', "unknown option 'keep_lst'"),
        ('{"index": {"dims": 3, "embed": "missing.py:f"}}', "names no file: missing.py"),
    ],
)
def test_bad_options_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, options: str, error: str
) -> None:
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", f"sqlite:///{tmp_path / 'm.db'}")
    monkeypatch.setenv("LANGGRAPH_MEMORY_OPTIONS", options)
    with pytest.raises(InvalidConfigError, match=error):
        server.memory_from_env()


async def test_the_options_and_an_embedding_file_reach_the_saver_and_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "embed.py").write_text(
        "def embed(texts):\n    return [[float(t.count(c)) for c in 'ab'] for t in texts]\n"
    )
    index = {"dims": 2, "embed": f"{tmp_path / 'embed.py'}:embed", "fields": ["text"]}
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", f"sqlite:///{tmp_path / 'm.db'}?keep_last=1")
    monkeypatch.setenv("LANGGRAPH_MEMORY_OPTIONS", json.dumps({"index": index}))
    async with server.store() as store:
        await store.aput(("u",), "a", {"text": "aaa"})
        await store.aput(("u",), "b", {"text": "bbb"})
        assert [i.key for i in await store.asearch(("u",), query="b")] == ["b", "a"]
    async with server.checkpointer() as saver:
        assert isinstance(saver, AsyncSqliteSaver)
        for step in range(3):  # keep_last=1 from the URL: one checkpoint stays
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            checkpoint = {**empty_checkpoint(), "id": f"{step:032d}"}
            await saver.aput(config, checkpoint, {"step": step}, {})
        assert len([c async for c in saver.alist({"configurable": {"thread_id": "t"}})]) == 1
    monkeypatch.setenv("LANGGRAPH_MEMORY_OPTIONS", '{"index": {"embed": "openai:small"}}')
    assert server.options_from_env()["index"]["embed"] == "openai:small"  # for LangGraph
