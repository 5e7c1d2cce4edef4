"""Memory tools: let the agent add, update, delete and search the user's memories itself.

``create_memory_tools(namespace=("memories", "{user_id}"))`` returns four LangChain tools
for any agent (``create_react_agent``, ``create_agent``, a ``ToolNode``). They find the
store and the user the way the other nodes do (the graph's store, the runtime context or
``config["configurable"]``), and:

* scan content (and the id an add gives it, shown with it) before storing it
  (:mod:`.scanning`), and optionally ask a model too
  (``model_check``): the model often copies the user's words verbatim, and a memory is
  pasted into later conversations;
* show found memories as quoted data in a delimited block (:mod:`.quoting`), never as
  text the model could take for instructions;
* normalize keys the model picks (no ``/``, no control characters, lower case), and make
  one up when it gives none;
* never raise into the graph: a refusal, a missing item or a store failure comes back as
  a tool message with ``status="error"``, which the model can read and act on.

Search is semantic when the store has an index (``index={"embed": ..., "fields":
["content"]}``) and a keyword match otherwise (:mod:`.keywords`: character bigrams for
Chinese, Japanese and Korean; a memory is shown only when it really matches).

``schema=`` (a pydantic model) makes the memories structured records, such as the
passengers a user books for: ``add_memory`` and ``update_memory`` take a ``record`` of
that model (the model sees its fields in the tools' argument schema; invalid records are
refused, nothing saved). ``add_memory`` also takes ``metadata`` (a flat JSON object, e.g.
``{"kind": "passenger"}``), which ``search_memories`` can filter on.
"""

from __future__ import annotations

import json
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
from pydantic import BaseModel, Field, ValidationError, create_model

from ..drivers.plan import Plan
from ..errors import InvalidConfigError
from ..messages import _text
from ..store.base import ConditionalPutOp
from ..store.namespaces import MEMORIES
from . import keywords
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
KEYWORD_POOL = 1000
"""Without an index, search ranks at most this many of the newest memories by keywords."""
MAX_METADATA_KEYS = 16
MAX_METADATA_CHARS = 1000

_KEY_SEPARATORS = re.compile(r"[/\\\s]+")


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


Metadata = dict[str, str | int | float | bool | None]
_METADATA_FIELD = Field(
    default=None,
    description='Optional labels for the memory, a flat JSON object such as {"kind": "passenger"}.',
)


class AddMemory(BaseModel):
    content: str = Field(description="The fact to remember, as one short self-contained sentence.")
    key: str | None = Field(
        default=None, description="Optional short id for the memory; one is made up if omitted."
    )
    metadata: Metadata | None = _METADATA_FIELD


class UpdateMemory(BaseModel):
    key: str = Field(description="The id of the memory to change (as search_memories shows it).")
    content: str = Field(description="The new text of the memory.")


class DeleteMemory(BaseModel):
    key: str = Field(description="The id of the memory to delete (as search_memories shows it).")


class SearchMemories(BaseModel):
    query: str = Field(description="What to look for, in a few words (a name, a word).")
    limit: int = Field(default=5, ge=1, le=50, description="At most this many memories.")
    metadata: Metadata | None = Field(
        default=None, description="Only memories whose metadata has these values."
    )


def record_schemas(schema: type[BaseModel]) -> tuple[type[BaseModel], type[BaseModel]]:
    """The argument schemas of ``add_memory`` and ``update_memory`` for records of
    ``schema``: the record is one nested argument, so the model sees the schema's fields,
    types and descriptions as they are."""
    record = (schema, Field(description=f"The {schema.__name__} record to remember."))
    add = create_model(
        "AddMemory",
        record=record,
        key=(str | None, AddMemory.model_fields["key"]),
        metadata=(Metadata | None, _METADATA_FIELD),
    )
    update = create_model(
        "UpdateMemory",
        key=(str, UpdateMemory.model_fields["key"]),
        record=(schema, Field(description=f"The whole new {schema.__name__} record.")),
    )
    return add, update


def _content(value: Any) -> Any:
    return value.get("content", value) if isinstance(value, Mapping) else value


