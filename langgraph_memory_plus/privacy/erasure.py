"""Forget a user: ``erase_user`` / ``aerase_user`` across every kind of memory.

A user lives in many places: the checkpoints of every thread the thread index
attributes to them (whatever the thread ids look like), the threads of pending writes
only that their runs left (a run that died before its first put: no index record; found
by the owner in waiting the writes named, see ``CheckpointPlans.pending_threads``),
those threads' transcripts,
their session entries (the index records), store items under the namespace templates
declared as user data (:func:`~langgraph_memory_plus.store.namespaces.declare_user_data`;
the package's own writers take their defaults from those declarations: profile,
memories, task drafts, their vectors), and approval decisions. Erasure removes all of it, except
the decision records of ``approvals.Approvals`` (in the store, ``approvals_namespace``):
they are audit, so they are anonymized instead (:func:`anonymized`).

One core, :func:`_erase`, a plan yielding small steps that a sync or an async runner
executes against the saver and the store. Every step is bounded (``batch_size``
threads, lines or items), each thread goes through the saver's own
``delete_thread`` (its tombstone refuses the late writes of a run still going), and
the order makes a crash harmless: a thread's transcript goes before the thread, so a
thread that survives a crash still points to what is left, and repeating the call
finishes the job. Once the threads are gone (their tombstones refuse late writes), their
transcripts are dropped once more: a run still going may have recorded lines in between.
A second call reports zeros. Before all that, the saver records an erased-user hold (a
digest of the user), renewed for every page of their threads: until it ends (or
:func:`lift_erasure`), the saver drops every write of the user's runs, so a run still
going cannot start a new thread of theirs. A thread written again after its deletion
(no hold, or one that lapsed) is listed again and deleted again.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import BaseStore, PutOp

from ..drivers.plan import Plan, adrive, drive
from ..errors import InvalidConfigError
from ..store.base import StoreBase
from ..store.namespaces import declared_user_data, template_fields, user_namespace
from ..store.tombstones import DEFAULT_HOLD_HOURS, check_hold
from ..threads.core import check_user_id, index_value, user_values

Namespace = tuple[str, ...]
DEFAULT_BATCH_SIZE = 100
MAX_LISTINGS = 3
"""How often the erasure deletes a thread that keeps coming back before it gives up."""
logger = logging.getLogger("langgraph_memory_plus.privacy")


@dataclass
class ErasureReport:
    """What an erasure removed (or, for a dry run, would remove)."""

    user_id: str
    dry_run: bool
    counts: dict[str, int] = field(default_factory=dict)
    """Per kind: ``threads``, ``checkpoints``, ``transcript_messages``,
    ``store_items``, ``drafts``, ``approvals_anonymized``."""
    thread_ids: list[str] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    """The namespace templates, filled in with the user id."""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (the CLI's ``--json`` output)."""
        return {
            "user_id": self.user_id,
            "dry_run": self.dry_run,
            "counts": dict(self.counts),
            "thread_ids": list(self.thread_ids),
            "namespaces": [list(ns) for ns in self.namespaces],
            "duration_s": round(self.duration_s, 6),
        }


@dataclass(frozen=True)
class ErasureProgress:
    """Handed to the ``progress`` callback after every batch."""

    kind: str
    """``threads``, ``transcript_messages``, ``store_items`` or ``approvals``."""
    done: int
    """How many of that kind so far."""


APPROVALS_NAMESPACE: Namespace = ("approvals", "decisions")
"""Where ``approvals.Approvals`` keeps decision records (its default namespace)."""
REDACTED = "[erased]"
_IDENTIFYING = ("user_id", "thread_id")
"""Decision record fields replaced by the opaque id (a thread id may name the user)."""


def _redact(value: Any) -> Any:
    """``value`` with its structure kept and every scalar replaced: field names stay."""
    if isinstance(value, Mapping):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    return None if value is None else REDACTED


def anonymized(record: Mapping[str, Any], opaque: str) -> dict[str, Any]:
    """A decision record with the user gone and the audit kept.

    The user id and thread id become ``opaque`` (``erased:<random>``); the action
    arguments, the edited arguments and the reviewer's message are redacted (field
    names kept); the decision, reviewer, action names, ids and times stay.
    """
    out = dict(record)
    for name in _IDENTIFYING:
        if name in out:
            out[name] = opaque
    for name in ("args", "message"):
        if out.get(name) is not None:
            out[name] = _redact(out[name])
    if isinstance(out.get("actions"), list):
        out["actions"] = [
            {**a, "args": _redact(a.get("args"))} if isinstance(a, Mapping) else _redact(a)
            for a in out["actions"]
        ]
    return out


