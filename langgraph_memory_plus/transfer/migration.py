"""Move threads (and store items) between any two savers (stores), LangGraph's own included.

::

    from langgraph_memory_plus.migration import copy_threads, copy_store

    report = copy_threads(official_postgres_saver, our_saver, verify=True)
    await acopy_threads(source, target)                   # the same, with the async methods

Only the public ``BaseCheckpointSaver`` API is needed on either side, so any saver works as
a source or a target. What is kept: checkpoint ids, parents, ``ts``, metadata, channel
versions and values, pending writes (task ids, in their order, special writes such as
interrupts included) and every checkpoint namespace (subgraphs). DeltaChannel histories
come along because every checkpoint's writes do.

How it copies one thread, in bounded memory:

1. A catalogue of the thread on both sides: ``(namespace, checkpoint id, number of
   writes)`` per checkpoint, streamed from ``list()`` (ids only are kept).
2. Per namespace, oldest first, pages of ``batch_size`` checkpoints read with
   ``list(before=..., limit=...)``; each one the target lacks (or holds with a different
   number of writes: a copy killed between ``put`` and ``put_writes``) is ``put`` with its
   parent's id in the config, which is how a saver records the parent, and its writes
   are put again per task. ``new_versions`` names the channels whose version differs from
   the parent's, as LangGraph's loop does, so unchanged values are not stored again.
3. Re-running after a crash copies only what is missing (step 1 finds it).

Whose thread it is travels too. LangGraph's savers keep the user only where the run put it
in ``configurable`` or the config's ``metadata`` (both end up in each checkpoint's
metadata); a run given ``context={"user_id": ...}`` leaves no trace of it. So per thread
the user is read from its latest checkpoint (the metadata, else a string channel of that
name in the state), else taken from ``user_id=`` (one id, a mapping by thread id, or a
function of the thread id and its latest checkpoint), and written into the metadata of
every copied checkpoint that lacks it: the target's thread index, ``sessions()`` and
``erase_user`` then find the thread. ``verify`` does not count that key as a difference.

The task path of a pending write is not part of ``get_tuple``'s answer; for LangGraph's
in-memory, PostgreSQL and SQLite savers it is read from their storage, for other sources
it is ``""`` (the writes keep their order either way). The same storage reads enumerate
thread ids without decoding every checkpoint; other sources are enumerated by streaming
``list(None)``.

The logic is written once as a plan (a generator yielding :class:`Call` /
:class:`Native` commands); :func:`copy_threads` runs it with the sync methods and
:func:`acopy_threads` awaits the async ones.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ..checkpoint.codec import StoredCheckpoint
from ..checkpoint.config import ListQuery
from ..checkpoint.saver import CheckpointSaverBase
from ..drivers.plan import Plan, adrive, drive
from ..errors import InvalidConfigError
from ..threads.core import check_user_id

R = TypeVar("R")
DEFAULT_BATCH = 100
UserOf = str | Mapping[str, str] | Callable[[str, CheckpointTuple | None], "str | None"]
"""Who owns a copied thread that does not show it: one user id for all, a mapping by
thread id, or a function of the thread id and its latest checkpoint (``None``: nobody)."""


# -- commands ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """Call a public method (``name``; its async twin is ``"a" + name``) of a saver or store.

    ``stream``: the method returns an iterator; the answer is a handle for :class:`Take`.
    ``collect``: the method returns a (bounded) iterator; the answer is its items as a list.
    """

    obj: Any
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    collect: bool = False


@dataclass(frozen=True)
class Take:
    """Up to ``n`` more items of a stream a :class:`Call` opened (fewer: it is exhausted)."""

    handle: Any
    n: int


@dataclass(frozen=True)
class Native:
    """A read of a source's own storage, in a blocking and an awaitable version."""

    sync: Callable[[], Any]
    async_: Callable[[], Awaitable[Any]]


Command = Call | Take | Native


def _run_sync(command: Command) -> Any:
    if isinstance(command, Native):
        return command.sync()
    if isinstance(command, Take):
        return list(itertools.islice(command.handle, command.n))
    result = getattr(command.obj, command.name)(*command.args, **command.kwargs)
    if command.collect:
        return list(result)
    return iter(result) if command.stream else result


