"""Search filters: parsed once into a small tree, evaluated in Python or compiled by a backend.

The meaning is ``InMemoryStore``'s, which LangGraph documents as the reference:

- ``{"field": value}`` compares ``item.value.get("field")`` with Python ``==`` semantics
  (``1 == 1.0 == True``; a missing field equals ``None``). A dict as the value matches
  nested fields (the item's dict may have more keys); a list matches element-wise.
- ``{"field": {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": x, ...}}`` applies every operator.
  ``$eq``/``$ne`` use ``==``. The order operators compare *as numbers*, in double precision:
  JSON numbers, booleans (0/1), and strings that Python's ``float()`` reads (``" 12 "``,
  ``"1e3"``). This is where we differ from ``InMemoryStore``, on purpose: where it raises
  (a missing field, a word, a list), the item simply does not match.

A backend pushes what it can into its query. Where it cannot decide an item exactly (the
PostgreSQL store leaves exotic numeric strings such as ``"1_000"`` or ``"inf"`` undecided)
it asks :func:`holds`, which is the definition.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import MemoryPlusError

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
OPERATORS = ("$eq", "$ne", *COMPARISONS)


class InvalidFilterError(MemoryPlusError, ValueError):
    """A filter uses an unknown operator or an operand that cannot be compared."""


@dataclass(frozen=True)
class Equals:
    """``value == operand`` (``operand`` is plain JSON: lists, dicts, scalars)."""

    operand: Any


@dataclass(frozen=True)
class NotEquals:
    """``value != operand``."""

    operand: Any


@dataclass(frozen=True)
class Compare:
    """``float(value) <op> number``; values that are not numbers never match."""

    op: str
    number: float


@dataclass(frozen=True)
class Fields:
    """Each named field matches its condition; ``nested`` also requires a dict value."""

    fields: tuple[tuple[str, Cond], ...]
    nested: bool


@dataclass(frozen=True)
class Elements:
    """A list of exactly these many elements, each matching its condition."""

    items: tuple[Cond, ...]


@dataclass(frozen=True)
class AllOf:
    """Every condition holds (the operators of one ``{"$gt": .., "$lt": ..}`` dict)."""

    conds: tuple[Cond, ...]


Cond = Equals | NotEquals | Compare | Fields | Elements | AllOf


def as_number(value: Any) -> float | None:
    """What ``float(value)`` gives for a JSON value, or ``None`` where it would raise."""
    if isinstance(value, (bool, int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _plain(operand: Any) -> Any:
    """An operand as plain JSON (tuples become lists), or :class:`InvalidFilterError`."""
    if operand is None or isinstance(operand, (str, bool, int)):
        return operand
    if isinstance(operand, float):
        if not math.isfinite(operand):
            raise InvalidFilterError(f"cannot compare stored values with {operand!r}")
        return operand
    if isinstance(operand, (list, tuple)):
        return [_plain(x) for x in operand]
    if isinstance(operand, Mapping):
        if not all(isinstance(k, str) for k in operand):
            raise InvalidFilterError(f"filter dict keys must be strings, got {operand!r}")
        return {k: _plain(v) for k, v in operand.items()}
    raise InvalidFilterError(f"filter operands must be JSON values, got {type(operand).__name__}")


def _operator(op: str, operand: Any) -> Cond:
    if op == "$eq":
        return Equals(_plain(operand))
    if op == "$ne":
        return NotEquals(_plain(operand))
    if op in COMPARISONS:
        number = as_number(operand)
        if number is None:
            raise InvalidFilterError(f"{op} needs a number, got {operand!r}")
        return Compare(op, number)
    raise InvalidFilterError(f"Unsupported operator: {op!r}; use one of {', '.join(OPERATORS)}")


def _cond(pattern: Any) -> Cond:
    if isinstance(pattern, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in pattern):
            return AllOf(tuple(_operator(op, arg) for op, arg in pattern.items()))
        return _fields(pattern, nested=True)
    if isinstance(pattern, (list, tuple)):
        return Elements(tuple(_cond(x) for x in pattern))
    return Equals(_plain(pattern))


def _fields(pattern: Mapping[Any, Any], *, nested: bool) -> Fields:
    for key in pattern:
        if not isinstance(key, str):
            raise InvalidFilterError(f"filter keys must be strings, got {key!r}")
    return Fields(tuple((key, _cond(sub)) for key, sub in pattern.items()), nested)


def parse_filter(filter: Any) -> Fields | None:
    """Check a ``SearchOp.filter`` and build its tree; ``None`` for no filter."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping):
        raise InvalidFilterError(f"filter must be a dict, got {type(filter).__name__}")
    return _fields(filter, nested=False) if filter else None


def holds(cond: Cond, value: Any) -> bool:
    """Whether ``value`` (a decoded JSON value, ``None`` if missing) satisfies ``cond``."""
    if isinstance(cond, Equals):
        return bool(value == cond.operand)
    if isinstance(cond, NotEquals):
        return bool(value != cond.operand)
    if isinstance(cond, Compare):
        number = as_number(value)
        return number is not None and COMPARISONS[cond.op](number, cond.number)
    if isinstance(cond, Fields):
        if not isinstance(value, dict):
            return False
        return all(holds(sub, value.get(key)) for key, sub in cond.fields)
    if isinstance(cond, Elements):
        return (
            isinstance(value, list)
            and len(value) == len(cond.items)
            and all(holds(sub, item) for sub, item in zip(cond.items, value, strict=True))
        )
    return all(holds(sub, value) for sub in cond.conds)
