"""A cheaper floor for issue 39's long threads: reads that share no mutable container,
built without decoding a byte (``python -m benchmarks.long_floor`` runs it as
``fresh containers, shared leaves, checked puts``).

``lists.build_all`` rebuilds each message from msgpack: every string of every message
(its text, ids, model name...) is made anew at every read, though a string can never be
edited by a caller. Here a message's template is its *shape* (the nesting of its dicts
and lists, with their keys) and its *leaves* (the immutable scalars inside, kept as the
very objects). Each shape gets one generated Python function that builds the nested
containers around its leaves from dict and list displays, so a read makes only the
containers (the objects a caller could mutate) and the model instances, in
``map``-driven batches. Leaves must be exactly str, int, float, bool, None or bytes;
anything else falls back to ``lists.Template``.

The put check compares one flat list of every kept element's field objects with the one
recorded at the read or put (``list.__eq__``: identity first, then equality), instead of
``lists.unchanged_prefix``'s per-field ``operator.is_``. A field reassigned to an unequal
value is caught, as there; one reassigned to an *equal* value keeps the old template,
whose data equals it but may differ in type or order (``1`` for ``True``, a dict with its
keys reordered): slightly less than ours checks, so this floor sits a little below a
correct saver's. The generated functions are a measuring device: they are made from the
keys of the benchmark's own messages (written with ``repr``), and nothing of this module
is in the package. Written by the attacker of issue 39's bound (helper a-bound)."""

from __future__ import annotations

import copy
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import ChannelVersions, Checkpoint
from pydantic import BaseModel

from langgraph_memory_plus.checkpoint.lists import (
    Template,
    _collector_paused,
    _same_prefix,
    build_all,
)

from .long_floor import NoStorageSaver

_LEAVES = frozenset({str, int, float, bool, type(None), bytes})
_new = object.__new__
_set = object.__setattr__
_call: Callable[..., Any] = operator.call  # type: ignore[attr-defined]
_first, _second, _third = (operator.itemgetter(i) for i in range(3))


class _Refused(Exception):
    """Not plain data of immutable leaves."""


def _walk(value: Any, leaves: list[Any]) -> Any:
    """The shape of ``value`` (hashable), its leaves appended to ``leaves`` in order."""
    kind = type(value)
    if kind in _LEAVES:
        leaves.append(value)
        return None
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise _Refused
        return ("d", tuple((k, _walk(v, leaves)) for k, v in value.items()))
    if kind is list:
        return ("l", tuple(_walk(v, leaves) for v in value))
    raise _Refused


def _emit(lines: list[str], source: str, shape: Any, names: Iterator[int]) -> str:
    """Statements copying the container ``source`` (whose shape is ``shape``) and, in the
    copy, each container inside it; the name of the copy. A shallow ``copy()`` clones a
    dict's table in one step, faster than inserting its keys one by one."""
    name = f"v{next(names)}"
    lines.append(f"    {name} = {source}.copy()")
    tag, parts = shape
    keys = [(k, s) for k, s in parts] if tag == "d" else list(enumerate(parts))
    for key, sub in keys:
        if sub is not None:
            inner = _emit(lines, f"{name}[{key!r}]", sub, names)
            lines.append(f"    {name}[{key!r}] = {inner}")
    return name


_FUNCTIONS: dict[Any, Callable[[list[Any]], list[Any]]] = {}


def _function(shape: Any) -> Callable[[list[Any]], list[Any]]:
    made = _FUNCTIONS.get(shape)
    if made is None:
        lines = ["def build(t):"]
        name = _emit(lines, "t", shape, itertools.count())
        lines.append(f"    return {name}")
        scope: dict[str, Any] = {}
        exec("\n".join(lines) + "\n", scope)  # keys are written by repr()
        made = _FUNCTIONS[shape] = scope["build"]
    return made


class ShapeTemplate:
    """A model element as its plain data (a private deep copy, immutable leaves shared
    with every read) and the function copying its containers."""

    __slots__ = ("build", "data", "fields_set", "model")

    def __init__(self, value: BaseModel) -> None:
        data = [vars(value), value.__pydantic_extra__, value.__pydantic_private__]
        shape = _walk(data, [])
        self.build = _function(shape)
        self.data = copy.deepcopy(data)
        self.model = type(value)
        self.fields_set = frozenset(value.__pydantic_fields_set__)


_build_of = operator.attrgetter("build")
_data_of = operator.attrgetter("data")
_model_of = operator.attrgetter("model")
_fields_set_of = operator.attrgetter("fields_set")