async def _run_async(command: Command) -> Any:
    if isinstance(command, Native):
        return await command.async_()
    if isinstance(command, Take):
        handle: AsyncIterator[Any] = command.handle
        out = []
        async for item in handle:
            out.append(item)
            if len(out) >= command.n:
                break
        return out
    method = getattr(command.obj, "a" + command.name)
    if command.stream:
        return aiter(method(*command.args, **command.kwargs))
    if command.collect:
        return [item async for item in method(*command.args, **command.kwargs)]
    return await method(*command.args, **command.kwargs)


# -- progress and results ------------------------------------------------------------------


@dataclass
class CopyProgress:
    """Counts so far, handed to the ``progress`` callback after every copied checkpoint."""

    thread_id: str = ""
    threads_done: int = 0
    checkpoints_copied: int = 0
    checkpoints_skipped: int = 0
    writes_copied: int = 0
    items_copied: int = 0
    items_skipped: int = 0


@dataclass
class CopyReport(CopyProgress):
    """What a copy did; ``differences`` lists what ``verify=True`` found unequal."""

    threads: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


Progress = Callable[[CopyProgress], None]


# -- what a source offers beyond the public API ----------------------------------------------


def _kind(saver: Any) -> str:
    """Which storage reads :func:`_native_threads` and :func:`_native_paths` know for it."""
    module = type(saver).__module__
    if module.startswith("langgraph.checkpoint.memory"):
        return "memory"
    if module.startswith("langgraph.checkpoint.postgres") and hasattr(saver, "_cursor"):
        return "postgres" if "shallow" not in module else ""
    if module.startswith("langgraph.checkpoint.sqlite") and hasattr(saver, "conn"):
        return "sqlite-async" if module.endswith(".aio") else "sqlite"
    return ""


def _sql_command(saver: Any, kind: str, sql: str, params: tuple[Any, ...]) -> Native:
    """One query on an official PostgreSQL / SQLite saver's connection, rows as tuples."""

    def sync() -> list[tuple[Any, ...]]:
        if kind == "postgres":
            with saver._cursor() as cur:
                cur.execute(sql, params)
                return [tuple(row.values()) for row in cur.fetchall()]
        with saver.cursor(transaction=False) as cur:
            cur.execute(sql.replace("%s", "?"), params)
            return [tuple(row) for row in cur.fetchall()]

    async def async_() -> list[tuple[Any, ...]]:
        if kind == "postgres":
            async with saver._cursor() as cur:
                await cur.execute(sql, params)
                return [tuple(row.values()) for row in await cur.fetchall()]
        async with saver.lock, saver.conn.execute(sql.replace("%s", "?"), params) as cur:
            return [tuple(row) for row in await cur.fetchall()]

    return Native(sync, async_)


def _native_threads(saver: Any, after: str, n: int) -> Native | None:
    """The next ``n`` thread ids after ``after``, in order, from the source's storage."""
    kind = _kind(saver)
    if kind == "memory":

        def ids() -> list[str]:
            return sorted(t for t in list(saver.storage) if t > after)[:n]

        async def aids() -> list[str]:
            return ids()

        return Native(ids, aids)
    if not kind:
        return None
    sql = (
        "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > %s "
        "ORDER BY thread_id LIMIT %s"
    )
    query = _sql_command(saver, kind, sql, (after, n))
    return Native(
        lambda: [r[0] for r in query.sync()],
        lambda: _first_column(query.async_()),
    )


async def _first_column(rows: Awaitable[list[tuple[Any, ...]]]) -> list[Any]:
    return [r[0] for r in await rows]


