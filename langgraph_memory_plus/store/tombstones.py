"""Namespace tombstones: a prefix whose puts are dropped for a while, on every store.

``erase_user`` deletes a user's items; a run of that user still going could put them
back a moment later. A tombstone on the erased prefix closes that window: every put of
an item at or below the prefix is dropped (with a warning in the log) until the
tombstone's hold time has passed, as a deleted thread's tombstone drops the late
checkpoints of its runs. Deletes are never blocked. The check runs inside the write
itself (the same SQL statement, the same Lua script), never as a read before it.

A tombstone stores a hash of the prefix, not the prefix: erasure leaves no user id
behind. Expired tombstones never block; they go with the next tombstone placed, with
``sweep_ttl`` (SQL stores) or with their key's expiry (Redis).
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from typing import Any

from ..errors import InvalidConfigError
from .namespaces import prefix_text

Namespace = tuple[str, ...]
DEFAULT_HOLD_HOURS = 24.0
"""How long ``erase_user`` keeps an erased namespace closed, by default."""
MAX_HOLD_SECONDS = 366 * 24 * 3600.0


def tombstone_hash(namespace: Namespace) -> str:
    """The hex SHA-256 a SQL store keeps for a tombstone on ``namespace``."""
    return hashlib.sha256(prefix_text(namespace).encode("utf-8", "surrogatepass")).hexdigest()


@lru_cache(maxsize=4096)
def ancestor_hashes(namespace: Namespace) -> tuple[str, ...]:
    """The tombstone hashes that block a put into ``namespace``: itself and every prefix.

    Cached: every put needs them, and a store's puts go to few namespaces at a time (the
    hashing was a tenth of a SQLite put).
    """
    return tuple(tombstone_hash(namespace[:n]) for n in range(1, len(namespace) + 1))


def check_hold(hold_seconds: Any) -> float:
    """A hold time in seconds: a positive finite number, at most a year."""
    if (
        isinstance(hold_seconds, bool)
        or not isinstance(hold_seconds, (int, float))
        or not math.isfinite(hold_seconds)
        or not 0 < hold_seconds <= MAX_HOLD_SECONDS
    ):
        raise InvalidConfigError(
            f"hold_seconds must be a positive number of seconds up to a year, got {hold_seconds!r}"
        )
    return float(hold_seconds)