def template_of(value: Any) -> Any:
    if isinstance(value, BaseModel) and type(value) is not BaseModel:
        try:
            return ShapeTemplate(value)
        except _Refused:
            pass
    return Template.of(value)


def build_shapes(templates: Sequence[Any], fields_set: type[set[str]] = set) -> list[Any]:
    if set(map(type, templates)) != {ShapeTemplate}:
        return [
            build_shapes([t], fields_set)[0] if type(t) is ShapeTemplate else build_all([t])[0]
            for t in templates
        ]
    # The collector paused as lists.build_all pauses it (the same rules, the same code).
    with _collector_paused(len(templates)):
        parts = list(map(_call, map(_build_of, templates), map(_data_of, templates)))
        out = list(map(_new, map(_model_of, templates)))
        any(map(_set, out, repeat("__dict__"), map(_first, parts)))
        fields = map(fields_set, map(_fields_set_of, templates))
        any(map(_set, out, repeat("__pydantic_fields_set__"), fields))
        any(map(_set, out, repeat("__pydantic_extra__"), map(_second, parts)))
        any(map(_set, out, repeat("__pydantic_private__"), map(_third, parts)))
    return out


_values_of: Callable[[Any], Iterable[Any]] = dict.values


def _flat_fields(objects: Sequence[Any]) -> list[Any]:
    """Every field object of every element, in order (elements keep them in __dict__)."""
    return list(chain.from_iterable(map(_values_of, map(vars, objects))))


def _same_fields(values: Sequence[Any], flat: list[Any], lengths: list[int]) -> bool:
    """Whether ``values`` hold the field objects recorded: same count per element, and
    the flat lists equal (identity, then equality, per field)."""
    fields = list(map(vars, values))
    if list(map(len, fields)) != lengths:
        return False
    return list(chain.from_iterable(map(_values_of, fields))) == flat


def _first_changed(values: Sequence[Any], flat: list[Any], lengths: list[int]) -> tuple[int, int]:
    """The first element of ``values`` whose fields are not the recorded ones, and where
    its fields start in ``flat`` (rare: a field was reassigned)."""
    at = 0
    for i, (value, n) in enumerate(zip(values, lengths, strict=False)):
        if len(vars(value)) != n or list(vars(value).values()) != flat[at : at + n]:
            return i, at
        at += n
    return len(values), at


class SharedLeavesSaver(NoStorageSaver):
    """The checked C-build floor's contract at less cost: reads build new containers and
    models around shared immutable leaves; a put keeps an element of the last list only
    while the list's prefix is the very objects of the last read or put and their fields
    still hold what they held then (compared all at once, :func:`_same_fields`)."""

    def __init__(self) -> None:
        super().__init__()
        # channel -> (objects, templates, flat fields, field counts)
        self._last: dict[str, tuple[list[Any], list[Any], list[Any], list[int]]] = {}

    def _store(self, checkpoint: Checkpoint, changed: ChannelVersions) -> Checkpoint:
        values = dict(checkpoint["channel_values"])
        for channel, value in values.items():
            if isinstance(value, list) and value and isinstance(value[0], BaseMessage):
                objects, templates, flat, lengths = self._last.get(channel, ([], [], [], []))
                if channel not in changed and templates:  # as long_floor.TemplateSaver
                    values[channel] = _Shapes(templates)
                    continue
                same = _same_prefix(value, objects)
                if same == len(lengths):
                    kept = len(flat)
                    if not _same_fields(value[:same], flat, lengths):
                        same, kept = _first_changed(value, flat, lengths)
                else:
                    kept = sum(lengths[:same])
                    if not _same_fields(value[:same], flat[:kept], lengths[:same]):
                        same, kept = _first_changed(value[:same], flat, lengths)
                new = value[same:]
                made = templates[:same] + [template_of(v) for v in new]
                self._last[channel] = (
                    list(value),
                    made,
                    flat[:kept] + _flat_fields(new),
                    lengths[:same] + list(map(len, map(vars, new))),
                )
                values[channel] = _Shapes(made)
        return {**checkpoint, "channel_values": values}

    def _read(self, checkpoint: Checkpoint) -> Checkpoint:
        values = dict(checkpoint["channel_values"])
        for channel, value in values.items():
            if isinstance(value, _Shapes):
                built = build_shapes(value)
                self._last[channel] = (
                    list(built),
                    list(value),
                    _flat_fields(built),
                    list(map(len, map(vars, built))),
                )
                values[channel] = built
        return {**checkpoint, "channel_values": values}


class _Shapes(list):  # type: ignore[type-arg]
    """A stored list value as its elements' shape templates."""