def _native_paths(saver: Any, thread_id: str, ns: str, checkpoint_ids: Sequence[str]) -> Any:
    """``{(checkpoint_id, task_id): task_path}`` for some checkpoints, or ``None``."""
    kind = _kind(saver)
    if kind == "memory":

        def paths() -> dict[tuple[str, str], str]:
            out = {}
            for cid in checkpoint_ids:
                for write in saver.writes.get((thread_id, ns, cid), {}).values():
                    if len(write) > 3:
                        out[(cid, write[0])] = write[3]
            return out

        async def apaths() -> dict[tuple[str, str], str]:
            return paths()

        return Native(paths, apaths)
    if not kind or not checkpoint_ids:
        return None
    marks = ", ".join("%s" for _ in checkpoint_ids)
    sql = (
        "SELECT DISTINCT checkpoint_id, task_id, task_path FROM "
        f"{'checkpoint_writes' if kind == 'postgres' else 'writes'} "
        f"WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id IN ({marks})"
    )
    query = _sql_command(saver, kind, sql, (thread_id, ns, *checkpoint_ids))
    return Native(
        lambda: {(r[0], r[1]): r[2] for r in query.sync()},
        lambda: _paths_async(query.async_()),
    )


async def _paths_async(rows: Awaitable[list[tuple[Any, ...]]]) -> dict[tuple[str, str], str]:
    return {(r[0], r[1]): r[2] for r in await rows}


# -- the plans -----------------------------------------------------------------------------