# -- steps ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Threads:
    """Up to ``limit`` of the user's threads (the user key's value ``value``), from
    ``offset``: least recently updated first, or by thread id (``by_id``: an order that
    writes meanwhile do not change, for a dry run's offsets)."""

    value: str | int
    offset: int
    limit: int
    by_id: bool = False


@dataclass
class _DryCursor:
    """Where a dry run reads its next page of the user's threads.

    A dry run deletes nothing, so it pages, by thread id: an order writes do not change
    (every backend orders the ids by their UTF-8 bytes, which is Python's order of the
    strings too). A deletion meanwhile moves the ids after it forward, so each window
    reaches one batch back over what was read: up to a batch of deletions between two
    pages skips nothing. A window that starts past the last id read means more went
    (what follows may sit before it): the cursor starts over from the first thread,
    skipping the ids it read, a few times at most.
    """

    batch_size: int
    offset: int = 0
    last: str | None = None
    restarts: int = 0

    def window(self) -> tuple[int, int]:
        """The next read's offset and limit."""
        start = 0 if self.last is None else max(0, self.offset - self.batch_size)
        return start, self.batch_size + (self.offset - start)

    def take(self, start: int, limit: int, window: list[Any]) -> tuple[list[Any], bool] | None:
        """The window's threads after the last id read, and whether it reached the end;
        ``None`` when the cursor starts over."""
        last = self.last
        if last is not None and start > 0 and (not window or window[0]["thread_id"] > last):
            self.restarts += 1
            if self.restarts > MAX_LISTINGS:
                raise RuntimeError(
                    "the user's threads were deleted faster than the dry run could list "
                    "them: run it again"
                )
            self.offset = 0
            return None
        page = [r for r in window if last is None or r["thread_id"] > last]
        if page:
            self.last = page[-1]["thread_id"]
        self.offset = start + len(window)
        return page, len(window) < limit


@dataclass(frozen=True)
class _Index:
    """A plan of the saver's thread index (``method`` of ``saver._plans.threads``, the
    transcript hooks), run with the saver's runner."""

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Hold:
    """Refuse the user's checkpoint writes for ``seconds`` (the saver's hold), before
    their threads are looked for: a run of theirs still going cannot store a thread
    after the sweep."""

    owner: str
    seconds: float


@dataclass(frozen=True)
class _DeleteThread:
    thread_id: str


@dataclass(frozen=True)
class _Pending:
    """Up to ``limit`` of the user's threads of pending writes only (no index record:
    their put never came), after ``cursor``; the saver's ``pending_threads`` (``forget``:
    drop stale marks met, a real run only). Reply: their ids and the next cursor."""

    owner: str
    cursor: Any
    limit: int
    forget: bool


@dataclass(frozen=True)
class _ForgetPending:
    """After their deletion: the marks of these threads kept apart from them (Redis)."""

    owner: str
    thread_ids: list[str]


@dataclass(frozen=True)
class _Items:
    namespace: Namespace
    offset: int
    limit: int


@dataclass(frozen=True)
class _DeleteItems:
    keys: list[tuple[Namespace, str]]


@dataclass(frozen=True)
class _Tombstone:
    """Drop every later put under ``namespace`` for ``hold_seconds`` (the store's
    ``tombstone_namespace``), before its items go."""

    namespace: Namespace
    hold_seconds: float


@dataclass(frozen=True)
class _Seal:
    """``delete_namespace``: what a put that was under way when the tombstone came wrote;
    on Redis it also closes the shards a short tombstone covers (see the store's plans)."""

    namespace: Namespace


@dataclass(frozen=True)
class _Records:
    """Up to ``limit`` decision records of the user, from ``offset``."""

    namespace: Namespace
    user_id: str
    offset: int
    limit: int


@dataclass(frozen=True)
class _PutItems:
    items: list[tuple[Namespace, str, dict[str, Any]]]


_Step = (
    _Threads
    | _Pending
    | _ForgetPending
    | _Hold
    | _Index
    | _DeleteThread
    | _Items
    | _DeleteItems
    | _Tombstone
    | _Seal
    | _Records
    | _PutItems
)


