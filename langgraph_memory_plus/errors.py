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


class MemoryConnectionError(MemoryPlusError, ConnectionError):
    """The server a saver or store is opened on cannot be reached or refuses the login
    (or, for SQLite, its file cannot be opened).

    The message is one line: where (the URL with its password masked) and the server's or
    driver's own reason. The driver's exception is kept as ``__cause__``.
    """


class SetupRequiredError(MemoryPlusError):
    """The backend's tables are missing or older than this version of the package.

    Run ``setup()`` once (``from_url`` does it on entering unless ``setup=False``); it
    creates or migrates the tables and is safe to run repeatedly. The driver's error is
    kept as ``__cause__``.
    """
