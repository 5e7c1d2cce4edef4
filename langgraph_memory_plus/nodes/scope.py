"""Whose memory a node works on: user ids, namespace templates, and the store to use.

A node serves many users with one graph, so the namespace is a template such as
``("users", "{user_id}")``, filled per run from what the caller passed: the runtime
context (``graph.invoke(..., context={"user_id": ...})``, the newer LangGraph API) or
``config["configurable"]`` (the older one, and what LangMem reads). The store is the one
given to the component, else the graph's (``compile(store=...)``), found through the
runtime exactly as ``get_store()`` finds it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict, Unpack

from ..checkpoint.context import run_value
from ..errors import InvalidConfigError
from ..store.namespaces import fill_namespace

Namespace = tuple[str, ...]


class MissingScopeError(InvalidConfigError):
    """A namespace template needs a value (``user_id``) that the run did not provide."""


class NamespaceTemplate:
    """A namespace whose labels may name run values: ``("users", "{user_id}")``.

    Placeholders are plain names (no attribute access, indexing or format specs), so a
    template can never reach into objects; values must be non-empty strings or integers.
    """

    def __init__(self, template: Sequence[str]) -> None:
        if isinstance(template, str) or not template:
            raise InvalidConfigError(
                f"a namespace template is a non-empty tuple of labels, got {template!r}"
            )
        fields: set[str] = set()
        for label in template:
            if not isinstance(label, str) or not label:
                raise InvalidConfigError(f"namespace labels must be non-empty strings: {label!r}")
            for _, name, spec, conversion in string.Formatter().parse(label):
                if name is None:
                    continue
                if not name.isidentifier() or spec or conversion:
                    raise InvalidConfigError(
                        f"namespace placeholders are plain names like {{user_id}}; got "
                        f"{label!r} in {tuple(template)!r}"
                    )
                fields.add(name)
        self.template: Namespace = tuple(template)
        self.fields = frozenset(fields)

    def resolve(self, scope: Scope) -> Namespace:
        """The namespace for this run; :class:`MissingScopeError` names a missing value."""
        values = {name: scope.value(name) for name in self.fields}
        missing = sorted(name for name, value in values.items() if value is None)
        if missing:
            raise MissingScopeError(
                f"namespace {self.template!r} needs {', '.join(missing)}: pass it in the "
                "runtime context (invoke(..., context={...})) or in config['configurable']"
            )
        # The shared encoding (``.`` and ``%`` percent-encoded): erasure finds the same label.
        return fill_namespace(self.template, cast("dict[str, str | int]", values))

    def __repr__(self) -> str:
        return f"NamespaceTemplate({self.template!r})"


def _usable(value: Any) -> str | int | None:
    """A context value usable in a namespace: a non-empty string or an int (not a bool)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip():
        return value
    return None


@dataclass(frozen=True)
class Scope:
    """What one run provides: its store (if any), context and configurable values."""

    store: BaseStore | None
    context: Any = None
    configurable: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] | None = None
    """The config's ``metadata`` (LangGraph copies ``configurable`` values there)."""

    def value(self, name: str) -> str | int | None:
        """``name`` by the one rule the saver also follows
        (:func:`~langgraph_memory_plus.checkpoint.context.run_value`): the runtime context
        (a mapping or an object), ``configurable`` and the config's ``metadata`` must agree
        where more than one names it, so a node's namespace is the user the thread is
        filed under."""
        return _usable(
            run_value(
                name,
                configurable=self.configurable,
                metadata=self.metadata,
                context=self.context,
                user=name == "user_id",
            )
        )

    @property
    def thread_id(self) -> str | None:
        value = (self.configurable or {}).get("thread_id")
        return None if value is None else str(value)


def _current_runtime() -> Runtime[Any] | None:
    try:
        return get_runtime()
    except (RuntimeError, KeyError):  # not inside a graph run
        return None


def _current_config() -> RunnableConfig | None:
    try:
        return get_config()
    except RuntimeError:
        return None


def current_scope(
    *,
    store: BaseStore | None = None,
    default_store: BaseStore | None = None,
    config: RunnableConfig | None = None,
    context: Any = None,
    runtime: Runtime[Any] | None = None,
) -> Scope:
    """The scope of the current call, explicit arguments first.

    Store: ``store`` (passed to this call), else ``default_store`` (given to the
    component), else the graph's. Context and config: the arguments, else the running
    graph's. Outside a graph run only the arguments count.
    """
    runtime = runtime if runtime is not None else _current_runtime()
    if config is None:
        config = _current_config()
    chosen = store if store is not None else default_store
    if chosen is None and runtime is not None:
        chosen = runtime.store
    if context is None and runtime is not None:
        context = runtime.context
    configurable = (config or {}).get("configurable") or {}
    metadata = (config or {}).get("metadata") or {}
    return Scope(store=chosen, context=context, configurable=configurable, metadata=metadata)


class ScopeArgs(TypedDict, total=False):
    """Where a call runs, for calls made outside a graph run or to override the graph's:
    a ``store``, the ``config`` (its ``configurable`` values), the runtime ``context``,
    or a LangGraph ``runtime`` (what nodes and middleware receive)."""

    store: BaseStore | None
    config: RunnableConfig | None
    context: Any
    runtime: Runtime[Any] | None


class Scoped:
    """Base of the components: a default store, and the scope of each call."""

    store: BaseStore | None = None

    def scope(self, **args: Unpack[ScopeArgs]) -> Scope:
        """This call's scope; the component's own store unless the call names one."""
        return current_scope(default_store=self.store, **args)
