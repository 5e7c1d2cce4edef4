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

Serializing every element at every step would still be O(T) work per step, so each saver
remembers, per thread namespace and channel (:class:`ListMemory`), the last few versions
it stored or read, their items, and the objects it shared with the graph for them
(*views*). Two rules keep that memory invisible, as ``InMemorySaver``, which decodes
every read from bytes, is:

- A read never hands out an object it handed out before, or one a put was given: it
  builds new objects, decoding an item once into a private :class:`Template` (its plain
  data as msgpack) that is rebuilt, in C, for every later read. So what one caller does
  to state it read can never show in another read, an older checkpoint or a fork.
- A put decides "unchanged" against the view its list was built from (the read or put
  the graph got those very objects from, :meth:`ListMemory.base`): an element keeps its
  item id only if it is the same object with the same field objects as then, and was not
  returned by a task this step (those are serialized again, as a node may have edited
  them at any depth).

A saver forgets a channel's lists once the channel holds something else (retention may
then delete their items), a thread's lists before its own deletes (``prune``,
``delete_thread``, ``delete_for_runs``), and both when a read of the latest checkpoint
shows another process deleted the thread or replaced the list. A value from another
process simply misses. What stays unseen is an edit deep inside an element a node neither
returned nor reassigned a field of (``msg.additional_kwargs["k"] = v`` on an old message,
not returned): LangGraph asks nodes to return what they change.
"""

from __future__ import annotations

import gc
import hashlib
import operator
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain, compress, islice, repeat
from typing import Any, cast

import ormsgpack
from pydantic import BaseModel

LIST_TYPE = "lgmp:list"
"""Blob type of a list stored as items; the blob's bytes are its :class:`ListRef`."""
NODE_TYPE = "lgmp:node"
"""Type of a list page or spine where a backend keeps them among the items (PostgreSQL's
``lgmp_items``): ids of other rows, never sealed."""

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


def prefix_spines(thread_key: bytes, page_ids: Sequence[bytes]) -> dict[bytes, int]:
    """The spine id of every leading run of ``page_ids``, to its length: what
    :func:`node_id` gives each prefix, in one pass (the hash state is copied per page)."""
    h = hashlib.blake2b(digest_size=ID_SIZE, key=thread_key, person=b"lgmp-spine")
    out = {}
    for n, page in enumerate(page_ids, start=1):
        h.update(page)
        out[h.copy().digest()] = n
    return out


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


@dataclass(frozen=True)
class ListVersion:
    """A stored list version as this saver knows it: its items and full pages, in order."""

    ref: ListRef
    item_ids: list[bytes]
    page_ids: list[bytes]
    """Ids of the stored full pages; fewer (none) when not known to be stored here."""
    spines: dict[bytes, int] = field(default_factory=dict, compare=False, repr=False)
    """The spine ids of this version's leading pages, to how many (see :meth:`prefixes`);
    filled the first time an older version is looked for in this one."""
    data: list[tuple[int, int]] = field(default_factory=list, compare=False, repr=False)
    """``(n, bytes)``: the serialized size of its first ``n`` items, as far as
    :func:`_view_bytes` has added it up (a put's version starts from its base's: a
    turn's put adds up only what it appended, not the whole list again)."""

    def prefixes(self, thread_key: bytes) -> dict[bytes, int]:
        """:func:`prefix_spines` of the pages, computed once. Empty when the pages are not
        known to be stored here (their ids may not be what this thread's spines name)."""
        if not self.spines and self.page_ids:
            self.spines.update(prefix_spines(thread_key, self.page_ids))
        return self.spines


@dataclass
class ListView:
    """Objects this saver shared with the graph for one version: what a read handed out,
    or what a put was given. A later put recognizes them by identity.

    ``fingerprints`` are each object's fields when the version was stored or read
    (:func:`fingerprint`); holding them keeps the objects alive, so comparing them by
    identity (:func:`unchanged_prefix`) tells a reassigned field from the same one.
    """

    version: ListVersion
    objects: list[Any]
    fingerprints: list[tuple[Any, ...] | None]
    at: set[str] = field(default_factory=set)
    """Checkpoint ids whose value of the channel this view is: the one read or written,
    and its descendants that left the channel unchanged."""
    positions: dict[int, int] | None = None
    """First position of each object by identity; built when first needed."""
    read: bool = False
    """Made by a read (what it handed out), not by a put."""
    fields: tuple[int, int] = (0, 0)
    """``(n, fields)``: how many fields the first ``n`` fingerprints hold, as far as
    :func:`_view_bytes` has counted them (a put's view starts from its base's)."""

    def position_of(self) -> dict[int, int]:
        if self.positions is None:
            self.positions = _positions(self.objects)
        return self.positions


def fingerprints_of(objects: Sequence[Any]) -> list[tuple[Any, ...] | None]:
    """:func:`fingerprint` of every object; in C when all keep their fields in ``__dict__``
    (messages and other models), which is what a chat's lists hold."""
    try:
        return list(map(tuple, map(_dict_values, map(vars, objects))))
    except TypeError:  # an element without a __dict__ of its own
        return [fingerprint(o) for o in objects]


_dict_values: Callable[[Any], Iterable[Any]] = dict.values


def unchanged_prefix(values: Sequence[Any], prints: Sequence[tuple[Any, ...] | None]) -> int:
    """How many leading ``values`` still hold the very field objects ``prints`` recorded.

    The common case (nothing reassigned, every element with a ``__dict__``) is one pass
    in C over the fields of all elements, comparing identities, with no tuple made per
    element: a long list's put used to build two per element (fields, then their ids),
    which was most of its cost. Lengths are compared element by element first, so that
    the flattened fields line up."""
    n = min(len(values), len(prints))
    then: Sequence[Any] = prints[:n]
    try:
        fields = list(map(vars, values[:n]))
        same_lengths = list(map(len, fields)) == list(map(len, then))
        now = chain.from_iterable(map(_dict_values, fields))
        if same_lengths and all(map(operator.is_, now, chain.from_iterable(then))):
            return n
    except TypeError:  # an element without a __dict__ of its own, or no fingerprint
        pass
    for i in range(n):
        if not unchanged(fingerprint(values[i]), prints[i]):
            return i
    return n