def _searchable(item: Any) -> str:
    """The text keyword search reads: the content, and the metadata's values."""
    content = _content(item.value)
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    metadata = item.value.get("metadata") if isinstance(item.value, Mapping) else None
    if isinstance(metadata, Mapping):
        text += " " + " ".join(str(v) for v in metadata.values())
    return text


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
    schema: type[BaseModel] | None = None
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
        if self.schema is not None and args.get("record") is not None:
            return self._record(args["record"])[0]  # validated and scanned, or refused
        text = str(args.get("content", "")).strip()
        if not text or len(text) > self.max_content_chars or self.scanner.scan(text):
            return None
        key = normalize_key(args.get("key")) if action == "add" else None
        if key is None:
            return text
        if self.scanner.scan(key.replace("-", " ")):
            return None  # refused by the plan
        return f"{text}\n(id: {key})"  # the id is shown with it, so judged with it

    def _record(self, record: Any) -> tuple[str, dict[str, Any]]:
        """A record validated against the schema, and its text (compact JSON, what the
        scanner checks, search reads and the profile injector shows)."""
        assert self.schema is not None
        try:
            model = self.schema.model_validate(
                record.model_dump() if isinstance(record, BaseModel) else record
            )
        except ValidationError as exc:
            raise self._fail(
                "invalid",
                f"Error: not a valid {self.schema.__name__} record "
                f"({exc.error_count()} problems: {_problems(exc)}). Nothing was saved.",
            ) from exc
        data = model.model_dump(mode="json")
        text = self._checked_content(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        return text, data

    def _metadata(self, metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Metadata as stored: a small flat JSON object of scalars, scanned like content
        (it reaches the model in search results)."""
        if metadata is None:
            return None
        plain = dict(metadata)
        text = json.dumps(plain, ensure_ascii=False)
        scalars = all(v is None or isinstance(v, (str, int, float, bool)) for v in plain.values())
        if not scalars or len(plain) > MAX_METADATA_KEYS or len(text) > MAX_METADATA_CHARS:
            raise self._fail(
                "invalid",
                f"Error: metadata must be a flat JSON object of at most {MAX_METADATA_KEYS} "
                f"keys and {MAX_METADATA_CHARS} characters. Nothing was saved.",
            )
        findings = self.scanner.scan(text)
        if findings:
            log_refusal("memory tool metadata", findings)
            raise self._fail(
                "refused",
                "Error: refused to store this memory: its metadata reads like instructions "
                "to the assistant. Nothing was saved.",
            )
        return plain

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
        self,
        namespace: Namespace,
        conditional: bool,
        content: str | None = None,
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        record: Any = None,
    ) -> Plan[Step, str]:
        """Create-only: an existing id is reported, not overwritten, so a model that
        reuses an id by accident cannot silently replace an older memory. Atomic
        (``expected_version=0``) on stores with versions."""
        value: dict[str, Any] = {}
        if self.schema is not None:
            content, value["record"] = self._record(record)
        text = self._checked_content(content or "")
        labels = self._metadata(metadata)
        if labels is not None:
            value["metadata"] = labels
        chosen = self._key(key) if key is not None and normalize_key(key) else new_key()
        # the id is shown with the memory in search results: "ignore-all-previous-..."
        # is an instruction too
        self._refuse(self.scanner.scan(chosen.replace("-", " ")))
        now = self._now()
        value = {"content": text, **value, "created_at": now, "updated_at": now}
        put = PutOp(namespace, chosen, value, index=["content"])
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
        self,
        namespace: Namespace,
        conditional: bool,
        key: str,
        content: str | None = None,
        record: Any = None,
    ) -> Plan[Step, str]:
        """Read-modify-write with the store's conditional put: ``created_at`` survives,
        and an update racing another one is retried on the winner's value."""
        chosen = self._key(key)
        fields: dict[str, Any] = {}
        if self.schema is not None:
            content, fields["record"] = self._record(record)
        text = self._checked_content(content or "")
        now = self._now()

        def change(current: Mapping[str, Any] | None) -> dict[str, Any] | Unchanged:
            if current is None:
                raise self._fail("missing", f"Error: there is no memory with id {chosen!r}.")
            if _content(current) == text:
                return Unchanged(dict(current))
            return {**current, "content": text, **fields, "updated_at": now}

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
        self,
        namespace: Namespace,
        indexed: bool,
        query: str,
        limit: int = 5,
        metadata: Mapping[str, Any] | None = None,
    ) -> Plan[Step, str]:
        """Semantic on an indexed store; otherwise the newest :data:`KEYWORD_POOL`
        memories that match the query's words (:func:`.keywords.rank`), best first.
        Results that read like instructions are left out, whatever wrote them."""
        flt = {"metadata": dict(metadata)} if metadata else None
        if indexed:
            op = SearchOp(namespace, filter=flt, query=query, limit=limit)
        else:
            op = SearchOp(namespace, filter=flt, limit=KEYWORD_POOL)
        (items,) = self._ok((yield StoreCall((op,))))
        ranked = (
            [(item, item.score) for item in items]
            if indexed
            else [(hit.item, hit.score) for hit in keywords.rank(items, _searchable, query, limit)]
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
        except InvalidConfigError as exc:  # a bad user id, or a run naming two users
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
            run,
            arun,
            name,
            description,
            args_schema=schema,
            handle_tool_error=True,
            handle_validation_error=_invalid_arguments,
        )


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()[:5]
    )


def _invalid_arguments(exc: Exception) -> str:
    """A tool call whose arguments fail the schema: what is wrong, for the model to fix."""
    detail = _problems(exc) if isinstance(exc, ValidationError) else type(exc).__name__
    return f"Error: invalid arguments ({detail}). Nothing was changed."


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


MEMORIES_NAMESPACE = MEMORIES  # declared in store.namespaces, which erasure reads
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
    schema: type[BaseModel] | None = None,
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
        schema: a pydantic model for structured memories (passengers, say): ``add_memory``
            and ``update_memory`` then take a validated ``record`` instead of ``content``.
        model_check: asked about every add/update whose content (and an add's id,
            which search results show with it) passes the scanner's rules
            (:class:`.scanning.ModelCheck`: the app's chat model or any callable, with a
            timeout, failing closed or open); refusals come back like the rules'.

    Returns ``[add_memory, update_memory, delete_memory, search_memories]``. A memory is
    stored as ``{"content": ..., "created_at": ..., "updated_at": ...}``, plus
    ``"metadata"`` when given and, with a schema, ``"record"`` (the validated record as
    JSON; ``content`` is then its compact JSON text). The profile injector shows such
    items' ``content`` when given their namespace as a source.
    """
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise InvalidConfigError(f"schema must be a pydantic model class, got {schema!r}")
    tools = MemoryTools(NamespaceTemplate(namespace), store, scanner or DEFAULT_SCANNER, timeout,
                        max_content_chars, stats or Stats(), clock, schema,
                        model_check)  # fmt: skip
    specs = list(_TOOLS)
    if schema is not None:
        add, update = record_schemas(schema)
        specs[0] = (*specs[0][:2], add, specs[0][3])
        specs[1] = (*specs[1][:2], update, specs[1][3])
    return [tools.tool(*spec) for spec in specs]
