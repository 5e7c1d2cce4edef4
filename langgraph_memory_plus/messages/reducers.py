"""State reducers: bounded message windows, de-duplication by id, and profile merging.

Each reducer is an object usable two ways:

* as the binary reducer LangGraph folds over writes, like ``add_messages``::

      messages: Annotated[list[BaseMessage], window_messages(max_turns=20)]

* in a ``DeltaChannel`` (only writes are checkpointed, state is rebuilt by replaying
  them), through ``.fold``, which takes a whole batch of writes::

      messages: Annotated[list[BaseMessage], DeltaChannel(window_messages(max_turns=20).fold)]

``fold(state, writes)`` is the left fold of the binary reducer over ``writes``, so
``fold(fold(s, xs), ys) == fold(s, xs + ys)`` holds by construction: replaying checkpointed
writes in larger batches rebuilds exactly the state the live run had. What the fold needs
from the binary step is determinism, which is why messages that arrive without an id get
one derived from their content and position instead of a random one.

All three honour ``RemoveMessage`` and ``REMOVE_ALL_MESSAGES``. A ``RemoveMessage`` for an
id that is not there is ignored rather than an error (``add_messages`` raises): a window
drops old messages on its own, so a later removal of one of them is not a mistake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, Generic, Literal, TypeVar

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ._core import Cuts, coerce_messages, derived_id, split_leading_system

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "Reducer",
    "dedupe_messages",
    "merge_messages",
    "merge_profile",
    "window_messages",
]


class Reducer(Generic[T]):
    """A named binary reducer with a batch form for ``DeltaChannel``.

    LangGraph compares channels' reducers by ``__name__`` and identity, so the object
    carries a name and ``fold`` is created once per reducer (a fresh bound method on every
    attribute access would make two channels built from the same reducer look different).
    """

    __name__: str

    def __init__(self, name: str, step: Callable[[T | None, Any], T], doc: str) -> None:
        self.__name__ = name
        self.__doc__ = doc
        self._step = step

    def __call__(self, left: T | None, right: Any) -> T:
        return self._step(left, right)

    @cached_property
    def fold(self) -> Callable[[T | None, Sequence[Any]], T]:
        """``(state, writes) -> state``: the batch reducer ``DeltaChannel`` calls."""

        def fold(state: T | None, writes: Sequence[Any]) -> T:
            value = self._step(state, [])
            for write in writes:
                value = self._step(value, write)
            return value

        fold.__name__ = f"{self.__name__}_fold"
        return fold

    def __repr__(self) -> str:
        return f"<reducer {self.__name__}>"


# ---------------------------------------------------------------------------------------------
# messages


def merge_messages(
    left: Any,
    right: Any,
    *,
    keep: Literal["last", "first"] = "last",
) -> list[BaseMessage]:
    """``add_messages`` semantics without its sharp edges; the base of the message reducers.

    Same as ``add_messages``: a message whose id is already present replaces it in place;
    ``RemoveMessage(id)`` deletes; ``RemoveMessage(REMOVE_ALL_MESSAGES)`` drops everything
    before it; a removal followed by a re-add of the same id in one update replaces in place.
    Different: unknown-id removals are ignored, missing ids are derived deterministically,
    inputs are never mutated, duplicate ids already in ``left`` collapse onto their first
    position, and with ``keep="first"`` an id already present keeps its first version (a
    re-delivered message is dropped).
    """
    base = coerce_messages(left) if left is not None else []
    updates = coerce_messages(right) if right is not None else []
    for k in range(len(updates) - 1, -1, -1):
        if isinstance(updates[k], RemoveMessage) and updates[k].id == REMOVE_ALL_MESSAGES:
            base, updates = [], updates[k + 1 :]
            break

    merged: list[BaseMessage] = []
    position: dict[str, int] = {}
    for message in _with_ids(base, None):
        assert message.id is not None
        if message.id in position:
            if keep == "first":
                continue
            merged[position[message.id]] = message
            continue
        position[message.id] = len(merged)
        merged.append(message)

    removed: set[str] = set()
    last_id = merged[-1].id if merged else None
    for message in _with_ids(updates, last_id):
        assert message.id is not None
        at = position.get(message.id)
        if isinstance(message, RemoveMessage):
            if at is None:
                logger.debug("ignoring removal of unknown message id %r", message.id)
            else:
                removed.add(message.id)
        elif at is None:
            position[message.id] = len(merged)
            merged.append(message)
        elif keep == "last" or message.id in removed:
            removed.discard(message.id)
            merged[at] = message
    if removed:
        merged = [m for m in merged if m.id not in removed]
    return merged


def _with_ids(messages: list[BaseMessage], previous_id: str | None) -> list[BaseMessage]:
    """The messages, each with an id (copies for those that had none)."""
    out: list[BaseMessage] = []
    for ordinal, message in enumerate(messages):
        if not message.id:
            message = message.model_copy(update={"id": derived_id(previous_id, message, ordinal)})
        previous_id = message.id
        out.append(message)
    return out


def _window_start(body: list[BaseMessage], max_messages: int | None, max_turns: int | None) -> int:
    """Where the kept suffix of ``body`` begins.

    By messages: the earliest safe start leaving at most ``max_messages``; when the newest
    tool-call group alone is longer, it is kept whole (dropping it would strand the agent
    mid-step). By turns: the ``max_turns``-th human message from the end, moved earlier to
    a safe start if a tool call straddles it.
    """
    cuts = Cuts(body)
    start = 0
    if max_messages is not None and len(body) > max_messages:
        wanted = cuts.next_start(len(body) - max_messages, human=False)
        if wanted is None or wanted == len(body):
            wanted = cuts.previous_start(len(body) - 1, human=False) or 0
        start = wanted
    if max_turns is not None:
        humans = [i for i, m in enumerate(body) if isinstance(m, HumanMessage)]
        if len(humans) > max_turns:
            # 0 is always a safe start, so there is one at or before any index
            start = max(start, cuts.previous_start(humans[-max_turns], human=False) or 0)
    return start


def window_messages(
    max_messages: int | None = None,
    *,
    max_turns: int | None = None,
    keep_system: bool = True,
) -> Reducer[list[BaseMessage]]:
    """A reducer that keeps only the most recent part of the conversation in state.

    Args:
        max_messages: keep at most this many messages (besides the leading system ones).
            The cut never falls between an AI tool call and its results, so fewer may be
            kept; the newest tool-call group is kept whole even when it alone is longer.
        max_turns: keep the last N turns (a turn starts at a human message).
        keep_system: keep the system messages at the head of the list outside the window.

    Use it when the checkpoint itself should stay small. To bound only what the model sees
    while keeping the full history, trim the model input instead (``Trimmer``).
    """
    if max_messages is None and max_turns is None:
        raise ValueError("window_messages needs max_messages or max_turns")
    for name, value in (("max_messages", max_messages), ("max_turns", max_turns)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")

    def step(left: list[BaseMessage] | None, right: Any) -> list[BaseMessage]:
        merged = merge_messages(left, right)
        head, body = split_leading_system(merged) if keep_system else ([], list(merged))
        start = _window_start(body, max_messages, max_turns)
        return [*head, *body[start:]] if start else merged

    limits = ", ".join(
        f"{k}={v}"
        for k, v in (("max_messages", max_messages), ("max_turns", max_turns))
        if v is not None
    )
    return Reducer(
        f"window_messages({limits})",
        step,
        f"Merge like add_messages, then keep a window of {limits} (leading system kept).",
    )


def dedupe_messages(keep: Literal["first", "last"] = "first") -> Reducer[list[BaseMessage]]:
    """A reducer that guarantees one message per id.

    ``keep="first"``: a message whose id is already in state is ignored, which makes
    re-delivered writes (a retried node, a stream replayed after a reconnect) harmless.
    ``keep="last"``: the newer version replaces the old one in place, as ``add_messages``
    does. Either way duplicates already present in state (say, from an ``Overwrite`` or an
    older schema that appended blindly) collapse onto their first position.
    """
    if keep not in ("first", "last"):
        raise ValueError(f"keep must be 'first' or 'last', got {keep!r}")

    def step(left: list[BaseMessage] | None, right: Any) -> list[BaseMessage]:
        return merge_messages(left, right, keep=keep)

    return Reducer(f"dedupe_messages(keep={keep!r})", step, "Merge messages, one per id.")


# ---------------------------------------------------------------------------------------------
# profiles


def _merge_profile_step(left: Mapping[str, Any] | None, right: Any) -> dict[str, Any]:
    value: dict[str, Any] = dict(left) if left is not None else {}
    updates = right if isinstance(right, list) else [right]
    for update in updates:
        if update is None:
            continue
        if isinstance(update, RemoveMessage):
            if update.id == REMOVE_ALL_MESSAGES:
                value = {}
            else:
                value.pop(str(update.id), None)
        elif isinstance(update, Mapping):
            value = _deep_merge(value, update)
        else:
            raise TypeError(
                "a profile update is a mapping, a RemoveMessage, None, or a list of them; "
                f"got {type(update).__name__}"
            )
    return value


def _deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in: nested mappings merge, ``None`` deletes a key.

    Builds new dicts along the changed paths and shares the untouched subtrees, so neither
    argument is ever modified (LangGraph keeps the previous value around).
    """
    out = dict(base)
    for key, new in update.items():
        if new is None:
            out.pop(key, None)
        elif isinstance(new, Mapping):
            old = out.get(key)
            out[key] = _deep_merge(old if isinstance(old, Mapping) else {}, new)
        else:
            out[key] = new
    return out


merge_profile: Reducer[dict[str, Any]] = Reducer(
    "merge_profile",
    _merge_profile_step,
    """Deep-merge profile updates: nested dicts merge, ``None`` deletes a key, lists and
    other values replace. ``RemoveMessage(REMOVE_ALL_MESSAGES)`` clears the profile and
    ``RemoveMessage(id=key)`` deletes a top-level key, the same reset idiom as for
    messages. Use as ``profile: Annotated[dict, merge_profile]``.""",
)