@dataclass
class ChunkedList:
    """A list value split for storage: its reference, what is new, and its view."""

    ref: ListRef
    items: dict[bytes, Typed] = field(default_factory=dict)
    nodes: dict[bytes, list[bytes]] = field(default_factory=dict)
    view: ListView | None = None
    sizes: dict[bytes, int] = field(default_factory=dict)
    """The serialized size of those of ``items`` kept otherwise (sealed): what the list
    memory counts for them (:attr:`_Known.size`)."""


class _NotPlain(Exception):
    """A value holds something a :class:`Template` cannot reproduce exactly."""


_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes})
_PACK_OPTIONS = (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)


def _refuse(value: Any) -> Any:
    raise _NotPlain


def _check_plain(value: Any) -> None:
    """Only what msgpack gives back exactly: dicts with str keys, lists, str, int,
    float, bool, None, bytes (no tuples, subclasses, or anything else)."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            _check_plain(v)
    elif kind is list:
        for v in value:
            _check_plain(v)
    else:
        raise _NotPlain


def _pack(value: Any) -> bytes:
    _check_plain(value)
    try:
        return ormsgpack.packb(value, default=_refuse, option=_PACK_OPTIONS)
    except (TypeError, ormsgpack.MsgpackEncodeError) as exc:  # e.g. an int beyond 64 bits
        raise _NotPlain from exc


_NIL = b"\xc0"  # msgpack's nil


@dataclass(frozen=True)
class Template:
    """How to rebuild a decoded list element without decoding it again: its plain data
    packed as msgpack (unpacked in C at every read, several times faster than the
    serializer's decoding), and, for a pydantic model (a message), its class and the
    state ``BaseModel.__deepcopy__`` copies. Built only from values whose data is plain
    (:func:`_check_plain`); anything else raises :class:`_NotPlain` and is decoded.

    ``packed`` is always three msgpack values, the data, the model's extra and its
    private state (nil when none), so that :func:`build_all` slices a batch's values
    apart in C instead of walking it element by element."""

    model: type[BaseModel] | None
    packed: bytes
    fields_set: frozenset[str] = frozenset()

    @classmethod
    def of(cls, value: Any) -> Template:
        if not isinstance(value, BaseModel):
            return cls(None, _pack(value) + _NIL + _NIL)
        extra, private = value.__pydantic_extra__, value.__pydantic_private__
        return cls(
            type(value),
            _pack(vars(value))
            + (_NIL if extra is None else _pack(extra))
            + (_NIL if private is None else _pack(private)),
            _shared_fields_set(value.__pydantic_fields_set__),
        )

    def build(self) -> Any:
        """A new object equal to the one the template was made from."""
        return build_all([self])[0]


_FIELDS_SETS: dict[frozenset[str], frozenset[str]] = {}
FIELDS_SETS_AT_MOST = 4096
"""Distinct fields-sets shared between templates (a model class has a few)."""


def _shared_fields_set(names: set[str]) -> frozenset[str]:
    """``names`` as a frozenset shared by the templates that have the same: one per item
    held ~600 bytes (tracemalloc), as much as a short message's data, and no estimate
    counted it (a restarted saver reading its chats held 1.3 times its estimate)."""
    fields_set = frozenset(names)
    shared = _FIELDS_SETS.get(fields_set)
    if shared is not None:
        return shared
    if len(_FIELDS_SETS) < FIELDS_SETS_AT_MOST:
        _FIELDS_SETS[fields_set] = fields_set
    return fields_set


def _array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` elements."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


_packed_of = operator.attrgetter("packed")
_model_of = operator.attrgetter("model")
_fields_set_of = operator.attrgetter("fields_set")
_set_attribute = object.__setattr__


BUILD_BATCH = 256
"""Templates unpacked together. One buffer for a whole long list cost page faults at
every read: 2,000 chat messages join to 1.3 MB, past the C allocator's mmap threshold,
so each read mapped fresh pages and touched them (~630 page faults, ~1 ms of CPU at
2,000 messages, issue 39). A buffer of 256 (~170 KB) is reused from the heap; the
objects built are the same."""

PAUSE_GC_FROM = 256
"""Batches of at least this many templates are built with the cyclic collector paused
(:func:`_collector_paused`)."""
PAUSE_GC_AT_MOST = 0.05
"""Seconds a pause goes without a collection while builds overlap: past it, one runs in
the pause (see :func:`_collector_paused`)."""

_pause_lock = threading.Lock()
_pausing = 0  # builds under way with the collector paused
_paused_here = False  # whether those builds disabled it (it was enabled before them)
_collected_at = 0.0  # when the pause began or last collected (time.monotonic)

PROMOTES = (
    sys.implementation.name == "cpython"
    and sys.version_info < (3, 14)
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)
"""Whether a pause ends by promoting the young generations (:func:`_settle`): on the
generational collectors of CPython 3.10-3.13 with the GIL, whose rules it follows."""
GROWTH_FOR_FULL = 1.25
"""A full collection runs when a promotion finds the interpreter's allocated blocks grown
by this factor since the last one (:func:`_settle`)."""

_baseline = 0  # allocated blocks when a promotion first saw the last full collection
_full_seen = -1  # CPython's count of full collections then


def _settle() -> int | None:
    """End a pause without walking what it built: move the young generations into the
    oldest, unwalked, and run a full collection once the heap has grown by a quarter.

    A build's objects are never garbage when it ends (the caller and the read's view hold
    them), so the young collection that follows a pause, and the middle generation's walk
    later, only cost: at T=1000 in a chat process 1.0-1.7 ms and 0.3 ms of a 6-8 ms read
    (``benchmarks/results/2026-12-06-issue39-long-threads-2.md``). ``gc.freeze()`` then
    ``gc.unfreeze()`` moves every tracked object of the young generations to the oldest
    without looking at them. Objects freed by reference counting leave it as from any
    generation; cyclic garbage among the promoted (made during the pause: the first build
    of a pause collects the young generations before it starts, see
    :func:`_collector_paused`) waits for a full collection. CPython runs one when the
    objects that reached the oldest generation since the last pass a quarter of it, and
    these are not in its count; so one runs here when the interpreter's allocated blocks
    (``sys.getallocatedblocks``: ~0.1 ms, a count per arena) have grown by
    :data:`GROWTH_FOR_FULL` since the first promotion after the last full collection
    (CPython's count of them, ``gc.get_stats()``, tells one ran, whoever ran it; no gc
    callback, which would run Python code in every collection of the process): garbage
    held back is at most about a quarter of the heap, as in the oldest generation. Left alone
    (plain re-enabling) when the application froze objects itself (a pre-fork server):
    ``unfreeze`` would thaw them. Returns the generation to collect now, if any (run by
    the caller outside the pause's lock: finalizers run during a collection)."""
    global _baseline, _full_seen
    if not PROMOTES or gc.get_freeze_count():
        return None
    gc.freeze()
    gc.unfreeze()
    blocks = sys.getallocatedblocks()
    full = gc.get_stats()[2]["collections"]
    if full != _full_seen:
        _baseline, _full_seen = blocks, full  # a full collection ran since: start over
    elif blocks > _baseline * GROWTH_FOR_FULL:
        return 2  # the next promotion sees it ran and starts over
    return None


def _catch_up() -> int:
    """The collection the collector would have run by now, chosen as it chooses one:
    the oldest generation whose count passed its threshold (the counts grow while it is
    paused, and an explicit collection resets them as an automatic one does)."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    for generation in (2, 1):
        if thresholds[generation] and counts[generation] > thresholds[generation]:
            return generation
    return 0


@contextmanager
def _collector_paused(size: int) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large batch is built.

    Building a long list makes tens of thousands of containers, none of them garbage.
    Each 700 allocations start a young collection, and every tenth of those an older
    one, until the whole heap is walked again: in a process holding a long thread (the
    graph's state, the views here) that walking cost more than the building (a read of
    600 messages: 4.0 ms of CPU, 2.25 ms with the collector off). Paused, the batch is
    not walked at all: the last build to end promotes it (:func:`_settle`). The usual
    advice for bulk msgpack unpacking; here only while builds are under way, counted
    across threads, and never touching a collector someone else disabled.

    Builds of many threads overlap without a gap under load (a dozen readers of long
    threads): a pause that lasted until the count fell to zero kept the collector off
    for as long as the load did, and the process's cyclic garbage piled up. While a
    pause lasts, a build that ends :data:`PAUSE_GC_AT_MOST` seconds or more after its
    start or last collection runs one (:func:`_catch_up`)."""
    global _pausing, _paused_here, _collected_at
    if size < PAUSE_GC_FROM:
        yield
        return
    sweep = False
    with _pause_lock:
        if _pausing == 0:
            _paused_here = gc.isenabled()
            if _paused_here:
                gc.disable()
                _collected_at = time.monotonic()
                # Not when the application turned automatic collections off.
                sweep = PROMOTES and gc.get_threshold()[0] > 0
        _pausing += 1
    try:
        if sweep:
            # The promotion at the end takes the young generations to the oldest
            # unwalked: garbage in them now would wait for a full collection, which
            # large buffers hardly bring nearer (their cycles are a few blocks).
            # Walked now, before the build, they hold only what was made since the
            # last pause or young collection. Outside the lock: finalizers run here.
            gc.collect(1)
        yield
    finally:
        collect = None
        with _pause_lock:
            _pausing -= 1
            if _paused_here:
                if _pausing == 0:
                    _paused_here = False
                    collect = _settle()
                    gc.enable()
                elif time.monotonic() - _collected_at > PAUSE_GC_AT_MOST:
                    collect = _catch_up()
                    _collected_at = time.monotonic()
        if collect is not None:
            # Outside the lock: a finalizer the collection runs may build a list too.
            gc.collect(collect)


def build_all(templates: Sequence[Template]) -> list[Any]:
    """New objects equal to the ones the templates were made from, each an object of its
    own down to every container inside it.

    One ``unpackb`` per :data:`BUILD_BATCH` templates, and for models (a chat's
    messages) no Python code per element: the instances, their ``__dict__``, fields-set,
    extra and private state are made and set by ``map`` over the batch, in C. A long
    list's read was a loop of several calls per element, which cost more than the
    unpacking."""
    if not templates:
        return []
    out: list[Any] = []
    with _collector_paused(len(templates)):
        for start in range(0, len(templates), BUILD_BATCH):
            out += _build(templates[start : start + BUILD_BATCH])
    return out


def _build(templates: Sequence[Template]) -> list[Any]:
    values = ormsgpack.unpackb(
        _array_header(3 * len(templates)) + b"".join(map(_packed_of, templates))
    )
    data = values[0::3]
    models = list(map(_model_of, templates))
    if None in models:
        plain = [t.model is None for t in templates]
        if all(plain):
            return data  # type: ignore[no-any-return]
        built = _build([t for t in templates if t.model is not None])[::-1]
        return [d if p else built.pop() for d, p in zip(data, plain, strict=True)]
    out = list(map(object.__new__, models))
    # ``any`` runs each map to its end: every call returns None.
    any(map(_set_attribute, out, repeat("__dict__"), data))
    fields = map(set, map(_fields_set_of, templates))
    any(map(_set_attribute, out, repeat("__pydantic_fields_set__"), fields))
    any(map(_set_attribute, out, repeat("__pydantic_extra__"), values[1::3]))
    any(map(_set_attribute, out, repeat("__pydantic_private__"), values[2::3]))
    return out


_NOT_PLAIN = object()


_state_of = operator.attrgetter("state")
_first = operator.itemgetter(0)


class _Known:
    """One stored item this saver can produce without fetching: its serialized bytes
    until a read decodes it, then a :class:`Template` (the bytes are dropped), or the
    bytes alone if the element cannot be rebuilt from a template exactly.

    The state is one tuple, replaced whole, so threads reading it at once see either.
    ``size`` is the serialized length, which the template's msgpack about equals: what
    :class:`ListMemory` counts for the item's data.
    """

    __slots__ = ("size", "state")

    def __init__(self, typed: Typed, size: int | None = None) -> None:
        self.state: tuple[Any, Typed | None] = (None, typed)
        self.size = len(typed[1]) if size is None else size

    @staticmethod
    def fresh_all(
        ids: Sequence[bytes], items: Sequence[_Known], load: Callable[[bytes, str, bytes], Any]
    ) -> list[Any]:
        """:meth:`fresh` of each (``load`` is given the item's id, ``ids[i]``), those with a
        template built together (:func:`build_all`)."""
        templates = list(map(_first, map(_state_of, items)))
        ready = list(map(isinstance, templates, repeat(Template)))
        if all(ready):
            return build_all(templates)  # every item read before
        # Items no read has decoded yet (at each turn of a chat: the ones its last put
        # stored, at the end) or that have no template are decoded one by one; the others
        # are still built together and spliced in by slices, with no Python step per
        # element (this was a loop over the whole list at every turn's read, issue 39).
        built = build_all(list(compress(templates, ready)))
        out: list[Any] = []
        used = start = 0
        for i in compress(range(len(items)), map(operator.not_, ready)):
            out += built[used : used + i - start]
            used += i - start
            out.append(items[i].fresh(partial(load, ids[i])))
            start = i + 1
        out += built[used:]
        return out

    def fresh(self, load: Callable[[str, bytes], Any]) -> Any:
        """A new object for this item, shared with nothing handed out before."""
        template, typed = self.state
        if isinstance(template, Template):
            return template.build()
        assert typed is not None
        decoded = load(*typed)
        if template is None:
            try:
                self.state = (Template.of(decoded), None)
            except _NotPlain:
                self.state = (_NOT_PLAIN, typed)
        return decoded


MemoKey = tuple[bytes, str, str]  # thread key, namespace, channel

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""What a saver's list memory may hold by default (its estimate, see :class:`ListMemory`).

A chat message costs about 6 KiB here (its item, and the objects and fingerprints
of the up to four views that hold it), so 64 MiB keeps some 11,000 messages: the recent
lists of a hundred busy threads of a hundred messages each, more than a web worker serves
at once. Past it the least recently used lists go; a list not remembered is read from
storage, and its next put serializes it again, so the cap trades speed, never behaviour.
The former caps (1,024 lists, 200,000 items) allowed about 1 GiB."""

# The estimate's parts, in bytes, measured with tracemalloc on chat messages and small
# dicts (tests/test_list_memory.py checks it stays above what tracemalloc sees). An item:
# its entry, id, _Known and state, beside its serialized data. A view's element: the
# object and its __dict__, the fingerprint tuple, per field and besides, and the element's
# data once more (its strings). A version: a slot per item id. (Views also kept a tuple of
# ids per element until issue 39: 40 bytes a field, 56 an element less since.) An element
# read back from storage (decoded by the serializer, validated by pydantic) holds about 100
# bytes more than one a graph made: ELEMENT_BYTES was 344. An item's data is its serialized
# size, not the stored one (compressed, or sealed: a few times smaller).
ITEM_BYTES = 320
ELEMENT_BYTES = 448
FIELD_BYTES = 100
ID_BYTES = 16
# Besides, what a channel, a view and a version hold whatever their length: the objects
# and containers themselves (a ListView, its sets and lists; a ListVersion, its ref and
# lists; the channel's dicts). Uncounted, a saver that had read two dozen short chats back
# from storage held 1.1 times its estimate (tests/test_attack_estimate.py).
CHANNEL_BYTES = 2048
VIEW_BYTES = 2048
VERSION_BYTES = 1024


def _view_bytes(view: ListView, sizes: Callable[[bytes], int | None]) -> tuple[int, bool]:
    """The estimated size of what ``view`` keeps alive (see :data:`ELEMENT_BYTES`), and
    whether every item it counted is known (``sizes`` gives None for one that is not).

    Its items' sizes and its fields are added up from where the view's version and the
    view itself left off (a put's, from its base's sums): at T=1000 adding up every
    element of a turn's three views again cost 0.8 ms a turn. An item's size is that of
    its serialized bytes, which its id names, so a sum stays right when the channel later
    drops the item (a view keeps its objects alive all the same). A sum is kept only up to
    the first item not known here (evicted, or a put's channel dropped and made again since
    its base was looked up): counted as 0 meanwhile, it is added when the item is back
    (:meth:`_Channel.recount`), and a put going on from the sum does not carry the 0 on."""
    ids = view.version.item_ids
    cell = view.version.data
    counted, data = cell[-1] if cell else (0, 0)
    complete = True
    if counted < len(ids):
        more = list(map(sizes, islice(ids, counted, None)))
        try:
            known = more.index(None)
        except ValueError:
            known = len(more)
        if known:
            data += sum(cast("list[int]", more[:known]))
            cell[:] = [(counted + known, data)]
        if known < len(more):
            complete = False
            data += sum(filter(None, more[known:]))
    counted, fields = view.fields
    if counted < len(view.fingerprints):
        fields += sum(map(len, filter(None, islice(view.fingerprints, counted, None))))
        view.fields = (len(view.fingerprints), fields)
    total = ELEMENT_BYTES * len(ids) + FIELD_BYTES * fields + data + ID_BYTES * len(view.objects)
    return total, complete


def _version_bytes(version: ListVersion) -> int:
    ids = len(version.item_ids) + len(version.page_ids) + len(version.ref.tail)
    return VERSION_BYTES + ID_BYTES * ids


@dataclass
class _Channel:
    versions: OrderedDict[bytes, ListVersion] = field(default_factory=OrderedDict)
    views: list[ListView] = field(default_factory=list)
    items: dict[bytes, _Known] = field(default_factory=dict)
    sizes: dict[bytes, int] = field(default_factory=dict)
    """The data size of each of ``items`` (:attr:`_Known.size`)."""
    item_bytes: int = 0
    view_bytes: dict[int, int] = field(default_factory=dict)
    """The estimate of each view, by ``id`` of the view."""
    partial: set[int] = field(default_factory=set)
    """Views (by ``id``) counted while some of their items were not known here."""
    total: int = 0
    """The estimate of everything the channel keeps."""

    def add_item(self, iid: bytes, known: _Known) -> None:
        self.items[iid] = known
        self.sizes[iid] = known.size
        self.item_bytes += ITEM_BYTES + known.size

    def keep_items(self, used: set[bytes]) -> None:
        self.items = {i: k for i, k in self.items.items() if i in used}
        self.sizes = {i: n for i, n in self.sizes.items() if i in used}
        self.item_bytes = ITEM_BYTES * len(self.sizes) + sum(self.sizes.values())

    def count(self, view: ListView) -> None:
        """Estimate ``view`` (:func:`_view_bytes`)."""
        self.view_bytes[id(view)], complete = _view_bytes(view, self.sizes.get)
        if complete:
            self.partial.discard(id(view))
        else:
            self.partial.add(id(view))

    def recount(self) -> None:
        """Estimate again the views counted without some of their items (after items were
        added: a read fetched them, or a put stored them again)."""
        for view in self.views:
            if id(view) in self.partial:
                self.count(view)

    def measure(self) -> int:
        """Bring :attr:`total` up to date; the change."""
        live = {id(v) for v in self.views}
        self.view_bytes = {k: n for k, n in self.view_bytes.items() if k in live}
        self.partial &= live
        before = self.total
        self.total = (
            CHANNEL_BYTES
            + self.item_bytes
            + VIEW_BYTES * len(self.views)
            + sum(self.view_bytes.values())
            + sum(map(_version_bytes, self.versions.values()))
        )
        return self.total - before


class ListMemory:
    """Per-saver memory of recent lists, bounded in bytes and safe to share between threads.

    Per channel: the last few versions (their item and page ids), the items they use
    (bytes or a decoded template), and the last few *views*, the objects a read handed
    out or a put was given. Reads build new objects from the items, so nothing is ever
    handed out twice; puts recognize the objects of a view by identity and serialize
    only the rest. A channel keeps several versions, not just one: ``list()`` and history
    views read older versions, and those reads must not evict the one the next step
    builds on.

    What it keeps is estimated (:data:`ITEM_BYTES` and the like: counts and data lengths,
    never a walk over objects) and held under ``max_bytes`` by forgetting the least
    recently used channels, the one just used too if it alone is larger.
    """

    def __init__(
        self,
        max_lists: int = 1024,
        versions_per_list: int = 8,
        views_per_list: int = 4,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.max_lists = max_lists
        self.versions_per_list = versions_per_list
        self.views_per_list = views_per_list
        self.max_bytes = max_bytes
        # Re-entrant: a collection can start inside any allocation under it, and a
        # finalizer it runs (``__del__``, a weakref callback, a gc callback) may read a
        # thread through this saver, in this very thread: with a plain lock that
        # deadlocked. Re-entered, such a read sees the memory between two statements of
        # the outer call: at worst a version without its items yet (the read fetches
        # them) or a byte estimate off for a channel the inner call dropped.
        self._lock = threading.RLock()
        self._channels: OrderedDict[MemoKey, _Channel] = OrderedDict()
        # The keys of ``_channels`` by thread: a put looks only at its own thread's
        # channels, not at every thread's the memory holds (up to ``max_lists``).
        self._by_thread: dict[bytes, set[MemoKey]] = {}
        self._items = 0  # items known over all channels
        self.bytes = 0  # the estimate over all channels
        # Objects tasks returned as updates (they hold a reference, so ids stay unique).
        self._written: dict[MemoKey, dict[int, Any]] = {}

    # -- what a put builds on ----------------------------------------------------------

    def base(self, key: MemoKey, values: Sequence[Any], parent_id: str | None) -> ListView | None:
        """The view ``values`` was built from: among the views of the parent checkpoint's
        version (the only one a put may build on: retention keeps its items while any
        other version's may be gone), the one sharing the longest prefix of objects."""
        if parent_id is None:
            return None
        with self._lock:
            channel = self._channels.get(key)
            views = [v for v in channel.views if parent_id in v.at] if channel else []
        best, longest = (views[-1] if views else None), -1
        for view in reversed(views):
            n = _same_prefix(values, view.objects)
            if n > longest:
                best, longest = view, n
        return best

    def advance(
        self, thread_key: bytes, checkpoint_ns: str, parent_id: str | None, new_id: str,
        changed: Collection[str],
    ) -> None:  # fmt: skip
        """A checkpoint ``new_id`` is stored on ``parent_id``: the views of channels it left
        unchanged are its values too."""
        if parent_id is None:
            return
        with self._lock:
            for key in self._by_thread.get(thread_key, ()):
                _, ns, name = key
                if ns == checkpoint_ns and name not in changed:
                    for view in self._channels[key].views:
                        if parent_id in view.at:
                            view.at.add(new_id)

    def note_written(self, key: MemoKey, objects: Iterable[Any]) -> None:
        """Remember objects a task returned for a remembered list, until its next put."""
        with self._lock:
            if key in self._channels:
                self._written.setdefault(key, {}).update((id(o), o) for o in objects)

    def take_written(self, key: MemoKey) -> dict[int, Any]:
        with self._lock:
            return self._written.pop(key, {})

    # -- what reads and puts leave -----------------------------------------------------

    def find(self, key: MemoKey, ref: ListRef) -> ListVersion | None:
        """The remembered version stored under ``ref``, which becomes the one used last."""
        with self._lock:
            channel = self._channels.get(key)
            raw = ref.encode()
            version = channel.versions.get(raw) if channel is not None else None
            if channel is not None and version is not None:
                channel.versions.move_to_end(raw)
                self._channels.move_to_end(key)
            return version

    def derive(self, key: MemoKey, ref: ListRef) -> ListVersion | None:
        """The version stored under ``ref`` when it is not remembered itself but its
        full pages are the leading pages of a remembered version (or it has none): an
        older checkpoint of a list that grew by appending, read by id (time travel,
        a fork, history) after newer reads pushed it out of :meth:`find`.

        Ids hash their content under the thread's key, so a spine id equal to the one
        of a remembered version's first ``n`` pages names those very pages, wherever
        and by whichever process it was stored; a thread's copy (other-keyed ids)
        never matches.
        """
        if ref.spine is None:
            return ListVersion(ref, list(ref.tail), [])
        with self._lock:
            channel = self._channels.get(key)
            versions = list(reversed(channel.versions.values())) if channel is not None else []
        # Most recently used first, those already indexed before the rest: indexing
        # costs a hash per page, once per version.
        versions.sort(key=lambda v: not v.spines)
        for version in versions:
            n = version.prefixes(key[0]).get(ref.spine)
            if n is not None:
                self.find(key, version.ref)  # used last: what it covers stays derivable
                item_ids = version.item_ids[: n * PAGE_SIZE] + ref.tail
                return ListVersion(ref, item_ids, version.page_ids[:n])
        return None

    def known(self, key: MemoKey) -> dict[bytes, _Known]:
        """The items of ``key`` producible here, as of now (a copy: safe to keep using)."""
        with self._lock:
            channel = self._channels.get(key)
            return dict(channel.items) if channel is not None else {}

    def recall(
        self, key: MemoKey, ref: ListRef
    ) -> tuple[ListVersion | None, bool, list[_Known] | None]:
        """The version stored under ``ref`` (:meth:`find`, else :meth:`derive`), whether it
        was derived, and its items in order: None unless every one is known here.

        A turn's read of a long list finds everything here; this answers it without
        copying the channel's items or building a set of the version's ids (two passes
        over the whole list a read, issue 39)."""
        version = self.find(key, ref)
        derived = version is None
        if derived:
            version = self.derive(key, ref)
        if version is None:
            return None, False, None
        with self._lock:
            channel = self._channels.get(key)
            found = list(map(channel.items.get, version.item_ids)) if channel else [None]
        # ``_Known`` has no length or truth of its own: ``all`` is false only for a None.
        return version, derived, cast("list[_Known]", found) if all(found) else None

    def remember(
        self,
        key: MemoKey,
        version: ListVersion,
        items: Mapping[bytes, _Known],
        view: ListView | None = None,
        keep: bool = True,
    ) -> None:
        """Remember a version that is stored, items it uses and, optionally, a view.

        ``items`` are the version's items to add (new, or fetched): those it shares with
        remembered versions are here already, and one evicted meanwhile is fetched by the
        read that needs it. ``keep=False`` for a version :meth:`derive` made: the one it
        came from covers it, so reading a thread's history by id leaves the remembered
        versions as they were.
        """
        with self._lock:
            channel = self._channels.get(key)
            if channel is None:
                channel = self._channels[key] = _Channel()
                self._by_thread.setdefault(key[0], set()).add(key)
            if keep or not channel.versions:
                raw = version.ref.encode()
                channel.versions[raw] = version
                channel.versions.move_to_end(raw)
                while len(channel.versions) > self.versions_per_list:
                    channel.versions.popitem(last=False)
            if view is not None:
                if view.read:
                    # A newer read of the same checkpoints supersedes an older one's view:
                    # reading a checkpoint again and again (a UI polling one state) then
                    # pushes out no view a put builds on, and what it frees is what it
                    # built last time, not a view of some longer list.
                    channel.views = [v for v in channel.views if not (v.read and v.at <= view.at)]
                channel.views.append(view)
                del channel.views[: -self.views_per_list]
            before = len(channel.items)
            added = False
            for iid, known in items.items():
                if iid not in channel.items:
                    channel.add_item(iid, known)
                    added = True
            longest = max(len(v.item_ids) for v in channel.versions.values())
            if len(channel.items) > 2 * longest + PAGE_SIZE:
                # Items no remembered version uses any more (trimmed, replaced).
                channel.keep_items({iid for v in channel.versions.values() for iid in v.item_ids})
            if added and channel.partial:
                channel.recount()
            if view is not None:
                channel.count(view)
            self._items += len(channel.items) - before
            self.bytes += channel.measure()
            self._channels.move_to_end(key)
            while self._channels and (
                len(self._channels) > self.max_lists or self.bytes > self.max_bytes
            ):
                self._drop(next(iter(self._channels)))

    def _drop(self, key: MemoKey) -> None:
        channel = self._channels.pop(key, None)
        if channel is not None:
            self._items -= len(channel.items)
            self.bytes -= channel.total
            keys = self._by_thread[key[0]]
            keys.discard(key)
            if not keys:
                del self._by_thread[key[0]]

    # -- forgetting --------------------------------------------------------------------

    def forget(self, key: MemoKey, written: bool = False) -> None:
        """Forget one channel's lists, and with ``written`` the objects tasks returned for
        it (see :meth:`note_written`)."""
        with self._lock:
            self._drop(key)
            if written:
                self._written.pop(key, None)

    def forget_lists(self, thread_key: bytes) -> None:
        """Forget a thread's lists: their items may be deleted (retention, prune)."""
        with self._lock:
            for key in list(self._by_thread.get(thread_key, ())):
                self._drop(key)

    def forget_thread(self, thread_key: bytes) -> None:
        """Forget all about a thread that is being deleted."""
        self.forget_lists(thread_key)
        with self._lock:
            for key in [k for k in self._written if k[0] == thread_key]:
                del self._written[key]

    def clear(self) -> None:
        """Forget every list (after deletes that may touch any thread)."""
        with self._lock:
            self._channels.clear()
            self._by_thread.clear()
            self._items = 0
            self.bytes = 0


def chunk_list(
    thread_key: bytes,
    values: list[Any],
    base: ListView | None,
    dump: Callable[[Any], Typed],
    written: Mapping[int, Any] | None = None,
    id_key: bytes | None = None,
) -> ChunkedList:
    """Split ``values`` into items and pages, serializing only elements not in ``base``.

    New items' ids are keyed by ``id_key`` if given, else by the thread key (stored in
    clear beside every row: with encryption on, that made each id a test of a guessed
    item's plaintext, so the codec passes a secret key).

    An element keeps the item id it has in ``base`` (the view ``values`` was built from:
    the objects of the read or put the graph got them from) if it is the same object and
    its fields are the same objects as then. A task's returned objects (``written``) are
    serialized again regardless, since a node may have edited them deeper than a field.
    The common case, an appended message, costs one identity check per element and one
    comparison of field identities, both done in C.
    """
    objects = base.objects if base is not None else []
    written = written or {}
    out = ChunkedList(ref=ListRef(None, []))
    same = _same_prefix(values, objects)
    if base is not None and same:
        # Objects of the prefix whose fields were reassigned since, or that a task
        # returned, are not unchanged.
        same = unchanged_prefix(values[:same], base.fingerprints)
        if written:
            same = _before_any(base, written, same)
    item_ids = base.version.item_ids[:same] if base is not None else []
    prints = base.fingerprints[:same] if base is not None else []
    if same < len(values):
        tail = values[same:]
        tail_prints = fingerprints_of(tail)
        index_of = base.position_of() if base is not None and same < len(objects) else None
        known = set(base.version.item_ids) if base is not None else set()
        for i, value in enumerate(tail, start=same):
            j: int | None = i if i < len(objects) and objects[i] is value else None
            if j is None and index_of is not None:
                j = index_of.get(id(value))
            now = tail_prints[i - same]
            if (
                j is not None
                and base is not None
                and id(value) not in written
                and unchanged(now, base.fingerprints[j])
            ):
                item_ids.append(base.version.item_ids[j])
            else:
                typ, data = dump(value)
                iid = item_id(id_key or thread_key, typ, data)
                if iid not in known:
                    out.items[iid] = (typ, data)
                item_ids.append(iid)
            prints.append(now)
    full = len(item_ids) // PAGE_SIZE
    old = base.version if base is not None else None
    # Pages wholly inside the unchanged prefix are the remembered pages.
    kept = min(same // PAGE_SIZE, full, len(old.page_ids)) if old is not None else 0
    page_ids: list[bytes] = list(old.page_ids[:kept]) if old is not None else []
    for j in range(kept, full):
        ids = item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE]
        if (
            old is not None
            and j < len(old.page_ids)
            and old.item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE] == ids
        ):
            page_ids.append(old.page_ids[j])
        else:
            pid = node_id(thread_key, ids, b"page")
            out.nodes[pid] = ids
            page_ids.append(pid)
    spine: bytes | None = None
    if page_ids:
        if old is not None and old.page_ids == page_ids:
            spine = old.ref.spine
        else:
            spine = node_id(thread_key, page_ids, b"spine")
            out.nodes[spine] = page_ids
    out.ref = ListRef(spine, item_ids[full * PAGE_SIZE :])
    version = ListVersion(out.ref, item_ids, page_ids)
    out.view = ListView(version, list(values), prints)
    if base is not None and same == len(base.fingerprints):
        # The estimate's sums (_view_bytes) go on from the base's: same items, same prints.
        out.view.fields = base.fields
        version.data.extend(base.version.data[-1:])
    if base is not None and base.positions is not None and same == len(objects):
        # Appended to the base: extend its index instead of rebuilding it.
        positions = dict(base.positions)
        for i in range(same, len(values)):
            positions.setdefault(id(values[i]), i)
        out.view.positions = positions
    return out


def remember_stored(
    memory: ListMemory, key: MemoKey, chunked: ChunkedList, checkpoint_id: str
) -> None:
    """Remember a list a put has stored: the next step builds on its view, and a read of
    it needs no fetch (its new items are known by their serialized bytes)."""
    view = chunked.view
    if view is None:
        return
    view.at.add(checkpoint_id)
    # The reused items are known already, unless evicted meanwhile: then a read
    # fetches them.
    sizes = chunked.sizes
    items = {iid: _Known(typed, sizes.get(iid)) for iid, typed in chunked.items.items()}
    memory.remember(key, view.version, items, view)


def _same_prefix(values: Sequence[Any], objects: Sequence[Any]) -> int:
    """How many leading elements of ``values`` are the very objects of ``objects``."""
    if len(values) >= len(objects) and all(map(operator.is_, values, objects)):
        return len(objects)  # the common case, an append, without a list of flags
    flags = list(map(operator.is_, values, objects))
    try:
        return flags.index(False)
    except ValueError:
        return len(flags)


def _before_any(base: ListView, written: Mapping[int, Any], same: int) -> int:
    """``same`` cut to the first position, among the first ``same`` objects of ``base``,
    of an object in ``written``. A task returns a message or two a step, mostly new ones:
    one scan in C per object costs less than indexing the whole view by identity (the
    index is built only for many)."""
    if len(written) > 8:
        positions = base.position_of()
        return min(
            (p for p in map(positions.get, written) if p is not None and p < same), default=same
        )
    for obj in written.values():
        first = next(compress(range(same), map(operator.is_, base.objects, repeat(obj))), same)
        same = min(same, first)
    return same


def _positions(objects: Sequence[Any]) -> dict[int, int]:
    """First position of each object by identity (built in C: this runs once per put)."""
    return dict(zip(map(id, reversed(objects)), range(len(objects) - 1, -1, -1), strict=True))


def _check_shape(ref: ListRef, item_ids: Sequence[bytes]) -> None:
    """Raise unless ``item_ids`` can be the list ``ref`` names: whole pages (at least one
    with a spine, none without), then exactly its tail.

    The checkpoint is read before its items, so a deletion in between leaves the items'
    fetch without the spine: its answer is then the tail alone, or nothing. Returned,
    that would be a shorter list than the one stored (the old state cut, not the old
    state or nothing); raised, the read is run again (``_whole`` in ``saver.py``).
    """
    head = len(item_ids) - len(ref.tail)
    if (
        head < 0
        or head % PAGE_SIZE
        or (head == 0) != (ref.spine is None)
        or list(item_ids[head:]) != ref.tail
    ):
        raise LookupError("a stored list's pages are missing")


@dataclass(frozen=True)
class ListRequest:
    """A stored list to rebuild: its reference and the item ids already known here."""

    key: MemoKey
    ref: ListRef
    known: Collection[bytes]


Fetch = Callable[[ListRequest], Any]
"""Makes the backend command that fetches a stored list's items in order, leaving out
the bytes of the ids in ``request.known``."""

ItemRow = tuple[bytes, str | None, bytes | None]
"""``(item id, type, data)``: type ``None`` if the item is missing, data ``None`` if known."""


def resolve_list(
    request: ListRequest,
    memory: ListMemory,
    fetch: Fetch,
    load: Callable[[bytes, str, bytes], Any],
    parse: Callable[[Any], Iterable[ItemRow]],
    checkpoint_id: str | None = None,
    sizes: Mapping[bytes, int] | None = None,
) -> Generator[Any, Any, list[Any]]:
    """Rebuild a stored list (a plan step) as new objects: from memory when the version
    (remembered, or derived from a longer one: :meth:`ListMemory.derive`) and its items
    are known, else with one backend command that returns only the bytes of items not
    known here. ``parse`` turns the command's reply into :data:`ItemRow`s.

    With the ``checkpoint_id`` read, the objects handed out become a view a put on that
    checkpoint recognizes (``get_tuple``, which starts a step); history pages leave none.
    ``sizes``, if given, is where ``load`` puts the serialized size of each item it
    decodes: what a fetched item counts in the memory instead of its stored size.
    """
    key = request.key
    version, derived, items = memory.recall(key, request.ref)
    fetched: dict[bytes, _Known] = {}
    if version is None or items is None:
        derived = False
        known = memory.known(key)
        rows = parse((yield fetch(replace(request, known=known.keys()))))
        item_ids: list[bytes] = []
        for raw_id, typ, data in rows:
            iid = bytes(raw_id)
            if typ is None:
                raise LookupError("a stored list refers to an item or page that is missing")
            if data is not None:
                fetched[iid] = _Known((typ, bytes(data)))
            item_ids.append(iid)
        _check_shape(request.ref, item_ids)
        full = len(item_ids) // PAGE_SIZE
        page_ids = [
            node_id(key[0], item_ids[j * PAGE_SIZE : (j + 1) * PAGE_SIZE], b"page")
            for j in range(full)
        ]
        if page_ids and node_id(key[0], page_ids, b"spine") != request.ref.spine:
            # Pages stored under another thread's key (``copy_thread`` copies them as
            # they are): the ids computed here were never stored, so the next put must
            # store its own pages rather than refer to these.
            page_ids = []
        version = ListVersion(request.ref, item_ids, page_ids)
        known.update(fetched)
        items = list(map(known.__getitem__, version.item_ids))
    objects = _Known.fresh_all(version.item_ids, items, load)
    if sizes:
        # Fetched items are stored compressed (or sealed): counted at the size ``load``
        # found them to have as serialized, which a put of them counts too. They are
        # this read's own until remembered.
        for iid, known_item in fetched.items():
            known_item.size = sizes.get(iid, known_item.size)
    view = None
    if checkpoint_id is not None:
        prints = fingerprints_of(objects)
        view = ListView(version, list(objects), prints, {checkpoint_id}, read=True)
    memory.remember(key, version, fetched, view, keep=not derived)
    return objects