def declared_templates() -> list[Namespace]:
    """The namespace templates declared as user data (the default of ``erase_user``),
    without those another one already covers as a prefix.

    The package's own writers are declared in ``store.namespaces`` itself, so the list is
    whole even in a process (the CLI) that never imported them.
    """
    return _minimal(d.template for d in declared_user_data())


def _minimal(templates: Iterable[Namespace]) -> list[Namespace]:
    """``templates`` in order, less repeats and those under another one (a prefix erases
    what is below it)."""
    unique = list(dict.fromkeys(templates))
    return [t for t in unique if not any(o != t and o == t[: len(o)] for o in unique)]


def _namespaces(user_id: str, extra: Sequence[Sequence[str]]) -> list[Namespace]:
    """The declared templates and ``extra`` ones, filled in for ``user_id``."""
    given: list[Namespace] = []
    for template in extra:
        labels = tuple(template)
        if isinstance(template, str) or not labels or template_fields(labels) != {"user_id"}:
            # A template without the user id would erase everyone's items.
            raise InvalidConfigError(
                f"namespace template {labels!r} must name '{{user_id}}' (and no other "
                "placeholder) in its labels"
            )
        given.append(labels)
    templates = _minimal([*declared_templates(), *given])
    return [user_namespace(t, user_id) for t in templates]


