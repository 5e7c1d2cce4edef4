"""O(T) storage for list channels such as ``messages``.

LangGraph stores a channel's whole value again at every new version. For a chat's
``messages`` (``add_messages``) that is the whole conversation at every step: a T-turn
thread writes O(T^2) bytes and every step re-serializes the whole history. Here a list
value is stored as *items* (one per element, each serialized once) arranged in *pages*
of ``PAGE_SIZE`` item ids; a *spine* lists the full pages. A version's blob is only a
reference: the spine id plus the ids of the items after the last full page. Full pages
never change, so a new version costs the new items, at most one new page, one spine
(which changes once per ``PAGE_SIZE`` items) and a reference of at most ``PAGE_SIZE``
ids. Nothing about the user's state schema changes; a plain ``add_messages`` graph
gets this automatically.

Ids are keyed BLAKE2b hashes of the serialized bytes, keyed by the thread, so items are
deduplicated within a thread only and equal content in two threads gets unrelated ids
(no plaintext equality leaks across users; with ``EncryptedSerializer`` the hashed bytes
are ciphertext anyway).

Serializing every element at every step would still be O(T) work per step. So each saver
remembers, per thread namespace and channel, the last list it wrote or read: its element
objects, their item ids and a cheap fingerprint of each. A new value reuses the item id of
every element that is the *same object*, unchanged, and serializes only the rest. Reads
of a version whose items are known reuse those objects too, and fetch only the bytes of
unknown items. Stored items never change, so a remembered list is right as long as its
items are stored; a saver forgets a channel's lists once the channel holds something
else (retention may then delete their items), a thread's lists before its own deletes
(``prune``, ``delete_thread``, ``delete_for_runs``), and both when a read of the latest
checkpoint shows another process deleted the thread or replaced the list. A value from
another process simply misses.

One caveat, the same as for any state LangGraph hands to nodes: a node that edits a
message object from state must return it as an update. A reassigned field
(``msg.content = ...``) of a returned object is noticed (:func:`fingerprint`); an edit that
is not returned, or one inside a nested value (``msg.additional_kwargs["k"] = v``), is
not guaranteed to be.
"""

from __future__ import annotations

import hashlib
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

LIST_TYPE = "lgmp:list"
"""Blob type of a list stored as items; the blob's bytes are its :class:`ListRef`."""

PAGE_SIZE = 16
MIN_ITEMS = 16
"""Shorter lists of scalars are stored whole: a page structure would cost more than it
saves, and such lists are as often replaced as appended to."""
MIN_OBJECT_ITEMS = 2
"""Lists of objects (messages, documents, dicts) are stored as items from this length:
their elements are large and the list grows by appending, so storing each version whole
until ``MIN_ITEMS`` cost a chat's first turns more than all its items."""

_SCALARS = (type(None), bool, int, float, str, bytes)


def worth_chunking(value: Any) -> bool:
    """Whether a channel value is a list stored as items rather than whole."""
    if type(value) is not list:
        return False
    n = len(value)
    return n >= MIN_ITEMS or (n >= MIN_OBJECT_ITEMS and type(value[0]) not in _SCALARS)


ID_SIZE = 16
NO_SPINE = bytes(ID_SIZE)

Typed = tuple[str, bytes]


def item_id(thread_key: bytes, typ: str, data: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=ID_SIZE, key=thread_key, person=b"lgmp-item")
    h.update(typ.encode())
    h.update(b"\x00")
    h.update(data)
    return h.digest()


def node_id(thread_key: bytes, children: Sequence[bytes], kind: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=ID_SIZE, key=thread_key, person=b"lgmp-" + kind)
    for child in children:
        h.update(child)
    return h.digest()


def split_ids(raw: bytes) -> list[bytes]:
    return [raw[i : i + ID_SIZE] for i in range(0, len(raw), ID_SIZE)]


