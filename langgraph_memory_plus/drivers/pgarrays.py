"""One-dimensional ``text[]`` and ``bytea[]`` parameters, dumped without psycopg's list
adaptation.

psycopg adapts a ``list`` parameter by scanning it for an element to pick a dumper, then
dumping it element by element through generic, nested-list-aware code: the arrays of a
checkpoint put (its blobs' channels, versions, types and bytes, its list items, ...)
were about a fifth of a short turn's extra client CPU over a featureless saver. A
:class:`TextArray` or :class:`ByteaArray` says its type up front and is written straight
into PostgreSQL's binary array format, one ``struct.pack`` per element.

Wrap a list in one and send it as a binary placeholder (``%b`` or ``%(name)b``), cast as
before (``%(ids)b::bytea[]``). The dumpers are registered with psycopg's global adapters,
which connections made later copy, and on each connection a runner borrows that was made
before this module was imported (see :func:`ready`).
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar

import psycopg
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.pq import Format

TEXT_ARRAY_OID = 1009
BYTEA_ARRAY_OID = 1001
TEXT_OID = 25
BYTEA_OID = 17

_HEAD = struct.Struct(">iiIii")  # dimensions, has nulls, element type; length, lower bound
_EMPTY = struct.Struct(">iiI")
_LENGTH = struct.Struct(">i")
_NULL = _LENGTH.pack(-1)


class _Array:
    """A list of one element type, to be sent as a one-dimensional array."""

    __slots__ = ("items",)
    element_oid: ClassVar[int]

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = list(items)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Array) and type(other) is type(self) and other.items == self.items

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it wraps


class TextArray(_Array):
    """``text[]``: ``str`` elements (or ``None``)."""

    __slots__ = ()
    element_oid = TEXT_OID


class ByteaArray(_Array):
    """``bytea[]``: ``bytes`` elements (or ``None``)."""

    __slots__ = ()
    element_oid = BYTEA_OID


def _pack(parts: list[bytes | None], element_oid: int) -> bytes:
    """The binary array of already encoded elements (``None``: NULL)."""
    if not parts:
        return _EMPTY.pack(0, 0, element_oid)
    nulls = 0
    out = [_HEAD.pack(1, 0, element_oid, len(parts), 1)]
    for part in parts:
        if part is None:
            nulls = 1
            out.append(_NULL)
        else:
            out.append(_LENGTH.pack(len(part)))
            out.append(part)
    if nulls:
        out[0] = _HEAD.pack(1, 1, element_oid, len(parts), 1)
    return b"".join(out)


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = TEXT_ARRAY_OID

    def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
        super().__init__(cls, context)
        # binary text goes in the client's encoding, as psycopg's own str dumper sends it
        encoding = self.connection.info.encoding if self.connection is not None else "utf-8"
        self._encoding = "utf-8" if encoding == "ascii" else encoding

    def dump(self, obj: TextArray) -> bytes:
        enc = self._encoding
        return _pack([None if s is None else s.encode(enc) for s in obj.items], TEXT_OID)


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = BYTEA_ARRAY_OID

    def dump(self, obj: ByteaArray) -> bytes:
        return _pack([None if b is None else bytes(b) for b in obj.items], BYTEA_OID)


def _register(adapters: Any) -> None:
    adapters.register_dumper(TextArray, _TextArrayDumper)
    adapters.register_dumper(ByteaArray, _ByteaArrayDumper)


_register(psycopg.adapters)
_READY: weakref.WeakSet[Any] = weakref.WeakSet()


def ready(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Make sure ``conn`` dumps the arrays here: connections made before this module was
    imported copied the global adapters without them. Once per connection."""
    if conn not in _READY:
        _register(conn.adapters)
        _READY.add(conn)
