"""What every driver's ``from_conn_string`` does before it closes its connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


def before_close(instance: object) -> Any:
    """Run what an instance does before its connection or pool closes (a store stops its
    TTL sweeper); returns what the async classes must await, if anything."""
    hook = getattr(instance, "_before_close", None)
    return None if hook is None else hook()


@contextmanager
def closing_first(instance: T) -> Iterator[T]:
    """Yield ``instance``; on exit run its before-close hook, ahead of the connection."""
    try:
        yield instance
    finally:
        before_close(instance)


@asynccontextmanager
async def aclosing_first(instance: T) -> AsyncIterator[T]:
    """Async :func:`closing_first`: awaits the hook of an async instance."""
    try:
        yield instance
    finally:
        pending = before_close(instance)
        if pending is not None:
            await pending
