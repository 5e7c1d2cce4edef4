"""Memory tools: let the agent add, update, delete and search the user's memories itself.

``create_memory_tools(namespace=("memories", "{user_id}"))`` returns four LangChain tools
for any agent (``create_react_agent``, ``create_agent``, a ``ToolNode``). They find the
store and the user the way the other nodes do (the graph's store, the runtime context or
``config["configurable"]``), and:

* scan content before storing it (:mod:`.scanning`), and optionally ask a model too
  (``model_check``): the model often copies the user's words verbatim, and a memory is
  pasted into later conversations;
* show found memories as quoted data in a delimited block (:mod:`.quoting`), never as
  text the model could take for instructions;
* normalize keys the model picks (no ``/``, no control characters, lower case), and make
  one up when it gives none;
* never raise into the graph: a refusal, a missing item or a store failure comes back as
  a tool message with ``status="error"``, which the model can read and act on.

Search is semantic when the store has an index (``index={"embed": ..., "fields":
["content"]}``) and a plain keyword match otherwise.
"""

from __future__ import annotations

import logging
import re
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from pydantic import BaseModel, Field

from .. import _text
from .._plan import Plan
from ..store.base import ConditionalPutOp
from ..store.namespaces import declare_user_data
from ._store import (
    Stats,
    Step,
    StoreCall,
    StoreFailure,
    StoreRunner,
    Unchanged,
    read_modify_write,
    supports_versions,
)
from .preferences import _now
from .quoting import block, neutralize
from .scanning import DEFAULT_SCANNER, Finding, ModelCheck, Scanner, log_refusal
from .scope import MissingScopeError, Namespace, NamespaceTemplate, current_scope

logger = logging.getLogger(__name__)

MAX_KEY_CHARS = 128
KEYWORD_POOL = 200
"""Without an index, search ranks at most this many of the newest memories by keywords."""

_KEY_SEPARATORS = re.compile(r"[/\\\s]+")
_WORD = re.compile(r"\w{3,}")


def normalize_key(raw: str | None) -> str | None:
    """A memory key that is safe and stable: ``None`` when nothing usable is left.

    Unicode compatibility forms are folded, control and invisible characters dropped,
    slashes, backslashes and whitespace become ``-``, and the result is lower case and at
    most :data:`MAX_KEY_CHARS` long. So ``"Seat / Pref\\n"`` and ``"seat-pref"`` name the
    same memory, and a key can never look like a path.
    """
    if raw is None:
        return None
    text = _KEY_SEPARATORS.sub("-", unicodedata.normalize("NFKC", str(raw)).strip())
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")
    text = text.strip("-").casefold()
    return _text.head(text, MAX_KEY_CHARS) or None


def new_key() -> str:
    """A fresh memory id, for memories added without a key."""
    return f"mem-{uuid.uuid4().hex[:16]}"


class AddMemory(BaseModel):
    content: str = Field(description="The fact to remember, as one short self-contained sentence.")
    key: str | None = Field(
        default=None, description="Optional short id for the memory; one is made up if omitted."
    )


class UpdateMemory(BaseModel):
    key: str = Field(description="The id of the memory to change (as search_memories shows it).")
    content: str = Field(description="The new text of the memory.")


class DeleteMemory(BaseModel):
    key: str = Field(description="The id of the memory to delete (as search_memories shows it).")


class SearchMemories(BaseModel):
    query: str = Field(description="What to look for, in a few words.")
    limit: int = Field(default=5, ge=1, le=50, description="At most this many memories.")


def _keyword_rank(items: Sequence[Any], query: str, limit: int) -> list[tuple[Any, float]]:
    """Items whose content shares words with ``query``, best first (newest on ties)."""
    wanted = {w.casefold() for w in _WORD.findall(query)}
    if not wanted:
        return [(item, 0.0) for item in items[:limit]]
    scored = []
    for item in items:
        words = {w.casefold() for w in _WORD.findall(str(_content(item.value)))}
        score = len(wanted & words) / len(wanted)
        if score:
            scored.append((item, score))
    scored.sort(key=lambda pair: -pair[1])  # stable: the store's recency order on ties
    return scored[:limit]


def _content(value: Any) -> Any:
    return value.get("content", value) if isinstance(value, Mapping) else value