def fingerprint(value: Any) -> tuple[Any, ...] | None:
    """The objects ``value``'s fields hold; cheap (no serialization).

    Compared by identity (:func:`unchanged`), it tells when a field was reassigned. It
    holds the field values themselves, not their ``id()``: a replaced value that was
    freed could otherwise hand its address to the new one and hide the change.
    Immutable scalars need none: their identity is their content.
    """
    fields = getattr(value, "__dict__", None)
    if fields is not None:
        return tuple(fields.values())
    if isinstance(value, dict):
        return tuple(value.values())
    if isinstance(value, list):
        return tuple(value)
    return None


def unchanged(now: tuple[Any, ...] | None, then: tuple[Any, ...] | None) -> bool:
    """Whether two fingerprints hold the very same objects."""
    if now is None or then is None:
        return now is then
    return len(now) == len(then) and all(map(operator.is_, now, then))


@dataclass(frozen=True)
class ListRef:
    """What a list version's blob holds: its spine (or none) and the tail's item ids."""

    spine: bytes | None
    tail: list[bytes]

    def encode(self) -> bytes:
        return (self.spine or NO_SPINE) + b"".join(self.tail)

    @classmethod
    def decode(cls, raw: bytes) -> ListRef:
        spine = raw[:ID_SIZE]
        return cls(None if spine == NO_SPINE else spine, split_ids(raw[ID_SIZE:]))


@dataclass
class ListMemo:
    """One channel's last known list: the objects and the ids they are stored under."""

    ref: ListRef
    objects: list[Any]
    fingerprints: list[tuple[Any, ...] | None]
    item_ids: list[bytes]
    page_ids: list[bytes]
    """Ids of the stored full pages, in order; fewer (none) when not known to be stored."""
    positions: dict[int, int] | None = None
    """First position of each object by identity; built when first needed."""

    def position_of(self) -> dict[int, int]:
        if self.positions is None:
            self.positions = _positions(self.objects)
        return self.positions

    def by_item(self) -> dict[bytes, Any]:
        return dict(zip(self.item_ids, self.objects, strict=True))


@dataclass
class ChunkedList:
    """A list value split for storage: its reference and what is new."""

    ref: ListRef
    items: dict[bytes, Typed] = field(default_factory=dict)
    nodes: dict[bytes, list[bytes]] = field(default_factory=dict)
    memo: ListMemo | None = None


MemoKey = tuple[bytes, str, str]  # thread key, namespace, channel


class ListMemory:
    """Per-saver memory of recent lists, bounded and safe to share between threads.

    A channel keeps its last few lists, not just one: ``list()`` and history views read
    older versions, and those reads must not evict the version the next step builds on.
    The one used last is the one a put compares against.
    """

    def __init__(self, max_lists: int = 1024, versions_per_list: int = 8) -> None:
        self.max_lists = max_lists
        self.versions_per_list = versions_per_list
        self._lock = threading.Lock()
        self._memos: OrderedDict[MemoKey, OrderedDict[bytes, ListMemo]] = OrderedDict()  # by ref
        # Objects tasks returned as updates (they hold a reference, so ids stay unique).
        self._written: dict[MemoKey, dict[int, Any]] = {}

    def get(self, key: MemoKey) -> ListMemo | None:
        """The channel's list used last."""
        with self._lock:
            versions = self._memos.get(key)
            if not versions:
                return None
            self._memos.move_to_end(key)
            return next(reversed(versions.values()))

    def find(self, key: MemoKey, ref: ListRef) -> ListMemo | None:
        """The remembered list stored under ``ref``, which becomes the one used last."""
        with self._lock:
            versions = self._memos.get(key)
            raw = ref.encode()
            memo = versions.get(raw) if versions else None
            if versions is not None and memo is not None:
                versions.move_to_end(raw)
                self._memos.move_to_end(key)
            return memo

    def remember(self, key: MemoKey, memo: ListMemo) -> None:
        with self._lock:
            versions = self._memos.setdefault(key, OrderedDict())
            raw = memo.ref.encode()
            versions[raw] = memo
            versions.move_to_end(raw)
            while len(versions) > self.versions_per_list:
                versions.popitem(last=False)
            self._memos.move_to_end(key)
            while len(self._memos) > self.max_lists:
                self._memos.popitem(last=False)

    def note_written(self, key: MemoKey, objects: Iterable[Any]) -> None:
        """Remember objects a task returned for a remembered list, until its next put."""
        with self._lock:
            if key in self._memos:
                self._written.setdefault(key, {}).update((id(o), o) for o in objects)

    def take_written(self, key: MemoKey) -> dict[int, Any]:
        with self._lock:
            return self._written.pop(key, {})

    def forget(self, key: MemoKey) -> None:
        """Forget one channel's lists."""
        with self._lock:
            self._memos.pop(key, None)

    def forget_lists(self, thread_key: bytes) -> None:
        """Forget a thread's lists: their items may be deleted (retention, prune)."""
        with self._lock:
            for key in [k for k in self._memos if k[0] == thread_key]:
                del self._memos[key]

    def forget_thread(self, thread_key: bytes) -> None:
        """Forget all about a thread that is being deleted."""
        self.forget_lists(thread_key)
        with self._lock:
            for key in [k for k in self._written if k[0] == thread_key]:
                del self._written[key]

    def clear(self) -> None:
        """Forget every list (after deletes that may touch any thread)."""
        with self._lock:
            self._memos.clear()


