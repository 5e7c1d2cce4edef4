"""Every ```python block of README.md and of the docs/*.md pages runs, as written, on this
test run's servers.

The blocks are read from README.md, then from each page of docs/ (by name), in order. An
HTML comment on the line right before a block says how it runs (a reader of the rendered
page does not see it):

- ``<!-- readme-test: prelude=builder,memory -->``: the block is a fragment that uses names
  it does not define (``builder``, ``saver``, ``model``...); the named preludes of
  :data:`PRELUDES` define them first. A chat model is a fake from ``langchain_core``.
- ``<!-- readme-test: skip REASON -->``: not run; the reason is in the test id and the
  skip message. Keep these rare.

Without a comment, a block runs alone in a fresh namespace. "As written" means only
placeholders change: the pages' example URLs become this run's PostgreSQL (``pg_url``)
and Redis (``redis_url``), ``LANGGRAPH_MEMORY_URL`` names that PostgreSQL, and the
Prometheus port 9464 becomes 0 (any free port). A block with top-level ``await`` or
``async with`` (an async fragment) runs on an event loop, and an ``async def main()``
that a block defines is run after it.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
import itertools
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import as_url

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The reference pages the docs site builds (mkdocs.yml); their blocks drift like the README's.
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")

pytestmark = pytest.mark.storage


@dataclass
class Block:
    """One ```python block: in which file, where it starts, under which heading, and how to
    run it."""

    source: str
    line: int
    heading: str
    code: str
    preludes: list[str] = field(default_factory=list)
    skip: str | None = None

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")[:40]
        name = f"L{self.line}-{slug}"
        if self.source != "README.md":
            name = re.sub(r"[^a-z0-9]+", "-", self.source.lower()).strip("-") + "-" + name
        if self.skip:
            name += "-skip-" + re.sub(r"[^a-z0-9]+", "-", self.skip.lower()).strip("-")
        return name


def read_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The python blocks of ``text`` (the file ``source``) with the directives of the comment
    above each."""
    blocks: list[Block] = []
    lines = text.splitlines()
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.lstrip("#").strip()
        if line.strip() == "```python":
            start = i
            i += 1
            body: list[str] = []
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            block = Block(source, start + 1, heading, "\n".join(body) + "\n")
            found = MARKER.fullmatch(lines[start - 1].strip()) if start else None
            if found:
                directive = found.group(1)
                if directive.startswith("skip"):
                    block.skip = directive[4:].strip() or "no reason given"
                elif directive.startswith("prelude="):
                    block.preludes = [p.strip() for p in directive[8:].split(",") if p.strip()]
                else:
                    raise ValueError(f"{source}:{start}: unknown readme-test directive")
            blocks.append(block)
        elif line.strip().startswith("```"):  # another language: skip to its end
            i += 1
            while lines[i].strip() != "```":
                i += 1
        i += 1
    return blocks


BLOCKS = read_blocks(README.read_text(encoding="utf-8")) + [
    block
    for page in DOCS
    for block in read_blocks(page.read_text(encoding="utf-8"), f"docs/{page.name}")
]


# --------------------------------------------------------------------------------------------
# Preludes: the names fragments use
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What a prelude may use: the servers, and a stack closed after the block."""

    pg: str
    redis: str
    stack: ExitStack


def fake_chat_model(*replies: str) -> Any:
    """``GenericFakeChatModel`` answering ``replies`` in turn, forever; tools are accepted
    (and never called), as ``create_agent`` binds them."""
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class FakeChat(GenericFakeChatModel):
        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

    return FakeChat(messages=itertools.cycle([AIMessage(r) for r in replies]))


def prelude_builder(ns: dict[str, Any], run: Run) -> None:
    """``builder``: a one-node chat graph (uncompiled); ``inputs`` and ``config``."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    ns.update(
        builder=builder,
        inputs={"messages": [("user", "hi")]},
        config={"configurable": {"thread_id": "readme-1", "user_id": "u1"}},
    )


def prelude_url(ns: dict[str, Any], run: Run) -> None:
    """``url``: the PostgreSQL of this test run."""
    ns["url"] = run.pg


def prelude_memory(ns: dict[str, Any], run: Run) -> None:
    """``memory`` (``from_url`` on the PostgreSQL, open), its ``saver`` and ``store``."""
    from langgraph_memory_plus import from_url

    memory = run.stack.enter_context(from_url(run.pg))
    ns.update(memory=memory, saver=memory.checkpointer, store=memory.store)


def prelude_chat_model(ns: dict[str, Any], run: Run) -> None:
    """``model`` and ``cheap_model`` (fakes), ``tools``, a ``messages`` list, ``inputs``."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import tool

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"facts about {query}"

    messages = [SystemMessage("Be brief.", id="sys")]
    for k in range(30):
        messages += [HumanMessage(f"question {k}", id=f"q{k}"), AIMessage(f"answer {k}")]
    ns.update(
        model=fake_chat_model("Noted."),
        cheap_model=fake_chat_model("A summary."),
        tools=[lookup],
        messages=messages,
        inputs={"messages": [("user", "My name is Ada and I prefer a window seat.")]},
    )


def prelude_embed(ns: dict[str, Any], run: Run) -> None:
    """``embed``: deterministic fake embeddings of 384 dimensions (words hashed into them)."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * 384
            for word in text.lower().split():
                vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 384] += 1.0
            vectors.append(vector)
        return vectors

    ns["embed"] = embed