@dataclass
class MemoryTools:
    """The implementation behind :func:`create_memory_tools` (one plan per tool)."""

    namespace: NamespaceTemplate
    store: BaseStore | None
    scanner: Scanner
    timeout: float | None
    max_content_chars: int
    stats: Stats
    clock: Callable[[], datetime]
    model_check: ModelCheck | None = None

    # -- checks -------------------------------------------------------------------------

    def _fail(self, event: str, message: str) -> ToolException:
        self.stats.incr(event)
        return ToolException(message)

    def _checked_content(self, content: str) -> str:
        text = content.strip()
        if not text:
            raise self._fail("invalid", "Error: the memory is empty; nothing was saved.")
        if len(text) > self.max_content_chars:
            raise self._fail(
                "invalid",
                f"Error: the memory is {len(text)} characters long; keep it under "
                f"{self.max_content_chars}. Nothing was saved.",
            )
        self._refuse(self.scanner.scan(text))
        return text

    def _refuse(self, findings: list[Finding]) -> None:
        if findings:
            log_refusal("memory tool", findings)
            raise self._fail(
                "refused",
                "Error: refused to store this memory: it reads like instructions to the "
                f"assistant ({', '.join(sorted({str(f) for f in findings}))}), not a fact "
                "about the user. Nothing was saved.",
            )

    def _judged(self, action: str, args: dict[str, Any]) -> str | None:
        """The content to ask :attr:`model_check` about: a write whose text passes the
        rules (anything else is refused by the plan without a model call)."""
        if self.model_check is None or action not in ("add", "update"):
            return None
        text = str(args.get("content", "")).strip()
        if not text or len(text) > self.max_content_chars or self.scanner.scan(text):
            return None
        return text

    def _key(self, raw: str) -> str:
        key = normalize_key(raw)
        if key is None:
            raise self._fail("invalid", f"Error: {raw!r} is not a usable memory id.")
        return key

    def _ok(self, result: Any) -> Any:
        if isinstance(result, StoreFailure):
            self.stats.incr("store_errors")
            logger.warning("memory tool: store call failed: %s", result.describe())
            raise ToolException(f"Error: the memory store is unavailable ({result.describe()}).")
        return result

    def _now(self) -> str:
        return self.clock().isoformat().replace("+00:00", "Z")

    # -- plans ----------------------------------------------------------------------------

    def add(
        self, namespace: Namespace, conditional: bool, content: str, key: str | None = None
    ) -> Plan[Step, str]:
        """Create-only: an existing id is reported, not overwritten, so a model that
        reuses an id by accident cannot silently replace an older memory. Atomic
        (``expected_version=0``) on stores with versions."""
        text = self._checked_content(content)
        chosen = self._key(key) if key is not None and normalize_key(key) else new_key()
        now = self._now()
        put = PutOp(namespace, chosen, {"content": text, "created_at": now, "updated_at": now},
                    index=["content"])  # fmt: skip
        if conditional:  # create-only, atomically
            written = yield StoreCall((ConditionalPutOp(put, 0),))
            taken = isinstance(written, StoreFailure) and written.conflict
        else:
            (item,) = self._ok((yield StoreCall((GetOp(namespace, chosen),))))
            taken = item is not None
            written = None if taken else (yield StoreCall((put,)))
        if taken:
            raise self._fail(
                "exists",
                f"Error: a memory with id {chosen!r} already exists; use update_memory to "
                "change it. Nothing was saved.",
            )
        self._ok(written)
        self.stats.incr("added")
        return f"Saved memory {chosen!r}."

    def update(
        self, namespace: Namespace, conditional: bool, key: str, content: str
    ) -> Plan[Step, str]:
        """Read-modify-write with the store's conditional put: ``created_at`` survives,
        and an update racing another one is retried on the winner's value."""
        chosen = self._key(key)
        text = self._checked_content(content)
        now = self._now()

        def change(current: Mapping[str, Any] | None) -> dict[str, Any] | Unchanged:
            if current is None:
                raise self._fail("missing", f"Error: there is no memory with id {chosen!r}.")
            if _content(current) == text:
                return Unchanged(dict(current))
            return {**current, "content": text, "updated_at": now}

        self._ok(
            (
                yield from read_modify_write(
                    namespace,
                    chosen,
                    change,
                    conditional=conditional,
                    index=["content"],
                    stats=self.stats,
                )
            )
        )
        self.stats.incr("updated")
        return f"Updated memory {chosen!r}."

    def delete(self, namespace: Namespace, conditional: bool, key: str) -> Plan[Step, str]:
        """Delete by id; an unknown id is reported, so the model learns it was wrong
        (deleting is what was asked even if the memory changed meanwhile, so the delete
        itself is unconditional)."""
        chosen = self._key(key)
        (item,) = self._ok((yield StoreCall((GetOp(namespace, chosen),))))
        if item is None:
            raise self._fail("missing", f"Error: there is no memory with id {chosen!r}.")
        self._ok((yield StoreCall((PutOp(namespace, chosen, None),))))
        self.stats.incr("deleted")
        return f"Deleted memory {chosen!r}."

    def search(
        self, namespace: Namespace, indexed: bool, query: str, limit: int = 5
    ) -> Plan[Step, str]:
        """Semantic on an indexed store; otherwise the newest :data:`KEYWORD_POOL`
        memories ranked by shared words. Results that read like instructions are left
        out, whatever wrote them."""
        if indexed:
            op = SearchOp(namespace, query=query, limit=limit)
        else:
            op = SearchOp(namespace, limit=KEYWORD_POOL)
        (items,) = self._ok((yield StoreCall((op,))))
        ranked = (
            [(item, item.score) for item in items]
            if indexed
            else _keyword_rank(items, query, limit)
        )
        lines = []
        for item, score in ranked:
            content = _content(item.value)
            if self.scanner.scan_value(content):
                self.stats.incr("unsafe_results")
                continue
            shown = "" if score is None else f" (score {score:.2f})"
            lines.append(f"- [{neutralize(item.key)}] {neutralize(str(content))}{shown}")
        self.stats.incr("searched")
        if not lines:
            return "No memories found."
        origin = "memories saved with add_memory in earlier conversations"
        return f"Found {len(lines)} memories:\n" + block(origin, lines)

    # -- running ------------------------------------------------------------------------

    def _start(
        self, action: str, config: RunnableConfig, args: dict[str, Any]
    ) -> tuple[Plan[Step, str], StoreRunner]:
        scope = current_scope(default_store=self.store, config=config)
        if scope.store is None:
            raise self._fail("no_store", "Error: no memory store is configured.")
        try:
            namespace = self.namespace.resolve(scope)
        except MissingScopeError as exc:
            self.stats.incr("no_user")
            raise ToolException(f"Error: cannot tell whose memories these are ({exc}).") from exc
        if action == "search":
            flag = getattr(scope.store, "index_config", None) is not None
        else:
            flag = supports_versions(scope.store)
        plan: Plan[Step, str] = getattr(self, action)(namespace, flag, **args)
        return plan, StoreRunner(scope.store, timeout=self.timeout, stats=self.stats)

    @contextmanager
    def _reported(self, action: str) -> Iterator[None]:
        """Whatever goes wrong comes back to the model as an error tool message: a tool
        must not raise into the graph. Expected trouble is already a ``ToolException``;
        anything else is a bug, logged in full and reported without details."""
        try:
            yield
        except ToolException:
            raise
        except Exception as exc:
            self.stats.incr("errors")
            logger.exception("memory tool %s failed", action)
            raise ToolException(f"Error: {action} failed ({type(exc).__name__}).") from exc

    def tool(self, action: str, name: str, schema: type[BaseModel], description: str) -> BaseTool:
        """One tool: a sync and an async body around the same plan."""

        def run(config: RunnableConfig, **args: Any) -> str:
            with self._reported(action):
                judged = self._judged(action, args)
                if judged is not None and self.model_check is not None:
                    self._refuse(self.model_check.check(judged))
                plan, runner = self._start(action, config, args)
                return runner.run(plan)

        async def arun(config: RunnableConfig, **args: Any) -> str:
            with self._reported(action):
                judged = self._judged(action, args)
                if judged is not None and self.model_check is not None:
                    self._refuse(await self.model_check.acheck(judged))
                plan, runner = self._start(action, config, args)
                return await runner.arun(plan)

        # positional: func, coroutine, name, description
        return StructuredTool.from_function(
            run, arun, name, description, args_schema=schema, handle_tool_error=True
        )