def _thread_config(thread_id: str, ns: str | None = None, cid: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        configurable["checkpoint_ns"] = ns
    if cid is not None:
        configurable["checkpoint_id"] = cid
    return {"configurable": configurable}


def _ns_id(t: CheckpointTuple) -> tuple[str, str]:
    c = t.config["configurable"]
    return c.get("checkpoint_ns", ""), c["checkpoint_id"]


def _parent_id(t: CheckpointTuple) -> str | None:
    if not t.parent_config:
        return None
    cid = t.parent_config["configurable"].get("checkpoint_id")
    return str(cid) if cid else None


def _open(obj: Any, name: str, *args: Any, **kwargs: Any) -> Plan[Command, Any]:
    handle = yield Call(obj, name, args, kwargs, stream=True)
    return handle


def _catalogue(
    saver: Any,
    thread_id: str,
    batch: int,
    unowned: tuple[str, set[tuple[str, str]]] | None = None,
    seen: tuple[Callable[[CheckpointTuple], Any], list[Any]] | None = None,
) -> Plan[Command, dict[str, dict[str, int]]]:
    """``{namespace: {checkpoint_id: number of pending writes}}`` of one thread.

    ``unowned``: a metadata key and a set that receives the (namespace, id) of every
    checkpoint whose metadata lacks it (a copy re-run that attributes threads re-puts them).
    ``seen`` (paged reads only): a function naming a checkpoint's user and a list that
    receives the user of the newest root checkpoint that names one.
    """
    out: dict[str, dict[str, int]] = {}
    kind = _kind(saver)
    if kind and kind != "memory":  # their list() would fetch the whole thread at once
        writes = "checkpoint_writes" if kind == "postgres" else "writes"
        params: tuple[Any, ...] = (thread_id,)
        if unowned is None:
            lacks = "false"
        elif kind == "postgres":
            lacks, params = "(c.metadata -> %s) IS NULL", (unowned[0], thread_id)
        else:
            lacks = "json_extract(CAST(c.metadata AS TEXT), '$.\"' || %s || '\"') IS NULL"
            params = (unowned[0], thread_id)
        sql = (
            "SELECT c.checkpoint_ns, c.checkpoint_id, (SELECT count(*) FROM "
            f"{writes} w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
            f"AND w.checkpoint_id = c.checkpoint_id), {lacks} FROM checkpoints c "
            "WHERE c.thread_id = %s"
        )
        rows = yield _sql_command(saver, kind, sql, params)
        for ns, cid, count, lacking in rows:
            out.setdefault(ns, {})[cid] = int(count)
            if unowned is not None and lacking:
                unowned[1].add((ns, cid))
        return out
    handle = yield from _open(saver, "list", _thread_config(thread_id))
    while True:
        page: list[CheckpointTuple] = yield Take(handle, batch)
        for t in page:
            ns, cid = _ns_id(t)
            out.setdefault(ns, {})[cid] = len(t.pending_writes or ())
            if unowned is not None and (t.metadata or {}).get(unowned[0]) is None:
                unowned[1].add((ns, cid))
            if seen is not None and not ns and not seen[1]:
                user = seen[0](t)
                if user is not None:
                    seen[1].append(user)
        if len(page) < batch:
            return out


def _thread_ids(source: Any, batch: int) -> Plan[Command, list[str]]:
    """Every thread id of ``source`` (ids only are held; checkpoints are streamed)."""
    first = _native_threads(source, "", batch)
    if first is not None:
        ids: list[str] = []
        page: list[str] = yield first
        while page:
            ids.extend(page)
            nxt = _native_threads(source, page[-1], batch)
            assert nxt is not None
            page = [] if len(page) < batch else (yield nxt)
        return ids
    seen: dict[str, None] = {}
    handle = yield from _open(source, "list", None)
    while True:
        tuples: list[CheckpointTuple] = yield Take(handle, batch)
        for t in tuples:
            seen.setdefault(t.config["configurable"]["thread_id"], None)
        if len(tuples) < batch:
            return list(seen)


def _read_batch(
    source: Any, thread_id: str, ns: str, ids: Sequence[str], after: str | None
) -> Plan[Command, tuple[list[CheckpointTuple], dict[tuple[str, str], str]]]:
    """The checkpoints ``ids`` (ascending, contiguous in the namespace), oldest first, and
    the task paths of their writes where the source can tell them."""
    config = _thread_config(thread_id, ns)
    before = _thread_config(thread_id, ns, after) if after else None
    paths: dict[tuple[str, str], str] = {}
    if isinstance(source, CheckpointSaverBase):
        page, paths = yield _our_page(source, config, before, len(ids))
    else:
        page = yield Call(
            source, "list", (config,), {"before": before, "limit": len(ids)}, collect=True
        )
        native = _native_paths(source, thread_id, ns, ids)
        if native is not None:
            paths = yield native
    page.reverse()
    if [_ns_id(t)[1] for t in page] == list(ids):
        return page, paths
    # The source changed under us (or orders its list differently): one read each.
    out = []
    for cid in ids:
        found = yield Call(source, "get_tuple", (_thread_config(thread_id, ns, cid),))
        if found is not None:
            out.append(found)
    return out, paths


def _our_page(saver: CheckpointSaverBase, config: Any, before: Any, limit: int) -> Native:
    """``saver.list(config, before=..., limit=...)`` on one of our savers, with the task
    paths its storage keeps beside each write (``list`` leaves them out)."""
    paths: dict[tuple[str, str], str] = {}
    codec = saver._new_codec()  # its decode_tuple is wrapped below
    decode = codec.decode_tuple

    def recording(stored: StoredCheckpoint, *args: Any, **kwargs: Any) -> CheckpointTuple:
        for task_id, _, _, _, path, _ in stored.writes:
            paths[(stored.checkpoint_id, task_id)] = path
        return decode(stored, *args, **kwargs)

    setattr(codec, "decode_tuple", recording)  # noqa: B010  (an instance of our own)

    def plan() -> Plan[Any, tuple[list[CheckpointTuple], dict[tuple[str, str], str]]]:
        query: ListQuery | None = ListQuery.build(config, None, before, limit)
        out: list[CheckpointTuple] = []
        while query is not None:
            page, query = yield from saver._plans.list_page(codec, query, limit)
            out.extend(page)
        return out, paths

    async def aplan() -> tuple[list[CheckpointTuple], dict[tuple[str, str], str]]:
        return await saver._arun(plan())

    return Native(lambda: saver._run(plan()), aplan)


def _put_writes(
    target: Any, t: CheckpointTuple, config: RunnableConfig, paths: dict[tuple[str, str], str]
) -> Plan[Command, int]:
    """Put a checkpoint's writes task by task; special writes apart, so indexes stay."""
    cid = _ns_id(t)[1]
    count = 0
    for task_id, group in itertools.groupby(t.pending_writes or (), key=lambda w: w[0]):
        writes = [(w[1], w[2]) for w in group]
        path = paths.get((cid, task_id), "")
        special = [w for w in writes if w[0] in WRITES_IDX_MAP]
        regular = [w for w in writes if w[0] not in WRITES_IDX_MAP]
        for part in (special, regular):
            if part:
                yield Call(target, "put_writes", (config, part, task_id, path))
                count += len(part)
    return count


@dataclass(frozen=True)
class _Owners:
    """How copied threads get their user: the metadata ``key``, and ``given`` for those
    whose source shows none."""

    key: str
    given: UserOf | None

    def shown(self, t: CheckpointTuple | None) -> Any:
        """The user ``t`` names (metadata, else a state channel), or ``None``."""
        if t is None:
            return None
        shown = t.metadata.get(self.key) if t.metadata else None
        if shown is None:
            shown = (t.checkpoint.get("channel_values") or {}).get(self.key)
        if (isinstance(shown, str) and shown) or (
            isinstance(shown, int) and not isinstance(shown, bool)
        ):
            return shown  # as the source has it (an int stays one)
        return None

    def of(self, thread_id: str, latest: CheckpointTuple | None) -> Any:
        shown = self.shown(latest)
        if shown is not None:
            return shown
        given = self.given
        if given is None or isinstance(given, str):
            return given
        found = given.get(thread_id) if isinstance(given, Mapping) else given(thread_id, latest)
        if found is not None and (not isinstance(found, str) or not found):
            raise InvalidConfigError(
                f"user_id for thread {thread_id!r} must be a non-empty string, got {found!r}"
            )
        return None if found is None else check_user_id(found, f"user_id for {thread_id!r}")


def _owners(target: Any, user_id: UserOf | None, user_key: str | None) -> _Owners:
    if user_id is not None and not (
        isinstance(user_id, Mapping) or callable(user_id) or (isinstance(user_id, str) and user_id)
    ):
        raise InvalidConfigError(
            f"user_id takes a user id, a mapping by thread id or a function, got {user_id!r}"
        )
    if isinstance(user_id, str):
        check_user_id(user_id)
    if user_key is None:
        threads = getattr(target, "threads", None)
        user_key = str(getattr(threads, "user_key", None) or "user_id")
    return _Owners(user_key, user_id)


def _look_back(
    source: Any, thread_id: str, owners: _Owners, batch: int
) -> Plan[Command, Any | None]:
    """The user of the newest root checkpoint that names one, read in pages of ``batch``
    (a service that resumed the thread with only its id leaves the latest without it; the
    thread is still its user's, not ``user_id=``'s)."""
    before: Any = None  # pages read whole (collect): no stream is left open
    while True:
        kwargs = {"limit": batch, **({"before": before} if before else {})}
        page: list[CheckpointTuple] = yield Call(
            source, "list", (_thread_config(thread_id, ""),), kwargs, collect=True
        )
        found = next((u for u in map(owners.shown, page) if u is not None), None)
        if found is not None or len(page) < batch:
            return found
        before = page[-1].config


def _owned(t: CheckpointTuple, key: str, owner: Any) -> Any:
    """``t``'s metadata, with the thread's owner where it names none."""
    if owner is None or t.metadata.get(key) is not None:
        return t.metadata
    return {**t.metadata, key: owner}


def _copy_thread(
    source: Any,
    target: Any,
    thread_id: str,
    report: CopyReport,
    batch: int,
    progress: Any,
    owners: _Owners,
) -> Plan[Command, Any]:
    """Copy one thread; returns the owner written where the source showed none."""
    latest = yield Call(source, "get_tuple", (_thread_config(thread_id, ""),))
    owner = owners.shown(latest)
    if latest is not None and owner is None and _kind(source) in ("", "memory"):
        # The catalogue pages through the thread anyway: it notes the newest root
        # checkpoint naming a user, so the thread is read once.
        seen: list[Any] = []
        have = yield from _catalogue(source, thread_id, batch, seen=(owners.shown, seen))
        owner = seen[0] if seen else None
    else:
        if latest is not None and owner is None:
            owner = yield from _look_back(source, thread_id, owners, batch)
        have = yield from _catalogue(source, thread_id, batch)
    if owner is None:
        owner = owners.of(thread_id, latest)
    # A re-run (after a crash, or with user_id= added) attributes what an earlier run
    # copied without the owner: those checkpoints are put again with it.
    unowned: set[tuple[str, str]] = set()
    there = yield from _catalogue(
        target, thread_id, batch, None if owner is None else (owners.key, unowned)
    )
    recent: OrderedDict[str, dict[str, Any]] = OrderedDict()  # channel versions, by id
    for ns in sorted(have):
        ids = sorted(have[ns])
        theirs = there.get(ns, {})
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            todo = {c for c in chunk if theirs.get(c) != have[ns][c] or (ns, c) in unowned}
            report.checkpoints_skipped += len(chunk) - len(todo)
            if not todo:
                continue
            after = ids[start + batch] if start + batch < len(ids) else None
            tuples, paths = yield from _read_batch(source, thread_id, ns, chunk, after)
            for t in tuples:
                cid = _ns_id(t)[1]
                versions = dict(t.checkpoint.get("channel_versions", {}))
                parent = _parent_id(t)
                if cid in todo:
                    if cid not in theirs or (ns, cid) in unowned:
                        before = recent.get(parent) if parent else None
                        new_versions = (
                            versions
                            if before is None
                            else {k: v for k, v in versions.items() if before.get(k) != v}
                        )
                        put_config = _thread_config(thread_id, ns, parent)
                        yield Call(
                            target,
                            "put",
                            (put_config, t.checkpoint, _owned(t, owners.key, owner), new_versions),
                        )
                    if theirs.get(cid) != have[ns][cid]:
                        # The writes name the checkpoint's user too: a saver that refuses
                        # that user's writes (an erasure's hold) refuses them as the put.
                        writes_config = _thread_config(thread_id, ns, cid)
                        who = _owned(t, owners.key, owner).get(owners.key)
                        if who is not None:
                            writes_config["configurable"][owners.key] = who
                        report.writes_copied += yield from _put_writes(
                            target, t, writes_config, paths
                        )
                    report.checkpoints_copied += 1
                    report.thread_id = thread_id
                    if progress is not None:
                        progress(report)
                recent[cid] = versions
                if len(recent) > 2 * batch:
                    recent.popitem(last=False)
    return owner


Known = dict[str, tuple[Any, Any]]
"""Per channel, the latest (version, value) a side returned in one namespace."""


def _values(t: CheckpointTuple, known: Known) -> dict[str, Any]:
    """A checkpoint's channel values, with the value of an unchanged version filled in.

    Savers answer differently for a ``DeltaChannel`` whose version did not change since
    its snapshot: one storing whole checkpoints (LangGraph's SQLite) leaves it out, one
    storing values by version (LangGraph's PostgreSQL, ours) returns the snapshot. Both
    mean the same value, so both sides are compared with it filled in.
    """
    values = dict(t.checkpoint.get("channel_values") or {})
    for channel, version in (t.checkpoint.get("channel_versions") or {}).items():
        if channel in values:
            known[channel] = (version, values[channel])
        elif channel in known and known[channel][0] == version:
            values[channel] = known[channel][1]
    return values


def _differences(
    a: CheckpointTuple | None,
    b: CheckpointTuple | None,
    where: str,
    known: tuple[Known, Known],
    owned: tuple[str, Any] = ("", None),
) -> list[str]:
    if a is None or b is None:
        return [f"{where}: missing on the {'source' if a is None else 'target'}"]
    out = []
    ca, cb = dict(a.checkpoint), dict(b.checkpoint)
    ca["channel_values"], cb["channel_values"] = _values(a, known[0]), _values(b, known[1])
    for key in sorted(set(ca) | set(cb)):
        if key == "pending_sends" and not ca.get(key) and not cb.get(key):
            continue
        if ca.get(key) != cb.get(key):
            out.append(f"{where}: checkpoint {key} differs")
    if dict(_owned(a, *owned)) != dict(b.metadata):
        out.append(f"{where}: metadata differs")
    if _parent_id(a) != _parent_id(b):
        out.append(f"{where}: parent differs ({_parent_id(a)} != {_parent_id(b)})")
    if list(a.pending_writes or ()) != list(b.pending_writes or ()):
        out.append(f"{where}: pending writes differ")
    return out


def _verify_thread(
    source: Any, target: Any, thread_id: str, batch: int, owned: tuple[str, Any]
) -> Plan[Command, list[str]]:
    """Every checkpoint of the thread, read with ``get_tuple`` on both sides, compared
    (``owned``: the metadata key and the owner the copy added where the source had none)."""
    have = yield from _catalogue(source, thread_id, batch)
    there = yield from _catalogue(target, thread_id, batch)
    out = []
    for ns in sorted(set(have) | set(there)):
        known: tuple[Known, Known] = ({}, {})
        for cid in sorted(set(have.get(ns, {})) | set(there.get(ns, {}))):
            config = _thread_config(thread_id, ns, cid)
            a = yield Call(source, "get_tuple", (config,))
            b = yield Call(target, "get_tuple", (config,))
            out.extend(_differences(a, b, f"{thread_id}/{ns or '-'}/{cid}", known, owned))
    return out


def _check_batch(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def _check_ids(thread_ids: Sequence[str] | None) -> list[str] | None:
    if thread_ids is None:
        return None
    if isinstance(thread_ids, str):
        raise InvalidConfigError("thread_ids takes a list of thread ids, not a single string")
    return [str(t) for t in thread_ids]


def _copy_threads_plan(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None,
    progress: Progress | None,
    verify: bool,
    batch: int,
    owners: _Owners,
) -> Plan[Command, CopyReport]:
    if source is target:
        raise InvalidConfigError("copy_threads needs two different savers")
    ids = _check_ids(thread_ids)
    if ids is None:
        ids = yield from _thread_ids(source, batch)
    report = CopyReport()
    for thread_id in ids:
        owner = yield from _copy_thread(source, target, thread_id, report, batch, progress, owners)
        if verify:
            report.differences.extend(
                (yield from _verify_thread(source, target, thread_id, batch, (owners.key, owner)))
            )
        report.threads.append(thread_id)
        report.threads_done += 1
        report.thread_id = thread_id
        if progress is not None:
            progress(report)
    return report


def copy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    verify: bool = False,
    batch_size: int = DEFAULT_BATCH,
    user_id: UserOf | None = None,
    user_key: str | None = None,
) -> CopyReport:
    """Copy threads (all of them by default) from ``source`` into ``target``.

    Safe to re-run: what the target already holds is skipped. ``progress`` is called with
    the running counts after each copied checkpoint and each finished thread (an exception
    it raises stops the copy; a re-run resumes). ``verify``: compare every checkpoint of
    every copied thread on both sides afterwards; see ``CopyReport.differences``.

    The thread's user (``user_key``: the target index's user key, else ``user_id``) is
    carried over from its latest checkpoint's metadata or state; ``user_id`` attributes
    the threads that show none (a run given ``context=`` left none in LangGraph's savers):
    one id, ``{thread_id: user}``, or ``f(thread_id, latest_checkpoint) -> user | None``.
    """
    plan = _copy_threads_plan(
        source, target, thread_ids, progress, verify, _check_batch(batch_size),
        _owners(target, user_id, user_key),
    )  # fmt: skip
    return drive(plan, _run_sync)


async def acopy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    verify: bool = False,
    batch_size: int = DEFAULT_BATCH,
    user_id: UserOf | None = None,
    user_key: str | None = None,
) -> CopyReport:
    """:func:`copy_threads` with the savers' async methods."""
    plan = _copy_threads_plan(
        source, target, thread_ids, progress, verify, _check_batch(batch_size),
        _owners(target, user_id, user_key),
    )  # fmt: skip
    return await adrive(plan, _run_async)


