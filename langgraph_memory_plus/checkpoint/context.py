"""Indexed keys (the user key) given only as the run's runtime context.

LangGraph >= 0.6 runs a graph with ``graph.invoke(inputs, config, context=Context(...))``;
the context is not ``configurable``, so LangGraph does not copy it into the checkpoint
metadata the index reads. It does reach the checkpointer: the loop hands ``put`` the
run's config, whose ``configurable`` carries the run's ``Runtime`` under
``__pregel_runtime`` (``langgraph._internal._constants.CONFIG_KEY_RUNTIME``, private but
stable: every node reads its runtime from there).

:class:`ContextKeysSaver` lifts each indexed key that ``configurable`` and the config's
``metadata`` lack from that context into ``configurable`` before the put is encoded, so
the checkpoint's metadata carries it exactly as if it had been passed in
``configurable``: ``list(filter=...)``, the index, sessions, ownership checks and
erasure then all agree on whose thread it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from ..drivers.plan import Plan
from .config import Target
from .fence import Claim
from .saver import CheckpointSaverBase

RUNTIME = "__pregel_runtime"


def context_value(context: Any, key: str) -> Any:
    """``key`` of a runtime context: a dict / TypedDict, a dataclass, a pydantic model or
    any object with that attribute; ``None`` when it has none."""
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get(key)
    return getattr(context, key, None)


def with_context_keys(config: RunnableConfig, keys: Sequence[str]) -> RunnableConfig:
    """``config`` with the ``keys`` it lacks taken from its run's runtime context.

    Only scalar values are lifted (what LangGraph copies from ``configurable`` into
    metadata); ``configurable`` and the config's ``metadata`` win over the context. The
    config is returned unchanged (the same object) when nothing is lifted.
    """
    configurable = config.get("configurable") or {}
    context = getattr(configurable.get(RUNTIME), "context", None)
    if context is None:
        return config
    given = config.get("metadata") or {}
    lifted = {}
    for key in keys:
        if key in configurable or key in given:
            continue
        value = context_value(context, key)
        if isinstance(value, (str, int, float, bool)):
            lifted[key] = value
    if not lifted:
        return config
    return {**config, "configurable": {**configurable, **lifted}}


class ContextKeysSaver(CheckpointSaverBase):
    """A saver whose puts read indexed keys from the runtime context too (module doc)."""

    def _put_plan(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[Plan[Any, None], RunnableConfig, Callable[[], None], Target, Claim | None]:
        config = with_context_keys(config, self.settings.index_keys)
        return super()._put_plan(config, checkpoint, metadata, new_versions)

    def _put_writes_plan(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        claim: Claim | None = None,
    ) -> Plan[Any, None]:
        # Only the per-tenant key reads the user of a write (see ``_user_of``).
        if self.encryption is not None and self.encryption.tenant_keys is not None:
            config = with_context_keys(config, self.settings.index_keys)
        return super()._put_writes_plan(config, writes, task_id, task_path, claim)
