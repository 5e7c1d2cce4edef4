"""What every backend shares about reaching its server: the optional drivers, the wait
for a server, and the one-line error when it cannot be reached.

The PostgreSQL and Redis drivers are extras (``pip install 'langgraph-memory-plus[postgres]'``),
so a SQLite-only install has neither; :func:`need` turns a missing driver into an
``ImportError`` that names the extra instead of a bare ``No module named 'psycopg'``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

CONNECT_TIMEOUT = 5
"""Seconds to wait for a server (one connection attempt) before saying it cannot be
reached: a wrong host or port fails in this time, not after a pool's 30 s timeout."""

EXTRAS = {"postgres": ("psycopg", "psycopg_pool"), "redis": ("redis",)}


def need(extra: str) -> None:
    """Import the drivers of ``extra``; an ``ImportError`` naming the extra if one is missing."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the driver is there but broken: its own error says more
                raise
            raise ImportError(
                f"the {extra} backend of langgraph-memory-plus needs {module!r}, which is not "
                f"installed: pip install 'langgraph-memory-plus[{extra}]'",
                name=module,
            ) from None


def reason(exc: BaseException, secrets: Iterable[str | None] = ()) -> str:
    """The driver's message as one line, any of ``secrets`` in it masked.

    Drivers put the cause on the first line and hints after it; a first line that ends in
    a colon ("Multiple connection attempts failed. All failures were:") announces the
    cause, so the next line joins it.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