def _verify_plan(
    source: Any, target: Any, thread_ids: Sequence[str] | None, batch: int
) -> Plan[Command, list[str]]:
    ids = _check_ids(thread_ids)
    if ids is None:
        ids = yield from _thread_ids(source, batch)
    out: list[str] = []
    for thread_id in ids:
        out.extend((yield from _verify_thread(source, target, thread_id, batch, ("", None))))
    return out


def verify_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH,
) -> list[str]:
    """The differences between the threads on both sides (empty: equal)."""
    return drive(_verify_plan(source, target, thread_ids, _check_batch(batch_size)), _run_sync)


async def averify_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH,
) -> list[str]:
    """Async :func:`verify_threads`."""
    plan = _verify_plan(source, target, thread_ids, _check_batch(batch_size))
    return await adrive(plan, _run_async)


def list_thread_ids(
    saver: BaseCheckpointSaver[Any], *, batch_size: int = DEFAULT_BATCH
) -> list[str]:
    """Every thread id of ``saver`` (LangGraph's savers: from their tables; others: by
    streaming ``list(None)``, which reads every checkpoint)."""
    return drive(_thread_ids(saver, _check_batch(batch_size)), _run_sync)


async def alist_thread_ids(
    saver: BaseCheckpointSaver[Any], *, batch_size: int = DEFAULT_BATCH
) -> list[str]:
    """Async :func:`list_thread_ids`."""
    return await adrive(_thread_ids(saver, _check_batch(batch_size)), _run_async)


