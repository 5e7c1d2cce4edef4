"""What a long thread's turn costs before any storage: issue 39's long-thread floor::

    python -m benchmarks.long_floor [--turns 1000] [--savers ours_sqlite,off_sqlite,ours_pg,off_pg]
        [--pg URL] [--redis URL] [--json PATH]

Issue 39 asks, for a thread of 1,000 turns, a turn p50 of at most 0.2x the official
savers' and a last 10% of turns costing at most 1.3x the first 10%. Part of every turn
grows with the thread whatever the saver: LangGraph's ``add_messages`` indexes the id of
every message at each update and the graph's state is rebuilt from the checkpoint each
turn. And a saver whose reads never share objects with the caller (issue 15) builds every
message of the thread anew at each read. This module measures both, on one thread of the
chat workload, turn by turn, beside the savers named:

- ``no storage``: a saver that keeps the objects it is given and hands the same ones back
  (not a correct saver: the caller's edits of a read reach what it stores). What LangGraph
  itself costs;
- ``fresh objects``: the same, but each read returns the messages built anew at the
  cheapest in Python (no constructor: the instance's ``__dict__`` and pydantic state set
  directly, over copies of their field containers). It copies one level only: the
  realistic messages' nested metadata (``token_usage`` and its details) stays shared, so
  it is below what a correct saver can reach;
- ``fresh objects, C build``: the same, each read building every message from a template
  made once per message, as ours does (``lists.build_all``: unpacked in C, the collector
  paused): the floor of a saver whose reads share nothing, nested containers included,
  before it stores or reads a byte;
- ``fresh objects, C build, checked puts``: the same, and each put keeps an element of
  the last list only when its fields still hold the objects they held when it was read
  or stored (a field reassigned in place must be stored anew, as LangGraph's savers do),
  checked as ours checks it: the floor of a saver that stores only what is new and shares
  nothing, before it stores a byte;
- ``fresh containers, shared leaves, checked puts`` (:mod:`benchmarks.shape_floor`): the
  same contract at less cost, reads copying only the containers around shared immutable
  strings and numbers, puts comparing all fields in one ``list ==`` (equality where
  identity differs: slightly less strict than ours).

A template floor's put writes only the lists of ``new_versions`` (an unchanged list keeps
its templates), as LangGraph's savers do. ``--floors "a;b"`` runs only the floors named;
``python -m benchmarks.long_floor_paired`` runs savers and floors turn by turn in one
process.

Each turn's wall time and process CPU time are taken (client CPU, the executor threads
LangGraph runs the saver's writes on included; a server's own is not in it). Reported
per saver: turn p50 over turns 1..T (the chat section's "turn p50 @T"), the mean of the
last 10% of turns over the first 10%, and each figure over each official saver's.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_memory_plus.checkpoint.lists import (
    Template,
    _same_prefix,
    build_all,
    fingerprints_of,
    unchanged_prefix,
)

from . import minimal as mn
from . import targets as tg
from . import workloads as wl

NO_STORAGE = "no storage"
FRESH = "fresh objects"
FRESH_C = "fresh objects, C build"
FRESH_CHECKED = "fresh objects, C build, checked puts"
SHARED_LEAVES = "fresh containers, shared leaves, checked puts"
DEFAULT_SAVERS = "ours_sqlite,off_sqlite,ours_pg,off_pg"
_TARGETS = {
    t.slug: t for t in (tg.OURS_SQLITE, tg.OFF_SQLITE, tg.OURS_PG, tg.OFF_PG, tg.OURS_REDIS)
}


class NoStorageSaver(BaseCheckpointSaver[str]):
    """Keeps what it is given, hands the same objects back: LangGraph's own cost per turn.

    Enough of a saver for one thread of the chat graph (latest and by id, pending writes);
    ``list`` returns nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._versions = InMemorySaver()
        self.checkpoints: dict[tuple[str, str], list[tuple[Checkpoint, Any, str | None]]] = {}
        self.writes: dict[tuple[str, str, str], list[tuple[str, str, Any]]] = {}

    def _read(self, checkpoint: Checkpoint) -> Checkpoint:
        return checkpoint

    def _store(self, checkpoint: Checkpoint, changed: ChannelVersions) -> Checkpoint:
        """What is kept of ``checkpoint``; ``changed``: the channels the put wrote."""
        return checkpoint

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        c = config["configurable"]
        thread_id, ns = c["thread_id"], c.get("checkpoint_ns", "")
        stored = self.checkpoints.get((thread_id, ns))
        if not stored:
            return None
        wanted = c.get("checkpoint_id")
        found = next((s for s in stored if s[0]["id"] == wanted), None) if wanted else stored[-1]
        if found is None:
            return None
        checkpoint, metadata, parent = found
        where = {"thread_id": thread_id, "checkpoint_ns": ns}
        return CheckpointTuple(
            {"configurable": {**where, "checkpoint_id": checkpoint["id"]}},
            self._read(checkpoint),
            metadata,
            {"configurable": {**where, "checkpoint_id": parent}} if parent else None,
            list(self.writes.get((thread_id, ns, checkpoint["id"]), ())),
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        c = config["configurable"]
        thread_id, ns = c["thread_id"], c.get("checkpoint_ns", "")
        self.checkpoints.setdefault((thread_id, ns), []).append(
            (self._store(checkpoint, new_versions), metadata, c.get("checkpoint_id"))
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        c = config["configurable"]
        key = (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])
        self.writes.setdefault(key, []).extend((task_id, ch, v) for ch, v in writes)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self._versions.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(  # pragma: no cover - the measurement is sync
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config):
            yield item


_new = object.__new__
_set = object.__setattr__


def _copied(value: Any) -> Any:
    return (
        dict(value)
        if isinstance(value, dict)
        else list(value)
        if isinstance(value, list)
        else value
    )


def _fresh(message: BaseMessage) -> BaseMessage:
    """``message`` as a new object sharing no container with it, built at the cheapest in
    Python: no validation, no constructor, its ``__dict__`` and pydantic's per-instance
    state set directly, one level of dicts and lists copied (the chat workload's
    messages hold no deeper mutable values than that)."""
    new = _new(type(message))
    _set(new, "__dict__", {k: _copied(v) for k, v in message.__dict__.items()})
    _set(new, "__pydantic_fields_set__", set(message.__pydantic_fields_set__))
    _set(new, "__pydantic_extra__", _copied(message.__pydantic_extra__))
    _set(new, "__pydantic_private__", _copied(message.__pydantic_private__))
    return new


class FreshObjectsSaver(NoStorageSaver):
    """:class:`NoStorageSaver` whose reads build every message anew (see :func:`_fresh`)."""

    def _read(self, checkpoint: Checkpoint) -> Checkpoint:
        values = {
            k: [_fresh(m) if isinstance(m, BaseMessage) else m for m in v]
            if isinstance(v, list)
            else v
            for k, v in checkpoint["channel_values"].items()
        }
        return {**checkpoint, "channel_values": values}


class TemplateSaver(NoStorageSaver):
    """:class:`NoStorageSaver` whose reads build every list element anew from a template
    made once per element (``lists.Template``, as ours) in C (``lists.build_all``, as
    ours, the collector paused): the floor of a saver whose reads share nothing at all,
    nested containers included, before it stores or reads a byte. A put makes templates
    only for the elements after the longest prefix that is the very objects of the last
    list it stored or read (no check of their fields, which ours makes); a list the put
    did not write keeps the templates it had (LangGraph's savers store only the channels
    of ``new_versions``)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, tuple[list[Any], list[Template]]] = {}

    def _store(self, checkpoint: Checkpoint, changed: ChannelVersions) -> Checkpoint:
        values = dict(checkpoint["channel_values"])
        for channel, value in values.items():
            if isinstance(value, list) and value and isinstance(value[0], BaseMessage):
                objects, templates = self._last.get(channel, ([], []))
                if channel not in changed and templates:
                    values[channel] = _Templates(templates)
                    continue
                same = self._kept(channel, value, objects)
                made = templates[:same] + [Template.of(v) for v in value[same:]]
                self._last[channel] = (list(value), made)
                values[channel] = _Templates(made)
        return {**checkpoint, "channel_values": values}

    def _kept(self, channel: str, value: list[Any], objects: list[Any]) -> int:
        """How many leading elements of ``value`` keep their templates."""
        return _same_prefix(value, objects)

    def _read(self, checkpoint: Checkpoint) -> Checkpoint:
        values = dict(checkpoint["channel_values"])
        for channel, value in values.items():
            if isinstance(value, _Templates):
                built = build_all(value)
                self._last[channel] = (list(built), list(value))
                values[channel] = built
        return {**checkpoint, "channel_values": values}


class CheckedTemplateSaver(TemplateSaver):
    """:class:`TemplateSaver` whose puts also check what they keep, as a correct saver must:
    an element kept from the last list is one whose fields still hold the very objects
    they held when it was read or stored (``lists.fingerprints_of`` at each read and put,
    ``lists.unchanged_prefix`` at each put, as ours). A node or a reducer may reassign a
    field of a message it was handed (``message.content = ...``) without returning it,
    and LangGraph's savers store the list as it is at the put, so a saver that keeps the
    old item there stores the old text. The floor of a saver that stores only what is new
    and shares nothing, before it stores a byte."""

    def __init__(self) -> None:
        super().__init__()
        self._prints: dict[str, list[tuple[Any, ...] | None]] = {}

    def _kept(self, channel: str, value: list[Any], objects: list[Any]) -> int:
        prints = self._prints.get(channel, [])
        same = unchanged_prefix(value, prints[: _same_prefix(value, objects)])
        self._prints[channel] = prints[:same] + fingerprints_of(value[same:])
        return same

    def _read(self, checkpoint: Checkpoint) -> Checkpoint:
        read = super()._read(checkpoint)
        for channel, value in checkpoint["channel_values"].items():
            if isinstance(value, _Templates):
                self._prints[channel] = fingerprints_of(self._last[channel][0])
        return read


class _Templates(list):  # type: ignore[type-arg]
    """A stored list value as its elements' templates (:class:`TemplateSaver`)."""


@contextlib.contextmanager
def _open(name: str, env: tg.Env) -> Iterator[tuple[BaseCheckpointSaver[Any], str]]:
    if name == NO_STORAGE:
        yield NoStorageSaver(), "floor"
    elif name == FRESH:
        yield FreshObjectsSaver(), "floor"
    elif name == FRESH_C:
        yield TemplateSaver(), "floor"
    elif name == FRESH_CHECKED:
        yield CheckedTemplateSaver(), "floor"
    elif name == SHARED_LEAVES:
        from .shape_floor import SharedLeavesSaver

        yield SharedLeavesSaver(), "floor"
    else:
        with mn.open_saver(_TARGETS[name], env) as opened:
            yield opened


def one_thread(name: str, env: tg.Env, turns: int) -> dict[str, Any]:
    """Every turn of one thread of ``turns`` turns, timed (wall and process CPU)."""
    wall: list[float] = []
    cpu: list[float] = []
    with _open(name, env) as (saver, marker):
        graph = wl.chat_graph().compile(checkpointer=saver)
        mn._turn(graph, f"{marker}-warm")
        thread_id = f"{marker}-t0"
        for turn in range(1, turns + 1):
            started, started_cpu = time.perf_counter(), time.process_time()
            mn._turn(graph, thread_id, turn)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        wl._check_conversation(dict(graph.get_state(config).values), turns, name)
    tenth = max(1, turns // 10)
    return {
        "turn p50 ms": statistics.median(wall) * 1000.0,
        "turn cpu p50 ms": statistics.median(cpu) * 1000.0,
        "last/first wall": statistics.fmean(wall[-tenth:]) / statistics.fmean(wall[:tenth]),
        "last/first cpu": statistics.fmean(cpu[-tenth:]) / statistics.fmean(cpu[:tenth]),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.long_floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", type=int, default=1000, help="the thread's length T")
    p.add_argument("--savers", default=DEFAULT_SAVERS, help="slugs beside the floors")
    p.add_argument("--json", type=Path, help="write the numbers here")
    p.add_argument("--floors", default="", help="';'-separated floor names (default: all)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    env = tg.Env(pg=args.pg, redis=args.redis)
    floors = [NO_STORAGE, FRESH, FRESH_C, FRESH_CHECKED, SHARED_LEAVES]
    if args.floors:
        wanted = [f.strip() for f in args.floors.split(";") if f.strip()]
        if missing := [f for f in wanted if f not in floors]:
            raise SystemExit(f"unknown floors {missing}; known: {floors}")
        floors = [f for f in floors if f in wanted]
    names = [*floors, *(s.strip() for s in args.savers.split(",") if s.strip())]
    unknown = [n for n in names[len(floors) :] if n not in _TARGETS]
    if unknown:
        raise SystemExit(f"unknown savers {unknown}; known: {sorted(_TARGETS)}")
    load_before = os.getloadavg()
    savers = {}
    for name in names:
        # Each saver from a clean heap: what the ones before it left (a floor keeps every
        # checkpoint) is cyclic garbage a collection frees, and walks until it does.
        gc.collect()
        savers[name] = one_thread(name, env, args.turns)
    officials = [n for n in names if n.startswith("off_")]
    ratios = {
        name: {
            f"/ {off}": {
                "turn p50": m["turn p50 ms"] / savers[off]["turn p50 ms"],
                "turn cpu p50": m["turn cpu p50 ms"] / savers[off]["turn cpu p50 ms"],
            }
            for off in officials
        }
        for name, m in savers.items()
    }
    out: dict[str, Any] = {
        "meta": {
            "turns": args.turns,
            "load average before": list(load_before),
            "load average after": list(os.getloadavg()),
            "cpus": os.cpu_count(),
        },
        "savers": savers,
        "ratios": ratios,
    }
    print(
        f"one thread of {args.turns} turns per saver; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} -> "
        f"{' '.join(f'{x:.2f}' for x in out['meta']['load average after'])}"
    )
    head = "| saver | turn p50 ms | turn CPU p50 ms | last/first (wall) | last/first (CPU) |"
    head += "".join(f" p50 / {off} (wall, CPU) |" for off in officials)
    print(head)
    print("|---" * (5 + len(officials)) + "|")
    for name, m in savers.items():
        cells = [
            f"{m['turn p50 ms']:.2f}",
            f"{m['turn cpu p50 ms']:.2f}",
            f"{m['last/first wall']:.2f}x",
            f"{m['last/first cpu']:.2f}x",
            *(f"{r['turn p50']:.2f}x, {r['turn cpu p50']:.2f}x" for r in ratios[name].values()),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
