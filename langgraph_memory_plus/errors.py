"""Exceptions raised by langgraph-memory-plus.

Every error a caller can fix says what was wrong and which value caused it; none of them
carries connection strings or stored values, so they are safe to log.
"""

from __future__ import annotations

import zlib
from typing import Literal


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


class FencedWriteError(ConflictError):
    """A write came from a superseded owner of its thread (see ``saver.fence``).

    Another owner took the thread's fence since this writer took it (or the thread was
    deleted, which removes the fence): nothing of the write was stored. Names the thread,
    the owner that tried to write and the current owner (``None``: the thread has no
    owner now), so the stale worker can stop instead of forking the checkpoint chain.
    """

    def __init__(self, thread_id: str, owner: str | None, current_owner: str | None) -> None:
        super().__init__(
            f"write to thread {thread_id!r} refused: owner {owner!r} was superseded; "
            f"the thread's current owner is {current_owner!r}"
        )
        self.thread_id = thread_id
        self.owner = owner
        self.current_owner = current_owner


class FenceHeldError(ConflictError):
    """``fence.acquire`` found another owner's lease on the thread still running.

    Wait until ``expires_at`` (seconds since the epoch), or take over with ``force=True``
    (the holder's later writes are then refused with :class:`FencedWriteError`).
    """

    def __init__(
        self, thread_id: str, owner: str, current_owner: str | None, expires_at: float | None
    ) -> None:
        super().__init__(
            f"thread {thread_id!r} is owned by {current_owner!r} until {expires_at}; "
            f"{owner!r} did not take it (use force=True to take over)"
        )
        self.thread_id = thread_id
        self.owner = owner
        self.current_owner = current_owner
        self.expires_at = expires_at


class PoolTimeoutError(MemoryPlusError, TimeoutError):
    """No pooled connection became free within ``pool_timeout`` seconds.

    Raised instead of waiting forever (or failing at once, as redis-py's own pool does
    when full), naming the two options that change it.
    """

    def __init__(self, size: int, timeout: float | None, backend: str = "Redis") -> None:
        super().__init__(
            f"no {backend} connection became free within pool_timeout={timeout or 0:g} "
            f"seconds (all pool_max_size={size} are in use); raise pool_max_size or pool_timeout"
        )
        self.size = size
        self.timeout = timeout


class CorruptDataError(MemoryPlusError, ValueError):
    """Stored data could not be decoded: a damaged row, field or key.

    Names where the data lives (thread id, checkpoint namespace, checkpoint id and
    channel, or a store item's namespace and key) so it can be found and repaired; the
    decoder's own error is the ``__cause__``. Nothing is returned from a read that
    raises it.
    """

    def __init__(self, what: str, /, **where: object) -> None:
        place = ", ".join(f"{name}={value!r}" for name, value in where.items() if value is not None)
        super().__init__(
            f"corrupt stored data: {what} ({place})" if place else f"corrupt stored data: {what}"
        )
        self.where = where


# What decoding damaged bytes raises: the serializers' own errors (msgpack's and JSON's are
# ValueErrors), zlib's, a list item found missing (LookupError), or a value that decoded to
# the wrong shape. Driver errors (connection, timeout) are none of these, so a failure
# thrown into a plan while it is inside the block passes through unchanged.
# NotImplementedError: a serde meeting a type tag it does not know (data written by another
# serde, e.g. an encrypting one, read without it).
_DECODE_ERRORS = (
    ValueError,
    LookupError,
    TypeError,
    AttributeError,
    EOFError,
    NotImplementedError,
    zlib.error,
)


class decoding:  # lower case: used as the function it was, ``with decoding(...)``
    """Turn a decoding failure inside the block into :class:`CorruptDataError` naming
    ``what`` and ``where``, with the original as its cause.

    A class, not a ``@contextmanager`` generator: a read enters one per value decoded,
    and a generator's setup costs several times these two method calls."""

    __slots__ = ("what", "where")

    def __init__(self, what: str, /, **where: object) -> None:
        self.what = what
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> Literal[False]:
        # already ours (an option checked inside a plan, or nested): passed on as it is
        if exc is None or isinstance(exc, MemoryPlusError) or not isinstance(exc, _DECODE_ERRORS):
            return False
        raise CorruptDataError(self.what, **self.where) from exc


class MemoryConnectionError(MemoryPlusError, ConnectionError):
    """The server a saver or store is opened on cannot be reached or refuses the login
    (or, for SQLite, its file cannot be opened).

    The message is one line: where (the URL with its password masked) and the server's or
    driver's own reason. The driver's exception is not chained, as its text may quote the
    URL with its password.
    """


class SetupRequiredError(MemoryPlusError):
    """The backend's tables are missing or older than this version of the package.

    Run ``setup()`` once (``from_url`` does it on entering unless ``setup=False``); it
    creates or migrates the tables and is safe to run repeatedly. The driver's error is
    kept as ``__cause__``.
    """


class MigrationLockTimeoutError(MemoryPlusError, TimeoutError):
    """``setup()`` had migrations to run but could not lock a table within
    ``lock_timeout``: another transaction holds it (a long report, ``pg_dump``).

    Raised instead of queueing behind it, since every read of the table would queue
    behind the migration meanwhile. Nothing was changed; the message names the table and
    the sessions holding it.
    """