def _erase(
    user_id: str,
    namespaces: list[Namespace],
    *,
    has_saver: bool,
    has_store: bool,
    approvals: Namespace | None,
    dry_run: bool,
    batch_size: int,
    progress: Callable[[ErasureProgress], None] | None,
    hold_seconds: float | None = None,
    saver_hold: float | None = None,
) -> Plan[_Step, ErasureReport]:
    """The whole erasure, as steps; see the module docstring for the order.

    ``hold_seconds``: tombstone each namespace for that long first (``None``: the store
    keeps no tombstones, or the caller asked for none). ``saver_hold``: the same for the
    user's checkpoint writes (the saver's erased-user hold).
    """
    started = time.monotonic()
    report = ErasureReport(user_id, dry_run, namespaces=list(namespaces))
    counts = dict.fromkeys(
        (
            "threads",
            "checkpoints",
            "transcript_messages",
            "store_items",
            "drafts",
            "approvals_anonymized",
        ),
        0,
    )

    def tell(kind: str, done: int) -> None:
        if progress is not None:
            progress(ErasureProgress(kind, done))

    # "5" is also the user of a run given user_id=5 (stored as a number)
    values = user_values(user_id)
    owners = [index_value(v) for v in values]
    reported: set[str] = set()  # a dry run's threads so far, of every value
    if has_saver and saver_hold is not None and not dry_run:
        for owner in owners:
            assert owner is not None  # a string or an int always has one
            yield _Hold(owner, saver_hold)
    for value, owner in zip(values if has_saver else [], owners, strict=False):
        # Transcript lines are recorded under the owner as the index stores a value;
        # in the user's threads only theirs go (a reused thread id keeps others' lines).
        assert owner is not None
        listed: dict[str, int] = {}  # how often each thread was listed
        cursor = _DryCursor(batch_size)
        while True:
            if listed and saver_hold is not None and not dry_run:
                # Renewed for every page: a hold shorter than the erasure lapses midway.
                yield _Hold(owner, saver_hold)
            if dry_run:
                start, limit = cursor.window()
                window: list[Any] = yield _Threads(value, start, limit, by_id=True)
                taken = cursor.take(start, limit, window)
                if taken is None:
                    continue
                page, ended = taken
                # A thread run again with the user's other value ("5" then 5) meanwhile
                # is listed under both: reported once.
                page = [r for r in page if r["thread_id"] not in reported]
                reported.update(r["thread_id"] for r in page)
            else:  # deleted threads leave the index: a real run always reads page one
                page = yield _Threads(value, 0, batch_size)
                ended = not page
            if not page:
                if ended:
                    break
                continue
            ids = [r["thread_id"] for r in page]
            again = [i for i in ids if i in listed]
            for i in ids:
                listed[i] = listed.get(i, 0) + 1
            if again and not dry_run:
                # Written after its deletion: with no hold (or one shorter than the
                # erasure), a run of the user still going stores its thread again. It is
                # the user's, so it goes again; a thread that keeps coming back, or an
                # index that keeps listing what was deleted, stops the erasure.
                if max(listed[i] for i in again) > MAX_LISTINGS:
                    raise RuntimeError(
                        f"thread(s) of the user listed {MAX_LISTINGS + 1} times, deleted "
                        "each time: a run of the user is still writing them (no erasure "
                        "hold, or tombstone_hours shorter than the erasure) or the thread "
                        "index does not drop deleted threads"
                    )
                logger.warning(
                    "deleted again %d thread(s) written since their deletion", len(again)
                )
            counts["transcript_messages"] += yield _Index("drop_transcripts", (ids, dry_run, owner))
            for record in page:
                if not dry_run:
                    yield _DeleteThread(record["thread_id"])
                counts["checkpoints"] += int(record["size"]["checkpoints"])
            if not dry_run:
                # A run still going may have stored a checkpoint, and its lines, between
                # the two steps above; the tombstones refuse any after, so this is the last.
                counts["transcript_messages"] += yield _Index(
                    "drop_transcripts", (ids, False, owner)
                )
            fresh = [i for i in ids if i not in again]
            report.thread_ids.extend(fresh)
            counts["threads"] += len(fresh)
            tell("threads", counts["threads"])
            if dry_run and ended:
                break
        # Threads of pending writes only (their put never came: the run's process died
        # between the two): not in the index, found by the owner their writes named. A
        # thread that got its put since is the index's, listed above.
        cursor_at: Any = None
        while True:
            pending, cursor_at = yield _Pending(owner, cursor_at, batch_size, not dry_run)
            pending = [i for i in pending if i not in reported and i not in listed]
            if not dry_run:
                for i in pending:
                    yield _DeleteThread(i)
                yield _ForgetPending(owner, pending)
            reported.update(pending)
            report.thread_ids.extend(pending)
            counts["threads"] += len(pending)
            if pending:
                tell("threads", counts["threads"])
            if cursor_at is None:
                break
        if not dry_run and saver_hold is not None:
            # What the user's own index entries still hold (Redis: sets). Only under the
            # hold: without it a run of the user's may have written a thread since the
            # last page, which must stay findable (by sessions, by the next erasure).
            yield _Index("drop_owner_sets", (owner,))
        # Lines of the user's threads deleted earlier (transcripts outlive threads), and
        # this owner's lines in threads listed under the user's other value ("5" and 5):
        # only this value's threads had this owner's lines counted (and dropped) above.
        while True:
            n: int = yield _Index(
                "drop_owned_transcripts", (owner, batch_size, dry_run, list(listed))
            )
            counts["transcript_messages"] += n
            tell("transcript_messages", counts["transcript_messages"])
            if dry_run or n < batch_size:
                break
    if has_store:
        for namespace in namespaces:
            if hold_seconds is not None and not dry_run:
                yield _Tombstone(namespace, hold_seconds)
            offset = 0
            while True:
                items: list[Any] = yield _Items(namespace, offset, batch_size)
                if not items:
                    break
                for item in items:
                    kind = "drafts" if "pending_tasks" in item.namespace else "store_items"
                    counts[kind] += 1
                if dry_run:
                    offset += len(items)
                else:
                    yield _DeleteItems([(tuple(i.namespace), i.key) for i in items])
                tell("store_items", counts["store_items"] + counts["drafts"])
            if hold_seconds is not None and not dry_run:
                counts["store_items"] += yield _Seal(namespace)
    if has_store and approvals is not None:
        opaque = f"erased:{secrets.token_hex(12)}"
        offset = 0
        while True:
            records: list[Any] = yield _Records(approvals, user_id, offset, batch_size)
            if not records:
                break
            counts["approvals_anonymized"] += len(records)
            if dry_run:
                offset += len(records)
            else:
                yield _PutItems(
                    [(tuple(r.namespace), r.key, anonymized(r.value, opaque)) for r in records]
                )
            tell("approvals", counts["approvals_anonymized"])
    report.counts = counts
    report.duration_s = time.monotonic() - started
    return report


# -- running it ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    checkpointer: Any
    store: BaseStore | None
    user_key: str
    hold_seconds: float | None
    """How long erased namespaces stay tombstoned; ``None``: not at all (asked for, or a
    store that keeps no tombstones: this package's stores do)."""
    saver_hold: float | None = None
    """How long the saver refuses the erased user's writes; ``None``: not at all."""


