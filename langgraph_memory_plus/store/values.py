"""Item values: checked, encoded as JSON text, decoded back; and the items stores return.

Values are JSON objects, as LangGraph documents. Anything JSON cannot say exactly is
refused here, before a backend sees it, with the path of the offending part: a non-string
dict key (JSON would silently turn ``1`` into ``"1"``), NaN or infinity, an object that is
not JSON at all, text that is not valid Unicode (a lone surrogate).

Two details keep values exact through PostgreSQL's ``jsonb``, which the other backends do
not mind:

- Floats are written in plain decimal with a fractional part. ``jsonb`` keeps numbers as
  ``numeric`` and prints ``1e16`` back as ``10000000000000000``, which Python reads as an
  int; ``10000000000000000.0`` comes back as the float it was. Floats of 2**53 and more
  are integers, and are written exactly, so they compare exactly with ints.
- ``jsonb`` cannot hold ``\\u0000``. With ``escape=True`` a string holding NUL (or the
  escape mark ``\\x01``) is stored as ``\\x01`` + the string with ``\\x01`` doubled and NUL
  written ``\\x01 0``. The mapping is one-to-one, so equality filters still work on the
  escaped form, and :func:`decode_value` restores the original.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

from langgraph.store.base import Item, SearchItem

from ..errors import MemoryPlusError

MARK = "\x01"
_UNESCAPE = re.compile("\x01(.)", re.DOTALL)
_EXACT_FLOAT = float(2**53)


class InvalidValueError(MemoryPlusError, TypeError, ValueError):
    """A value or key that the store cannot keep exactly; nothing was written.

    Both a ``TypeError`` (what ``json.dumps`` raises for such values) and a ``ValueError``,
    so existing ``except`` clauses for either keep working.
    """


class _Bad(Exception):
    """Internal: carries the path to the offending part up to :func:`encode_value`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


def escape_text(text: str) -> str:
    """The NUL-free form of ``text`` (itself when it holds neither NUL nor the mark)."""
    if "\x00" not in text and MARK not in text:
        return text
    return MARK + text.replace(MARK, MARK + MARK).replace("\x00", MARK + "0")


def unescape_text(text: str) -> str:
    """The inverse of :func:`escape_text`."""
    if not text.startswith(MARK):
        return text
    return _UNESCAPE.sub(lambda m: MARK if m[1] == MARK else "\x00", text[1:])


def float_text(number: float) -> str:
    """A float as exact-enough plain decimal JSON that ``numeric`` keeps a float."""
    if not math.isfinite(number):
        raise _Bad("NaN and infinity are not JSON numbers")
    if abs(number) >= _EXACT_FLOAT:
        return f"{int(number)}.0"
    text = float.__repr__(number)
    if "e" in text:
        text = format(Decimal(text), "f")
    return text if "." in text else text + ".0"


@dataclass(frozen=True)
class EncodedValue:
    """A value as JSON text; ``escaped`` says whether decoding must undo string escapes."""

    text: str
    escaped: bool
    size: int


class _Encoder:
    def __init__(self, escape: bool) -> None:
        self.escape = escape
        self.escaped = False
        self.parts: list[str] = []

    def string(self, text: str) -> None:
        if self.escape:
            safe = escape_text(text)
            if safe is not text:
                self.escaped = True
                text = safe
        self.parts.append(encode_basestring(text))

    def value(self, obj: Any) -> None:
        out = self.parts
        if isinstance(obj, str):
            self.string(obj)
        elif obj is None:
            out.append("null")
        elif obj is True:
            out.append("true")
        elif obj is False:
            out.append("false")
        elif isinstance(obj, int):
            try:
                out.append(int.__repr__(obj))
            except ValueError:
                raise _Bad("integer has too many digits") from None
        elif isinstance(obj, float):
            out.append(float_text(obj))
        elif isinstance(obj, Mapping):
            out.append("{")
            for i, (key, item) in enumerate(obj.items()):
                if not isinstance(key, str):
                    raise _Bad(f"dict keys must be strings, got {type(key).__name__} {key!r}")
                if i:
                    out.append(",")
                self.string(key)
                out.append(":")
                self._child(key, item)
            out.append("}")
        elif isinstance(obj, (list, tuple)):
            out.append("[")
            for i, item in enumerate(obj):
                if i:
                    out.append(",")
                self._child(i, item)
            out.append("]")
        else:
            raise _Bad(f"{type(obj).__name__} is not a JSON type")

    def _child(self, step: str | int, item: Any) -> None:
        try:
            self.value(item)
        except _Bad as bad:
            bad.path.append(f"[{step!r}]")
            raise


def _encode(value: Any, escape: bool) -> tuple[str, bool]:
    encoder = _Encoder(escape)
    try:
        encoder.value(value)
    except _Bad as bad:
        where = "value" + "".join(reversed(bad.path))
        raise InvalidValueError(f"{where}: {bad.reason}") from None
    except RecursionError:
        raise InvalidValueError("value is nested too deeply to store") from None
    return "".join(encoder.parts), encoder.escaped


def encode_value(value: Any, *, escape: bool) -> EncodedValue:
    """Check ``value`` (a dict of JSON) and encode it; raise :class:`InvalidValueError`."""
    if not isinstance(value, Mapping):
        raise InvalidValueError(
            f"item values must be dicts (JSON objects), got {type(value).__name__}"
        )
    text, escaped = _encode(value, escape)
    return EncodedValue(text, escaped, utf8_size(text, "value"))


def encode_json(value: Any, *, escape: bool) -> str:
    """Any JSON value (a filter operand) in exactly the form :func:`encode_value` stores."""
    return _encode(value, escape)[0]


def utf8_size(text: str, what: str) -> int:
    """Bytes of ``text`` in UTF-8; lone surrogates (not valid Unicode) are refused."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidValueError(
            f"{what} contains text that is not valid Unicode (a lone surrogate)"
        ) from None


def decode_value(obj: Any, escaped: bool) -> Any:
    """Undo :func:`encode_value`'s string escapes on a parsed value."""
    if not escaped:
        return obj
    if isinstance(obj, str):
        return unescape_text(obj)
    if isinstance(obj, dict):
        return {unescape_text(k): decode_value(v, True) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_value(v, True) for v in obj]
    return obj


class VersionedItem(Item):
    """An :class:`Item` that also says which write produced it.

    ``version`` changes on every write of the item (and never repeats, even after the
    item is deleted and put again), so ``put(..., expected_version=item.version)`` fails
    with ``ConflictError`` if anyone wrote in between. Equality ignores the version, so
    items still compare equal to ``InMemoryStore``'s.
    """

    __slots__ = ("version",)

    def __init__(
        self,
        *,
        value: dict[str, Any],
        key: str,
        namespace: tuple[str, ...],
        created_at: datetime,
        updated_at: datetime,
        version: int,
    ) -> None:
        super().__init__(
            value=value,
            key=key,
            namespace=namespace,
            created_at=created_at,
            updated_at=updated_at,
        )
        self.version = version

    def dict(self) -> dict[str, Any]:
        result: dict[str, Any] = super().dict()
        result["version"] = self.version
        return result


class VersionedSearchItem(SearchItem):
    """A :class:`SearchItem` with the ``version`` of :class:`VersionedItem`."""

    __slots__ = ("version",)

    def __init__(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        created_at: datetime,
        updated_at: datetime,
        score: float | None = None,
        *,
        version: int,
    ) -> None:
        super().__init__(namespace, key, value, created_at, updated_at, score)
        self.version = version

    def dict(self) -> dict[str, Any]:
        result: dict[str, Any] = super().dict()
        result["version"] = self.version
        return result