def prelude_web(ns: dict[str, Any], run: Run) -> None:
    """``app`` (a web framework's: ``@app.get(path)`` registers a route) and ``User``."""

    class App:
        def __init__(self) -> None:
            self.routes: dict[str, Callable[..., Any]] = {}

        def get(self, path: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def register(fn: Callable[..., Any]) -> Callable[..., Any]:
                self.routes[path] = fn
                return fn

            return register

    @dataclass
    class User:
        id: str

    ns.update(app=App(), User=User)


def prelude_booking(ns: dict[str, Any], run: Run) -> None:
    """``model`` asking to book the flight named in the message; the ``book_flight`` tool."""
    from approvals_support import BookingModel
    from langchain_core.tools import tool

    @tool
    def book_flight(flight: str, seat: str) -> str:
        """Book a flight."""
        return f"booked {flight} seat {seat}"

    ns.update(model=BookingModel(), book_flight=book_flight)


def prelude_drafts(ns: dict[str, Any], run: Run) -> None:
    """``Cancellation``: the draft schema of the example."""
    from pydantic import BaseModel

    class Cancellation(BaseModel):
        flight: str
        passport_number: str
        refund_method: str

    ns["Cancellation"] = Cancellation


def prelude_migration(ns: dict[str, Any], run: Run) -> None:
    """``old_url`` (LangGraph's own PostgresSaver, set up, with a thread) and ``new_url``."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import START, MessagesState, StateGraph

    builder = StateGraph(MessagesState)
    builder.add_node("chat", lambda state: {"messages": [AIMessage("hello")]})
    builder.add_edge(START, "chat")
    with PostgresSaver.from_conn_string(run.pg) as old:
        old.setup()
        builder.compile(checkpointer=old).invoke(
            {"messages": [("user", "hi")]}, {"configurable": {"thread_id": "readme-old"}}
        )
    ns.update(old_url=run.pg, new_url=run.pg)


PRELUDES: dict[str, Callable[[dict[str, Any], Run], None]] = {
    "builder": prelude_builder,
    "url": prelude_url,
    "memory": prelude_memory,
    "chat_model": prelude_chat_model,
    "embed": prelude_embed,
    "web": prelude_web,
    "booking": prelude_booking,
    "drafts": prelude_drafts,
    "migration": prelude_migration,
}


# --------------------------------------------------------------------------------------------
# Running a block
# --------------------------------------------------------------------------------------------


def placeholders(pg: str, redis: str) -> list[tuple[str, str]]:
    """The README's example addresses and what they become here, longest first."""
    return [
        ("postgresql://user:pass@host:5432/app", pg),
        ("postgresql://user:pass@host/app", pg),
        ("postgresql://dba@db/app", pg),
        ("postgresql://...", pg),
        ("redis://localhost:6379/0", redis),
        ("start_http_server(9464,", "start_http_server(0,"),
    ]


def execute(code: str, ns: dict[str, Any], filename: str) -> None:
    """Run ``code`` in ``ns``; top-level ``await`` on an event loop, then ``main()``."""
    compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, ns))  # the README's own code, nothing else
    else:
        exec(compiled, ns)  # the README's own code, nothing else
    main = ns.get("main")
    if inspect.iscoroutinefunction(main) and "def main" in code:
        asyncio.run(main())


@pytest.fixture
def isolated() -> Iterator[None]:
    """Leaves logging levels and the global node listeners as they were."""
    from langgraph_memory_plus.observability import core

    logger = logging.getLogger("langgraph_memory_plus")
    level, listeners = logger.level, core._global
    try:
        yield
    finally:
        logger.setLevel(level)
        core._global = listeners


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block_runs(
    block: Block,
    pg_url: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    isolated: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if block.skip:
        pytest.skip(block.skip)
    pg = as_url(pg_url)
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", pg)
    code = block.code
    for placeholder, here in placeholders(pg, redis_url):
        code = code.replace(placeholder, here)
    unknown = [name for name in block.preludes if name not in PRELUDES]
    where = f"{block.source}:{block.line}"
    assert not unknown, f"{where}: no prelude {unknown}; have {sorted(PRELUDES)}"
    with ExitStack() as stack:
        ns: dict[str, Any] = {"__name__": f"readme_L{block.line}"}
        run = Run(pg, redis_url, stack)
        for name in block.preludes:
            PRELUDES[name](ns, run)
        execute(code, ns, where)


def test_the_readme_has_python_blocks_and_few_skips() -> None:
    assert len([b for b in BLOCKS if b.source == "README.md"]) >= 15
    assert {"docs/servers.md"} <= {b.source for b in BLOCKS}
    skipped = [b for b in BLOCKS if b.skip]
    assert len(skipped) <= 2, [b.id for b in skipped]


def test_the_block_reader() -> None:
    text = "# T\n<!-- readme-test: prelude=a,b -->\n```python\nx = 1\n```\n```sh\nls\n```\n"
    text += "<!-- readme-test: skip needs a GPU -->\n```python\ny\n```\n"
    first, second = read_blocks(text)
    assert (first.line, first.preludes, first.code) == (3, ["a", "b"], "x = 1\n")
    assert second.skip == "needs a GPU" and second.id == "L10-t-skip-needs-a-gpu"
    (page,) = read_blocks(text.split("```sh")[0], "docs/cli.md")
    assert page.id == "docs-cli-md-L3-t"