def _target(memory: Any, checkpointer: Any, store: Any, tombstone_hours: Any) -> _Target:
    if memory is not None:
        if checkpointer is not None or store is not None:
            raise InvalidConfigError("pass memory= or checkpointer=/store=, not both")
        checkpointer, store = memory.checkpointer, memory.store
    if checkpointer is None and store is None:
        raise InvalidConfigError("erase_user needs memory=, checkpointer= or store=")
    user_key = "user_id"
    if checkpointer is not None:
        if not hasattr(checkpointer, "threads") or not hasattr(checkpointer, "_plans"):
            raise InvalidConfigError(
                f"{type(checkpointer).__name__} keeps no thread index: erasure needs one of "
                "this package's savers"
            )
        user_key = checkpointer.threads.user_key
    if store is not None and not isinstance(store, BaseStore):
        raise InvalidConfigError(f"store must be a BaseStore, got {type(store).__name__}")
    hold = _hold(tombstone_hours)
    return _Target(
        checkpointer,
        store,
        user_key,
        hold if isinstance(store, StoreBase) else None,
        hold if checkpointer is not None else None,
    )


def _check(user_id: Any, batch_size: Any) -> None:
    if not isinstance(user_id, str) or not user_id.strip():
        raise InvalidConfigError(f"user_id must be a non-empty string, got {user_id!r}")
    check_user_id(user_id)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")


def _hold(tombstone_hours: Any) -> float | None:
    """The tombstones' hold in seconds; ``None`` for none (``tombstone_hours`` None or 0)."""
    number = not isinstance(tombstone_hours, bool) and isinstance(tombstone_hours, (int, float))
    if tombstone_hours is None or (number and tombstone_hours == 0):
        return None
    try:
        return check_hold(tombstone_hours * 3600 if number else math.nan)
    except InvalidConfigError:
        raise InvalidConfigError(
            f"tombstone_hours must be a positive number of hours (up to a year) or None, "
            f"got {tombstone_hours!r}"
        ) from None


def _plan(
    user_id: Any,
    target: _Target,
    namespaces: Sequence[Sequence[str]],
    approvals_namespace: Sequence[str] | None,
    dry_run: bool,
    batch_size: Any,
    progress: Callable[[ErasureProgress], None] | None,
) -> Plan[_Step, ErasureReport]:
    _check(user_id, batch_size)
    return _erase(
        user_id,
        _namespaces(user_id, namespaces),
        has_saver=target.checkpointer is not None,
        has_store=target.store is not None,
        approvals=None if approvals_namespace is None else tuple(approvals_namespace),
        dry_run=bool(dry_run),
        batch_size=batch_size,
        progress=progress,
        hold_seconds=target.hold_seconds,
        saver_hold=target.saver_hold,
    )


def _shred(report: ErasureReport, target: _Target, user_id: str, drop_key: bool) -> ErasureReport:
    """Crypto-shredding after an erasure: drop the user's tenant key (``drop_key``)."""
    if not drop_key:
        return report
    encs = [getattr(c, "encryption", None) for c in (target.checkpointer, target.store)]
    tenants = {id(e.tenant_keys): e.tenant_keys for e in encs if e and e.tenant_keys}
    if not tenants:
        raise InvalidConfigError(
            "drop_key needs per-tenant keys: Encryption(tenant_keys=...) on the saver or store"
        )
    if report.dry_run:
        return report
    dropped = [keys.drop(user_id) for keys in tenants.values()]
    report.counts["keys_dropped"] = int(any(dropped))
    return report


def _search_args(target: _Target, user_id: str, step: _Threads) -> Mapping[str, Any]:
    return {
        "metadata": {target.user_key: step.value},
        "sort_by": "thread_id" if step.by_id else "updated_at",
        "sort_order": "asc",
        "limit": step.limit,
        "offset": step.offset,
    }


def _pending_plan(saver: Any, step: _Pending) -> Plan[Any, tuple[list[str], Any]]:
    plans = saver._plans
    return plans.pending_threads(step.owner, step.cursor, step.limit, step.forget)  # type: ignore[no-any-return]


def _deletes(step: _DeleteItems) -> list[PutOp]:
    return [PutOp(ns, key, None) for ns, key in step.keys]


def _items_args(step: _Items) -> dict[str, Any]:
    # No TTL refresh: a dry run changes nothing, and what erasure reads is going anyway.
    return {"limit": step.limit, "offset": step.offset, "refresh_ttl": False}