# -- stores --------------------------------------------------------------------------------


def _copy_store_plan(
    source: BaseStore,
    target: BaseStore,
    prefix: tuple[str, ...],
    progress: Progress | None,
    batch: int,
) -> Plan[Command, CopyReport]:
    if source is target:
        raise InvalidConfigError("copy_store needs two different stores")
    report = CopyReport()
    offset = 0
    while True:
        namespaces: list[tuple[str, ...]] = yield Call(
            source,
            "list_namespaces",
            (),
            {"prefix": prefix or None, "limit": batch, "offset": offset},
        )
        for ns in namespaces:
            yield from _copy_namespace(source, target, ns, report, batch, progress)
        if len(namespaces) < batch:
            return report
        offset += batch


def _copy_namespace(
    source: BaseStore,
    target: BaseStore,
    ns: tuple[str, ...],
    report: CopyReport,
    batch: int,
    progress: Progress | None,
) -> Plan[Command, None]:
    """The items of exactly ``ns`` (not its children: their namespaces come on their own)."""
    offset, seen = 0, set[str]()
    while True:
        page: list[Item] = yield Call(source, "search", (ns,), {"limit": batch, "offset": offset})
        mine = [i for i in page if tuple(i.namespace) == ns and i.key not in seen]
        seen.update(i.key for i in mine)
        if mine:
            there = yield Call(target, "batch", ([GetOp(ns, i.key) for i in mine],))
            puts = [
                PutOp(ns, i.key, i.value)
                for i, t in zip(mine, there, strict=True)
                if t is None or t.value != i.value
            ]
            if puts:
                yield Call(target, "batch", (puts,))
            report.items_copied += len(puts)
            report.items_skipped += len(mine) - len(puts)
            if progress is not None:
                progress(report)
        if len(page) < batch:
            return
        offset += batch


