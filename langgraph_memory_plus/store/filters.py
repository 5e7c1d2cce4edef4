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
- An order operator whose operand is an ISO 8601 date or datetime (``"2026-06-01"``,
  ``"2026-06-01T08:30:00+08:00"``, or a ``datetime``/``date`` object) compares *as
  instants*: the field must hold such a string too (anything else does not match). A date
  is its midnight, and a time without an offset is UTC, so ``"2026-06-01T08:00+08:00"``
  equals ``"2026-06-01"``. ``InMemoryStore`` compares the strings character by character,
  which agrees only while every string has one format and one offset; we compare the
  moments they name (the 180-day staleness check of memories written in different
  formats must not depend on how they were written). A numeric string (``"20260601"``)
  stays a number. ``$eq``/``$ne`` keep comparing strings, as everywhere else.

A backend pushes what it can into its query. Where it cannot decide an item exactly (the
PostgreSQL store leaves exotic numeric strings such as ``"1_000"`` or ``"inf"`` undecided)
it asks :func:`holds`, which is the definition.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from ..errors import MemoryPlusError

COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
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
class CompareTime:
    """``instant(value) <op> moment``; values that are not ISO dates never match."""

    op: str
    moment: datetime


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


Cond = Equals | NotEquals | Compare | CompareTime | Fields | Elements | AllOf

_ISO = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]{1,9}))?)?"
    r"(Z|z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?"
)
"""The ISO 8601 forms compared as instants: a calendar date, optionally a time (minutes
at least) with optional seconds, fraction and offset. Deliberately strict (no week or
ordinal dates, no surrounding spaces, ASCII digits only: ``\\d`` would take full-width
and Arabic-Indic digits, which PostgreSQL's pre-filter rules out), so that every backend
reads the same strings."""


def as_instant(value: Any) -> datetime | None:
    """The UTC instant an ISO 8601 date or datetime string names, else ``None``.

    A date is its midnight; a time without an offset is UTC. Fractions beyond
    microseconds are cut (as ``datetime`` keeps them)."""
    if not isinstance(value, str):
        return None
    m = _ISO.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = m.groups()
    try:
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone.utc,
        )
    except ValueError:  # 2026-02-30, 25:00
        return None
    if offset and offset not in "Zz":
        hours, minutes = int(offset[1:3]), int(offset[3:].lstrip(":") or 0)
        if hours > 23 or minutes > 59:
            return None
        shift = timedelta(hours=hours, minutes=minutes)
        try:
            moment = moment - shift if offset[0] == "+" else moment + shift
        except OverflowError:
            return None
    return moment


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
        if isinstance(operand, datetime):  # before date: a datetime is a date
            aware = operand if operand.tzinfo else operand.replace(tzinfo=timezone.utc)
            return CompareTime(op, aware.astimezone(timezone.utc))
        if isinstance(operand, date):
            midnight = datetime(operand.year, operand.month, operand.day, tzinfo=timezone.utc)
            return CompareTime(op, midnight)
        number = as_number(operand)
        if number is not None:
            return Compare(op, number)
        moment = as_instant(operand)
        if moment is None:
            raise InvalidFilterError(
                f"{op} needs a number or an ISO 8601 date or datetime, got {operand!r}"
            )
        return CompareTime(op, moment)
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
    if isinstance(cond, CompareTime):
        moment = as_instant(value)
        return moment is not None and COMPARISONS[cond.op](moment, cond.moment)
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