_TOOLS: tuple[tuple[str, str, type[BaseModel], str], ...] = (
    (
        "add",
        "add_memory",
        AddMemory,
        "Remember a lasting fact or preference the user stated about themselves, for future "
        "conversations. Returns the memory's id.",
    ),
    (
        "update",
        "update_memory",
        UpdateMemory,
        "Replace the text of an existing memory (find its id with search_memories).",
    ),
    (
        "delete",
        "delete_memory",
        DeleteMemory,
        "Delete a memory that is wrong or that the user asked to forget.",
    ),
    (
        "search",
        "search_memories",
        SearchMemories,
        "Search what you remember about the user. Returns memories with their ids.",
    ),
)
"""(plan method, tool name, argument schema, description) per tool."""


MEMORIES_NAMESPACE = declare_user_data("create_memory_tools", ("memories", "{user_id}"))
"""Where the memory tools keep memories by default (``erase_user`` erases it)."""


def create_memory_tools(
    namespace: Sequence[str] = MEMORIES_NAMESPACE,
    *,
    store: BaseStore | None = None,
    scanner: Scanner | None = None,
    timeout: float | None = 5.0,
    max_content_chars: int = 2000,
    stats: Stats | None = None,
    clock: Callable[[], datetime] = _now,
    model_check: ModelCheck | None = None,
) -> list[BaseTool]:
    """Tools to add, update, delete and search memories under ``namespace``.

    Args:
        namespace: where memories live; placeholders come from the runtime context or
            ``config["configurable"]`` of the run calling the tool.
        store: a store to use instead of the graph's.
        scanner: refuses instruction-like content; default rules otherwise.
        timeout: seconds per store call before the tool reports the store unavailable.
        max_content_chars: longest memory accepted.
        stats: counters (``added``, ``refused``, ``store_errors``, ...) to share.
        clock: time source for ``created_at``/``updated_at``.
        model_check: asked about every add/update whose content passes the scanner's
            rules (:class:`.scanning.ModelCheck`: the app's chat model or any callable,
            with a timeout, failing closed or open); refusals come back like the rules'.

    Returns ``[add_memory, update_memory, delete_memory, search_memories]``. A memory is
    stored as ``{"content": ..., "created_at": ..., "updated_at": ...}``; the profile
    injector shows such items' ``content`` when given their namespace as a source.
    """
    tools = MemoryTools(NamespaceTemplate(namespace), store, scanner or DEFAULT_SCANNER, timeout,
                        max_content_chars, stats or Stats(), clock, model_check)  # fmt: skip
    return [tools.tool(*spec) for spec in _TOOLS]
