"""Whose run it is: one rule for the user key, and indexed keys given only as the
run's runtime context.

**One rule** (:func:`run_value`): a run names its user in ``configurable``, in the
config's ``metadata`` or in its runtime context; every component (the thread index and
its sessions, transcript lines, erasure, the memory nodes' namespaces, the draft tools,
the approvals queue) asks this module, so they never disagree on whose run it is. Where
the places that name it agree (or only one does), that is the user; where two name
different users the run is refused with :class:`InvalidConfigError` before anything of it
is stored (its first put fails), because whichever one won, part of the run's data would
be filed under the other user, where that user's sessions and ``erase_user`` would find it.


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
from ..errors import InvalidConfigError
from ..threads.core import check_user_id, index_value
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


def run_value(
    key: str,
    *,
    configurable: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    context: Any = None,
    user: bool = True,
) -> Any:
    """The run's value of ``key`` (``user_id``), by the one rule (module docstring).

    ``None`` when no place names it. Places that name it must agree (compared as the
    index stores values); a user id (``user``) is checked by :func:`check_user_id`.
    """
    # ``is None``, not ``or {}``: LangGraph's ``configurable`` is a ChainMap, whose truth
    # test is a Python-level scan (every put and put_writes asks)
    given = (
        None if configurable is None else configurable.get(key),
        None if metadata is None else metadata.get(key),
        context_value(context, key),
    )
    found: list[tuple[int, Any]] = []
    for place, value in enumerate(given):
        if value is None or (user and value == ""):
            # "": no user (the LangGraph server passes it for an unauthenticated run)
            continue
        if user:
            try:
                value = check_user_id(value)
            except InvalidConfigError:  # refused again, now naming where it was found
                value = check_user_id(value, _where(place, key))
        found.append((place, value))
    if not found:
        return None
    first_place, first = found[0]
    for place, value in found[1:]:
        # 5 and "5" are one user (erasure of "5" covers both forms)
        same = str(value) == str(first) if user else index_value(value) == index_value(first)
        if not same:
            raise InvalidConfigError(
                f"{_where(first_place, key)} and {_where(place, key)} name different users: "
                "pass the user in one place (or the same one in both)"
            )
    return first


def _where(place: int, key: str) -> str:
    """Where :func:`run_value` found ``key`` (its ``place``-th place), for an error: built
    only when one is raised (a put asks for the user of every call)."""
    if place == 0:
        return f"config['configurable'][{key!r}]"
    if place == 1:
        return f"config['metadata'][{key!r}]"
    return f"the runtime context's {key}"


def config_value(config: RunnableConfig | None, key: str, user: bool = True) -> Any:
    """:func:`run_value` of a config as the saver receives it (its runtime context is
    ``configurable['__pregel_runtime']``)."""
    configurable = (config or {}).get("configurable")
    context = None if configurable is None else getattr(configurable.get(RUNTIME), "context", None)
    return run_value(
        key,
        configurable=configurable,
        metadata=(config or {}).get("metadata"),
        context=context,
        user=user,
    )


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


def run_metadata(
    config: RunnableConfig, metadata: CheckpointMetadata, user_key: str | None
) -> CheckpointMetadata:
    """A put's metadata with its user as the one rule says (:func:`run_value`).

    LangGraph merges the config's ``metadata`` over ``configurable`` into a checkpoint's
    metadata and strips NUL from strings; the user key is decided here instead, so it is
    the run's user (or the put is refused) whatever the merge did.
    """
    if user_key is None:
        return metadata
    user = config_value(config, user_key)
    if user is None:
        given = metadata.get(user_key)
        if given is not None and given != "":  # "": no user, as in run_value
            check_user_id(given, f"metadata[{user_key!r}]")
        return metadata
    if metadata.get(user_key) == user:
        return metadata
    out: dict[str, Any] = {**metadata, user_key: user}
    return out  # type: ignore[return-value]


class ContextKeysSaver(CheckpointSaverBase):
    """A saver whose puts read indexed keys from the runtime context too, and take the
    user key by the one rule (module doc)."""

    def _put_plan(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        whole: bool = False,
    ) -> tuple[Plan[Any, None], RunnableConfig, Callable[[], None], Target, Claim | None]:
        keys = self.settings.index_keys
        user_key = keys[0] if keys else None
        metadata = run_metadata(config, metadata, user_key)
        config = with_context_keys(config, keys)
        plan, stored_config, stored, target, claim = super()._put_plan(
            config, checkpoint, metadata, new_versions, whole
        )
        owner = None if user_key is None else index_value(metadata.get(user_key))
        if owner is None:
            return plan, stored_config, stored, target, claim
        refused: list[bool] = []

        def checked() -> Plan[Any, None]:
            written = self._plans.unless_erased(owner, plan, target, checkpoint["id"])
            if (yield from written) is False:
                refused.append(True)

        def after() -> None:
            if refused:  # nothing of it is stored: the lists and lines it had are not
                self._lists.forget_lists(target.thread_key)
            else:
                stored()

        return checked(), stored_config, after, target, claim

    def _put_writes_plan(
        self,
        config: RunnableConfig,
        target: Target,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        claim: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Any, None]:
        """``owner``: ignored, the run's user is read from ``config`` here."""
        keys = self.settings.index_keys
        # Only the per-tenant key reads the user of a write (see ``_user_of``).
        if self.encryption is not None and self.encryption.tenant_keys is not None:
            config = with_context_keys(config, keys)
        owner = index_value(config_value(config, keys[0])) if keys else None
        plan = super()._put_writes_plan(config, target, writes, task_id, task_path, claim, owner)
        if owner is None:  # no erasure hold to check: the write's plan as it is
            return plan
        assert target.checkpoint_id is not None  # a write names its checkpoint
        return _none(self._plans.unless_erased(owner, plan, target, target.checkpoint_id))


def _none(plan: Plan[Any, Any]) -> Plan[Any, None]:
    yield from plan
