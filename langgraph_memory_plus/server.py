"""A checkpointer and a store for the LangGraph server, named in ``langgraph.json``.

The LangGraph server (``langgraph dev``, the self-hosted Agent Server) takes its persistence
from ``langgraph.json``::

    {
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_memory_plus.server.checkpointer"},
      "store": {"path": "langgraph_memory_plus.server.store"}
    }

and enters each named object as an async context manager for as long as it runs (once per
event loop it serves from). Both are configured by the environment, like :func:`from_url`:

- ``LANGGRAPH_MEMORY_URL``: the URL (``postgresql://``, ``redis://``, ``redis+cluster://``,
  ``sqlite:///file.db``), with :func:`from_url`'s options as query parameters
  (``?keep_last=20&ttl=1440``). Required: a server that forgot it must not quietly keep its
  threads in a local file.
- ``LANGGRAPH_MEMORY_OPTIONS``: optionally, the same options as a JSON object
  (``{"ttl": 1440, "index": {"dims": 1536, "embed": "openai:text-embedding-3-small"}}``).
  ``index.embed`` is what LangGraph accepts there: a ``provider:model`` string, or
  ``path/to/file.py:function`` for an embedding function of your own.

- ``LANGGRAPH_MEMORY_SWEEP``: how often expired threads and store items are deleted, in
  minutes, or ``off``. By default a TTL (``ttl``, ``checkpoint_ttl``, ``store_ttl``,
  ``transcript_ttl``) starts a sweeper at the store's ``sweep_interval_minutes``, else every
  5 minutes. The server sweeps only a store of its own, never a custom one, so without
  this nothing would reclaim expired rows (reads skip them either way).

Each opens its own :func:`from_url` (so its own pool), because the server opens them at
different times and possibly on different event loops; a wrong URL or option fails the
server's start with the one-line error :func:`from_url` gives.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from .errors import InvalidConfigError
from .store.ttl import DEFAULT_SWEEP_MINUTES, TaskSweeper
from .url import ENV_VAR, Memory, from_url

OPTIONS_VAR = "LANGGRAPH_MEMORY_OPTIONS"
SWEEP_VAR = "LANGGRAPH_MEMORY_SWEEP"
_OFF = ("off", "false", "no", "0", "none")


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The checkpointer ``LANGGRAPH_MEMORY_URL`` names, open while the server runs, with
    a task deleting expired threads when they can expire (see ``LANGGRAPH_MEMORY_SWEEP``)."""
    minutes = sweep_minutes()
    async with memory_from_env() as memory:
        saver = memory.checkpointer
        expiring = memory.backend != "memory" and (
            saver.settings.ttl_seconds is not None
            or saver.settings.transcript_ttl_seconds is not None
        )
        if minutes is False or not expiring:
            yield saver
            return
        sweeper = TaskSweeper(saver.asweep_expired, (minutes or DEFAULT_SWEEP_MINUTES) * 60.0)
        try:
            yield saver
        finally:
            await sweeper.stop(None)


@asynccontextmanager
async def store() -> AsyncIterator[BaseStore]:
    """The store ``LANGGRAPH_MEMORY_URL`` names, open while the server runs, sweeping its
    expired items when it has a TTL (see ``LANGGRAPH_MEMORY_SWEEP``)."""
    minutes = sweep_minutes()
    async with memory_from_env() as memory:
        opened = memory.store
        if minutes is not False and memory.backend != "memory" and opened.ttl_config:
            await opened.start_ttl_sweeper(minutes)
        try:
            yield opened
        finally:
            if memory.backend != "memory":
                await opened.stop_ttl_sweeper()


def sweep_minutes() -> float | Literal[False] | None:
    """``LANGGRAPH_MEMORY_SWEEP``: minutes between sweeps, ``None`` for the default, or
    ``False`` for none."""
    raw = os.environ.get(SWEEP_VAR, "").strip().lower()
    if not raw:
        return None
    if raw in _OFF:
        return False
    try:
        minutes = float(raw)
    except ValueError:
        minutes = math.nan
    if not math.isfinite(minutes) or minutes <= 0:
        raise InvalidConfigError(
            f"{SWEEP_VAR} must be a number of minutes > 0 or off, got {raw[:40]!r}"
        )
    return minutes


def memory_from_env() -> Memory:
    """:func:`from_url` with the URL and the options of the environment (not yet open)."""
    url = os.environ.get(ENV_VAR, "").strip()
    if not url:
        raise InvalidConfigError(
            f"{ENV_VAR} is not set: set it to the URL of the server to keep threads and "
            "memories in (postgresql://, redis://, redis+cluster://, sqlite:///file.db)"
        )
    return from_url(url, **options_from_env())


def options_from_env() -> dict[str, Any]:
    """The options of ``LANGGRAPH_MEMORY_OPTIONS`` (a JSON object), ``index.embed`` resolved."""
    raw = os.environ.get(OPTIONS_VAR, "").strip()
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"{OPTIONS_VAR} is not valid JSON: {exc}") from None
    if not isinstance(options, dict):
        raise InvalidConfigError(f"{OPTIONS_VAR} must be a JSON object, got {raw[:40]!r}")
    if "serde" in options:
        raise InvalidConfigError(f"serde cannot be given in {OPTIONS_VAR}: it is not JSON")
    index = options.get("index")
    if isinstance(index, dict) and isinstance(index.get("embed"), str):
        options["index"] = {**index, "embed": _embedding(index["embed"])}
    return options


def _embedding(spec: str) -> Any:
    """``file.py:function`` loaded from that file; any other string (``provider:model``) is
    left for LangGraph's ``ensure_embeddings``, as in ``langgraph.json``."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        return spec
    module_name = f"_lgmp_embed_{abs(hash(os.path.abspath(path)))}"
    module = sys.modules.get(module_name)
    if module is None:
        found = importlib.util.spec_from_file_location(module_name, path)
        if found is None or found.loader is None or not os.path.isfile(path):
            raise InvalidConfigError(f"{OPTIONS_VAR}: index.embed names no file: {path}")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        sys.modules[module_name] = module
    try:
        return getattr(module, name)
    except AttributeError:
        raise InvalidConfigError(f"{OPTIONS_VAR}: {path} has no {name!r}") from None


__all__ = [
    "OPTIONS_VAR",
    "SWEEP_VAR",
    "checkpointer",
    "memory_from_env",
    "options_from_env",
    "store",
    "sweep_minutes",
]
