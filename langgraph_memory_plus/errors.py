"""Exceptions raised by langgraph-memory-plus.

Every error a caller can fix says what was wrong and which value caused it; none of them
carries connection strings or stored values, so they are safe to log.
"""

from __future__ import annotations


class MemoryPlusError(Exception):
    """Base class for every error this package raises on purpose."""


class InvalidConfigError(MemoryPlusError, ValueError):
    """A ``RunnableConfig`` or an option lacks something required or has a bad value.

    A ``ValueError`` too, so callers that guard LangGraph calls with ``except ValueError``
    keep working.
    """


class ValueTooLargeError(MemoryPlusError, ValueError):
    """A value is larger than the backend can store in one field.

    Raised before anything is written, so nothing is half-saved.
    """

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes; the backend stores at most {limit} bytes")
        self.size = size
        self.limit = limit


class ConflictError(MemoryPlusError):
    """A conditional write lost a race: the item changed since it was read."""