def chunk_list(
    thread_key: bytes,
    values: list[Any],
    memo: ListMemo | None,
    dump: Callable[[Any], Typed],
    written: Mapping[int, Any] | None = None,
) -> ChunkedList:
    """Split ``values`` into items and pages, serializing only elements not in ``memo``.

    An element that is the same object as one in ``memo`` keeps its item id, unless it
    is among ``written`` (the objects this step's tasks returned as updates, which a
    node may have edited in place) and its fingerprint changed. The common case, an
    appended message, costs one identity check per element, done in C.
    """
    objects = memo.objects if memo is not None else []
    written = written or {}
    out = ChunkedList(ref=ListRef(None, []))
    # The common case, elements appended to the remembered list, is decided in C: the
    # longest prefix of the very same objects keeps its ids, except for objects a task
    # returned (and so may have edited in place) whose fingerprint changed.
    same = _same_prefix(values, objects)
    index_of: dict[int, int] | None = None
    if written and memo is not None:
        index_of = memo.position_of()
        for position in sorted(index_of.get(key, same) for key in written):
            if position < same and not unchanged(
                fingerprint(values[position]), memo.fingerprints[position]
            ):
                same = position
                break
    item_ids = memo.item_ids[:same] if memo is not None else []
    fingerprints = memo.fingerprints[:same] if memo is not None else []
    for i in range(same, len(values)):
        value = values[i]
        j: int | None = i if i < len(objects) and objects[i] is value else None
        # Looking an object up elsewhere only saves serializing it again (ids are content
        # hashes), so appended elements skip building the index unless a shift did.
        if j is None and memo is not None and (index_of is not None or i < len(objects)):
            if index_of is None:
                index_of = memo.position_of()
            j = index_of.get(id(value))
        if (
            j is not None
            and memo is not None
            and (id(value) not in written or unchanged(fingerprint(value), memo.fingerprints[j]))
        ):
            item_ids.append(memo.item_ids[j])
            fingerprints.append(memo.fingerprints[j])
            continue
        typ, data = dump(value)
        iid = item_id(thread_key, typ, data)
        out.items[iid] = (typ, data)
        item_ids.append(iid)
        fingerprints.append(fingerprint(value))
    full = len(item_ids) // PAGE_SIZE
    # Pages wholly inside the unchanged prefix are the remembered pages.
    kept = min(same // PAGE_SIZE, full, len(memo.page_ids)) if memo is not None else 0
    page_ids: list[bytes] = list(memo.page_ids[:kept]) if memo is not None else []
    for j in range(kept, full):
        ids = item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE]
        if (
            memo is not None
            and j < len(memo.page_ids)
            and memo.item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE] == ids
        ):
            page_ids.append(memo.page_ids[j])
        else:
            pid = node_id(thread_key, ids, b"page")
            out.nodes[pid] = ids
            page_ids.append(pid)
    spine: bytes | None = None
    if page_ids:
        if memo is not None and memo.page_ids == page_ids:
            spine = memo.ref.spine
        else:
            spine = node_id(thread_key, page_ids, b"spine")
            out.nodes[spine] = page_ids
    out.ref = ListRef(spine, item_ids[full * PAGE_SIZE :])
    out.memo = ListMemo(out.ref, list(values), fingerprints, item_ids, page_ids)
    if memo is not None and memo.positions is not None and same == len(objects):
        # Appended to the remembered list: extend its index instead of rebuilding it.
        positions = dict(memo.positions)
        for i in range(same, len(values)):
            positions.setdefault(id(values[i]), i)
        out.memo.positions = positions
    return out