def _records_args(step: _Records) -> dict[str, Any]:
    return {
        "filter": {"user_id": step.user_id},
        "limit": step.limit,
        "offset": step.offset,
        "refresh_ttl": False,
    }


def _puts(step: _PutItems) -> list[PutOp]:
    # Decision records carry no TTL (the audit outlives the threads) and no vectors.
    return [PutOp(ns, key, value, index=False) for ns, key, value in step.items]


def erase_user(
    user_id: str,
    *,
    memory: Any = None,
    checkpointer: Any = None,
    store: BaseStore | None = None,
    namespaces: Sequence[Sequence[str]] = (),
    approvals_namespace: Sequence[str] | None = APPROVALS_NAMESPACE,
    dry_run: bool = False,
    progress: Callable[[ErasureProgress], None] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    tombstone_hours: float | None = DEFAULT_HOLD_HOURS,
    drop_key: bool = False,
) -> ErasureReport:
    """Remove everything of ``user_id``; returns what was removed.

    ``memory`` is what :func:`~langgraph_memory_plus.from_url` opens (or pass
    ``checkpointer=`` / ``store=``). Threads are those the saver's thread index
    attributes to the user (its user key, ``user_id`` by default); store items are
    those under every namespace the package's writers declare (:func:`declared_templates`:
    the memory tools' ``("memories", "{user_id}")``, the profile's and the task drafts'
    ``("users", "{user_id}", ...)``) and under ``namespaces``, templates of your own
    writers added to those (each names ``{user_id}``). The user id goes into a label as
    every writer puts it there (:func:`~langgraph_memory_plus.store.namespaces.label_value`:
    ``.`` and ``%`` percent-encoded), so any string works as a user id.
    Decision records under ``approvals_namespace`` (``None``: none kept) are anonymized,
    not deleted. ``dry_run`` changes nothing and reports what would go. Safe to repeat
    after a crash.

    Each erased namespace gets a tombstone first: for ``tombstone_hours`` (24 by default)
    the store drops every put under it, so a run of the user still going cannot write
    their data back; then writes work again (a user may sign up again with the same id;
    ``store.lift_tombstone(namespace)`` ends it earlier). For as long, the saver drops
    every checkpoint write of the user's runs, new threads included (the erased-user
    hold, placed before the threads are looked for); :func:`lift_erasure` ends both for a
    returning user (the hold counts from the last page of the user's threads: it is
    renewed for each). ``None`` or ``0``: no tombstones and no hold.

    ``drop_key``: with per-tenant keys (``Encryption(tenant_keys=...)``), also drop the
    user's key once the erasure is done (crypto-shredding: what it sealed, in backups and
    replicas too, can no longer be read; see the README's "Encryption" for what it does
    not cover). ``counts["keys_dropped"]`` says whether there was one.
    """
    target = _target(memory, checkpointer, store, tombstone_hours)
    saver, items = target.checkpointer, target.store

    def execute(step: _Step) -> Any:
        if isinstance(step, _Threads):
            return saver.threads.search(**_search_args(target, user_id, step))
        if isinstance(step, _Index):
            return saver._run(getattr(saver._plans.threads, step.method)(*step.args))
        if isinstance(step, _Hold):
            return saver._run(saver._plans.hold_erased(step.owner, step.seconds))
        if isinstance(step, _DeleteThread):
            return saver.delete_thread(step.thread_id)
        if isinstance(step, _Pending):
            return saver._run(_pending_plan(saver, step))
        if isinstance(step, _ForgetPending):
            return saver._run(saver._plans.forget_pending(step.owner, step.thread_ids))
        assert items is not None
        if isinstance(step, _Items):
            return items.search(step.namespace, **_items_args(step))
        if isinstance(step, _DeleteItems):
            return items.batch(_deletes(step))
        if isinstance(step, _Tombstone):
            assert isinstance(items, StoreBase)  # target.hold_seconds
            return items.tombstone_namespace(step.namespace, hold_seconds=step.hold_seconds)
        if isinstance(step, _Seal):
            assert isinstance(items, StoreBase)
            return items.delete_namespace(step.namespace)
        if isinstance(step, _Records):
            return items.search(step.namespace, **_records_args(step))
        return items.batch(_puts(step))

    report = drive(
        _plan(user_id, target, namespaces, approvals_namespace, dry_run, batch_size, progress),
        execute,
    )
    return _shred(report, target, user_id, drop_key)


