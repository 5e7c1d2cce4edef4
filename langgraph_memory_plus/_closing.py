"""What every driver's ``from_conn_string`` does before it closes its connection."""

from __future__ import annotations

from typing import Any


def before_close(instance: object) -> Any:
    """Run what an instance does before its connection or pool closes (a store stops its
    TTL sweeper); returns what the async classes must await, if anything."""
    hook = getattr(instance, "_before_close", None)
    return None if hook is None else hook()