def _same_prefix(values: Sequence[Any], objects: Sequence[Any]) -> int:
    """How many leading elements of ``values`` are the very objects of ``objects``."""
    if len(values) >= len(objects) and all(map(operator.is_, values, objects)):
        return len(objects)  # the common case, an append, without a list of flags
    flags = list(map(operator.is_, values, objects))
    try:
        return flags.index(False)
    except ValueError:
        return len(flags)


def _positions(objects: Sequence[Any]) -> dict[int, int]:
    """First position of each object by identity (built in C: this runs once per put)."""
    return dict(zip(map(id, reversed(objects)), range(len(objects) - 1, -1, -1), strict=True))


@dataclass(frozen=True)
class ListRequest:
    """A stored list to rebuild: its reference and the item ids already known here."""

    key: MemoKey
    ref: ListRef
    known: Mapping[bytes, Any]


Fetch = Callable[[ListRequest], Any]
"""Makes the backend command that fetches a stored list's items in order, leaving out
the bytes of the ids in ``request.known``."""

ItemRow = tuple[bytes, str | None, bytes | None]
"""``(item id, type, data)``: type ``None`` if the item is missing, data ``None`` if known."""


def resolve_list(
    request: ListRequest,
    memory: ListMemory,
    fetch: Fetch,
    load: Callable[[str, bytes], Any],
    parse: Callable[[Any], Iterable[ItemRow]],
) -> Generator[Any, Any, list[Any]]:
    """Rebuild a stored list (a plan step): from memory when the same reference was seen,
    else with one backend command that returns only the bytes not already decoded.
    ``parse`` turns the command's reply into :data:`ItemRow`s."""
    found = memory.find(request.key, request.ref)
    if found is not None:
        return list(found.objects)
    memo = memory.get(request.key)
    if memo is not None:
        request = replace(request, known=memo.by_item())
    rows = parse((yield fetch(request)))
    objects: list[Any] = []
    item_ids: list[bytes] = []
    for raw_id, typ, data in rows:
        iid = bytes(raw_id)
        if typ is None:
            raise LookupError("a stored list refers to an item that is missing")
        objects.append(request.known[iid] if data is None else load(typ, bytes(data)))
        item_ids.append(iid)
    full = len(item_ids) // PAGE_SIZE
    page_ids = [
        node_id(request.key[0], item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE], b"page")
        for j in range(full)
    ]
    if page_ids and node_id(request.key[0], page_ids, b"spine") != request.ref.spine:
        # Pages stored under another thread's key (``copy_thread`` copies them as they
        # are): the ids computed here were never stored, so the next put must store its
        # own pages rather than refer to these.
        page_ids = []
    memory.remember(
        request.key,
        ListMemo(request.ref, objects, [fingerprint(o) for o in objects], item_ids, page_ids),
    )
    return list(objects)