async def aerase_user(
    user_id: str,
    *,
    memory: Any = None,
    checkpointer: Any = None,
    store: BaseStore | None = None,
    namespaces: Sequence[Sequence[str]] = (),
    approvals_namespace: Sequence[str] | None = APPROVALS_NAMESPACE,
    dry_run: bool = False,
    progress: Callable[[ErasureProgress], None] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    tombstone_hours: float | None = DEFAULT_HOLD_HOURS,
    drop_key: bool = False,
) -> ErasureReport:
    """Async :func:`erase_user`."""
    target = _target(memory, checkpointer, store, tombstone_hours)
    saver, items = target.checkpointer, target.store

    async def execute(step: _Step) -> Any:
        if isinstance(step, _Threads):
            return await saver.threads.asearch(**_search_args(target, user_id, step))
        if isinstance(step, _Index):
            return await saver._arun(getattr(saver._plans.threads, step.method)(*step.args))
        if isinstance(step, _Hold):
            return await saver._arun(saver._plans.hold_erased(step.owner, step.seconds))
        if isinstance(step, _DeleteThread):
            return await saver.adelete_thread(step.thread_id)
        if isinstance(step, _Pending):
            return await saver._arun(_pending_plan(saver, step))
        if isinstance(step, _ForgetPending):
            return await saver._arun(saver._plans.forget_pending(step.owner, step.thread_ids))
        assert items is not None
        if isinstance(step, _Items):
            return await items.asearch(step.namespace, **_items_args(step))
        if isinstance(step, _DeleteItems):
            return await items.abatch(_deletes(step))
        if isinstance(step, _Tombstone):
            assert isinstance(items, StoreBase)  # target.hold_seconds
            return await items.atombstone_namespace(step.namespace, hold_seconds=step.hold_seconds)
        if isinstance(step, _Seal):
            assert isinstance(items, StoreBase)
            return await items.adelete_namespace(step.namespace)
        if isinstance(step, _Records):
            return await items.asearch(step.namespace, **_records_args(step))
        return await items.abatch(_puts(step))

    report = await adrive(
        _plan(user_id, target, namespaces, approvals_namespace, dry_run, batch_size, progress),
        execute,
    )
    return _shred(report, target, user_id, drop_key)


# -- a returning user ------------------------------------------------------------------


def _lift_targets(
    user_id: Any, memory: Any, checkpointer: Any, store: Any, namespaces: Sequence[Sequence[str]]
) -> tuple[Any, Any, list[str], list[Namespace]]:
    target = _target(memory, checkpointer, store, None)
    _check(user_id, 1)
    owners = [o for o in (index_value(v) for v in user_values(user_id)) if o is not None]
    spaces = _namespaces(user_id, namespaces) if isinstance(target.store, StoreBase) else []
    return target.checkpointer, target.store, owners, spaces


def lift_erasure(
    user_id: str,
    *,
    memory: Any = None,
    checkpointer: Any = None,
    store: BaseStore | None = None,
    namespaces: Sequence[Sequence[str]] = (),
) -> bool:
    """Let an erased user's data be written again before the hold ends (a user who
    signs up again with the same id).

    For ``tombstone_hours`` after :func:`erase_user`, the saver drops every checkpoint
    write of the user's runs and the store every put under the user's namespaces (the
    declared ones and ``namespaces``), so a run still going cannot bring the user back.
    This ends both now; whether there was a hold.
    """
    saver, items, owners, spaces = _lift_targets(user_id, memory, checkpointer, store, namespaces)
    lifted = False
    for owner in owners if saver is not None else []:
        lifted = bool(saver._run(saver._plans.lift_erased(owner))) or lifted
    for namespace in spaces:
        lifted = bool(items.lift_tombstone(namespace)) or lifted
    return lifted


async def alift_erasure(
    user_id: str,
    *,
    memory: Any = None,
    checkpointer: Any = None,
    store: BaseStore | None = None,
    namespaces: Sequence[Sequence[str]] = (),
) -> bool:
    """Async :func:`lift_erasure`."""
    saver, items, owners, spaces = _lift_targets(user_id, memory, checkpointer, store, namespaces)
    lifted = False
    for owner in owners if saver is not None else []:
        lifted = bool(await saver._arun(saver._plans.lift_erased(owner))) or lifted
    for namespace in spaces:
        lifted = bool(await items.alift_tombstone(namespace)) or lifted
    return lifted