def copy_store(
    source: BaseStore,
    target: BaseStore,
    namespace_prefix: Sequence[str] = (),
    *,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> CopyReport:
    """Copy every item under ``namespace_prefix`` from ``source`` into ``target``.

    Items the target already holds with an equal value are skipped, so a re-run resumes.
    Values and keys are kept; ``created_at`` / ``updated_at`` become the time of the copy
    and the target's default TTL applies (``BaseStore.put`` takes neither), and items are
    indexed for semantic search as the target's ``index`` config says.
    """
    plan = _copy_store_plan(
        source, target, tuple(namespace_prefix), progress, _check_batch(batch_size)
    )
    return drive(plan, _run_sync)


async def acopy_store(
    source: BaseStore,
    target: BaseStore,
    namespace_prefix: Sequence[str] = (),
    *,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> CopyReport:
    """Async :func:`copy_store`."""
    plan = _copy_store_plan(
        source, target, tuple(namespace_prefix), progress, _check_batch(batch_size)
    )
    return await adrive(plan, _run_async)


__all__ = [
    "CopyProgress",
    "CopyReport",
    "acopy_store",
    "acopy_threads",
    "alist_thread_ids",
    "averify_threads",
    "copy_store",
    "copy_threads",
    "list_thread_ids",
    "verify_threads",
]
