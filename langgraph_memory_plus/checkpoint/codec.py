"""Turning checkpoints into stored records and back, the same way for every backend.

The storage model is LangGraph's triad: one record per checkpoint (without its channel
values), one blob per (channel, version), and one record per pending write. Blobs are
shared by every checkpoint that has the same channel version, so a channel that did not
change in a step costs nothing.

Values go through the saver's ``serde`` (LangGraph's ``JsonPlusSerializer`` by default,
or whatever the user passed, e.g. ``EncryptedSerializer``) and are opaque to the
database. What the database must read (parent, run id, channel versions, metadata for
``list(filter=...)``) is stored beside them in plain columns.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..encryption import (
    SEALED_TYPE,
    Encryption,
    EncryptionError,
    Location,
    blob_at,
    checkpoint_at,
    item_at,
    no_keys,
    write_at,
)
from ..errors import ValueTooLargeError, decoding
from .compression import compress, decompress
from .config import Target, check_no_nul, checkpoint_config, thread_key
from .lists import (
    LIST_TYPE,
    ChunkedList,
    Fetch,
    ItemRow,
    ListMemory,
    ListRef,
    ListRequest,
    MemoKey,
    chunk_list,
    remember_stored,
    resolve_list,
    worth_chunking,
)

EMPTY = "empty"
"""Blob type of a channel version that has no value (the channel was cleared)."""

EMPTY_CHANNELS = "__lgmp_empty__"
"""Key of a sealed checkpoint body listing its channels without a value: an ``empty``
blob type (clear, beside the blob) is believed only for a channel the body lists, so a
sealed value retyped ``empty`` in the database fails instead of vanishing."""

DELTA_COUNTERS = "counters_since_delta_snapshot"

STRUCTURAL_METADATA = frozenset({"source", "step", "parents", "run_id"})
"""Metadata keys LangGraph writes and the plans read (never dropped from the projection)."""

JSON_METADATA = "json"
"""Metadata type of a checkpoint whose metadata is stored only as its JSON projection,
because that projection is exact (see ``json_exact``)."""

Typed = tuple[str, bytes]

_ABSENT = object()

INLINE_MAX_BYTES = 48
"""Scalar channel values serialized to at most this many bytes are kept in the checkpoint
record itself (on backends that opt in) instead of in a blob row of their own."""
INLINE_MEMO_SIZE = 256
"""Small scalars a codec remembers serialized (see ``CheckpointCodec._inline_memo``)."""

_SCALARS = (type(None), bool, int, float, str)
_INLINE_MAX_CHARS = 40


def version_text(version: str | int | float) -> str:
    """Channel versions as stored text: exact for the str/int/float versions LangGraph uses."""
    return version if isinstance(version, str) else repr(version)


def _native_version(version: Any) -> bool:
    """Whether a version is stored as it is (str or int) rather than as its text."""
    kind = type(version)
    if kind is str or kind is int:  # the common case, without the isinstance chain
        return True
    return isinstance(version, str) or (isinstance(version, int) and not isinstance(version, bool))


def json_safe(value: Any) -> Any:
    """A JSON projection of metadata that PostgreSQL's ``jsonb`` accepts.

    ``jsonb`` rejects ``\\u0000`` and non-finite numbers. The projection is only used to
    narrow ``list(filter=...)`` in the database; the exact metadata is decoded from its
    serialized copy and the filter re-checked on it, so an escape that collides with
    real text can only cost a discarded row, never a wrong result.
    """
    kind = type(value)  # exact types first: a put projects every metadata value
    if kind is str:
        return value.replace("\x00", "\\u0000") if "\x00" in value else value
    if kind is dict:
        # text keys and plain values as they are, without a call each (see _json_plain)
        return {
            k if type(k) is str and "\x00" not in k else json_safe(str(k)): v
            if _json_plain(v)
            else json_safe(v)
            for k, v in value.items()
        }
    if value is None or kind is int or kind is bool:
        return value
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return repr(value).replace("\x00", "\\u0000")


def _json_plain(value: Any) -> bool:
    """A value :func:`json_safe` keeps as it is and :func:`json_exact` accepts, told
    without a call of either: ``None``, a bool or int, ASCII text without NUL (most
    metadata values)."""
    kind = type(value)
    return (
        value is None
        or kind is int
        or kind is bool
        or (kind is str and value.isascii() and "\x00" not in value)
    )


def _small_scalar(value: Any) -> bool:
    """Worth trying to inline: cheap to serialize whether or not it changed this step."""
    return type(value) in _SCALARS and (type(value) is not str or len(value) <= _INLINE_MAX_CHARS)


def _inline_entry(version: Any, typ: str, data: bytes) -> list[Any]:
    """``[version]`` for ``None``, ``[version, base64]`` for msgpack, else with the type."""
    if typ == "null" and not data:
        return [version]
    if typ == "msgpack":
        return [version, base64.b64encode(data).decode()]
    return [version, typ, base64.b64encode(data).decode()]


def _inline_value(entry: list[Any]) -> Typed:
    if len(entry) == 1:
        return "null", b""
    if len(entry) == 2:
        return "msgpack", base64.b64decode(entry[1])
    return entry[1], base64.b64decode(entry[2])


def inline_values(versions: Mapping[str, Any] | None) -> dict[str, Typed]:
    """The values a stored ``versions_json`` carries inline (see ``_inline_entry``)."""
    return {ch: _inline_value(v) for ch, v in (versions or {}).items() if isinstance(v, list)}


def plain_versions(versions: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``versions_json`` as channel versions, inline values left out."""
    return {ch: v[0] if isinstance(v, list) else v for ch, v in versions.items()}


def json_exact(value: Any) -> bool:
    """Whether ``value`` comes back from PostgreSQL's ``jsonb`` equal and of the same types.

    Not: tuples (come back as lists), non-str keys, NUL or unpaired surrogates in text,
    non-finite or negative-zero floats, floats written with an exponent (``jsonb``
    prints them as plain digits, which read back as int), or any other type.
    """
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return True
    if kind is str:
        return "\x00" not in value and (value.isascii() or _utf8_ok(value))
    if kind is float:
        r = repr(value)
        return math.isfinite(value) and "e" not in r and not r.startswith("-0.0")
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or not json_exact(k):
                return False
            if not _json_plain(v) and not json_exact(v):
                return False
        return True
    if kind is list:
        return all(json_exact(v) for v in value)
    return False


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """``list(filter=...)`` semantics of ``InMemorySaver``: top-level equality."""
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


@dataclass(frozen=True)
class EncodedBlob:
    channel: str
    version: str
    type: str
    data: bytes | None


@dataclass(frozen=True)
class EncodedWrite:
    task_id: str
    idx: int
    channel: str
    type: str
    data: bytes
    task_path: str


@dataclass(frozen=True)
class EncodedCheckpoint:
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Typed
    metadata: Typed
    metadata_json: dict[str, Any]
    run_id: str | None
    channel_versions: dict[str, str]
    """Versions as text, as blobs are keyed."""
    versions_json: dict[str, Any]
    """Versions to store beside the checkpoint: native when the body leaves them out, and
    a list ``[version, ...]`` for a value kept inline (see ``_inline_entry``)."""
    blobs: list[EncodedBlob]
    delta_channels: list[str] = field(default_factory=list)
    """Channels this checkpoint's metadata marks as ``DeltaChannel``s."""
    valued_channels: list[str] = field(default_factory=list)
    """Channels with a stored value at this checkpoint: a delta replay seeds from it."""
    items: dict[bytes, Typed] = field(default_factory=dict)
    """New list items (see :mod:`.lists`) by id."""
    nodes: dict[bytes, list[bytes]] = field(default_factory=dict)
    """New list pages and spines by id."""
    lists: dict[MemoKey, ChunkedList] = field(default_factory=dict)
    """The list channels, to remember once the checkpoint is stored."""
    changed: frozenset[str] = frozenset()
    """The channels with a new version here (``new_versions``)."""
    refers: bool = False
    """Whether it names rows it does not store: the blobs of channels it left unchanged,
    the items of a list version it built on. Those are its parent's, so it may be stored
    only while its parent is (see ``put``'s ``whole`` in ``..saver``)."""


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint as read back from storage, before decoding."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Typed
    metadata: Typed
    blobs: Sequence[tuple[str, str, bytes | None]]  # (channel, type, data)
    writes: Sequence[tuple[str, str, str, bytes, str, int]]
    # (task_id, channel, type, data, task_path, idx)
    channel_versions: Mapping[str, Any] | None = None
    """The stored ``versions_json``: the versions of bodies stored without them, and the
    values kept inline."""
    metadata_json: Mapping[str, Any] | None = None
    """The metadata, when stored as JSON only (type ``JSON_METADATA``)."""


@dataclass(frozen=True)
class ChainLink:
    """One ancestor met while walking a checkpoint's parent chain for delta history."""

    checkpoint_id: str
    seeds: Mapping[str, tuple[str, bytes | None]]  # channel -> stored blob found here
    writes: Sequence[tuple[str, str, str, bytes, str, int]]  # as StoredCheckpoint.writes
    versions: Mapping[str, str] = field(default_factory=dict)
    """The version (as text) of each seed: where an encrypted seed was sealed."""


class CheckpointCodec:
    """Encodes and decodes checkpoints with one serializer; holds no connection."""

    def __init__(
        self,
        serde: SerializerProtocol,
        *,
        max_value_bytes: int,
        memory: ListMemory,
        inline: bool = False,
        metadata_as_json: bool = False,
        encryption: Encryption | None = None,
        index_keys: Sequence[str] = (),
    ) -> None:
        self.serde = serde
        self.encryption = encryption
        """Seals every stored value (after compression), values kept inline too (each at
        its channel version); with it, metadata is never stored as its JSON projection
        only."""
        self.metadata_keys: frozenset[str] | None = None
        """The metadata keys kept in the JSON projection (``None``: all)."""
        if encryption is not None:
            # Inline values stay inline (sealed): a backend that inlines (PostgreSQL)
            # keeps an unchanged small value only in each checkpoint row, never as a
            # blob, so a checkpoint written without it after one written with it (the
            # first turn after encryption was turned on) lost the value.
            metadata_as_json = False
            if encryption.metadata_keys is not None:
                keep = encryption.metadata_keys | STRUCTURAL_METADATA | set(index_keys)
                self.metadata_keys = frozenset(keep)
        self.max_value_bytes = max_value_bytes
        self.memory = memory
        self.inline = inline
        """Keep small scalar values in ``versions_json`` rather than as blobs: a blob row
        and its index entry cost far more than a ``None`` or a counter."""
        self.metadata_as_json = metadata_as_json
        """Store metadata whose JSON projection is exact only as that projection."""
        self._inline_memo: dict[tuple[type, Any], Typed] | None = (
            {} if type(serde) is JsonPlusSerializer else None
        )
        """Small scalars as :meth:`_inlined` stored them, by type and value: every put
        stores every one of them (a graph's counters and flags), changed or not, and
        most are the same values put after put. Only for LangGraph's own serializer
        (``None`` otherwise), whose output for a scalar is a function of its type and
        value: another ``serde`` may differ put after put (``EncryptedSerializer`` seals
        each value with a fresh nonce; reused, equal secrets would be equal ciphertexts
        at rest). The codec's serializer is fixed (a new ``serde`` builds new codecs)."""
        self.track_views = True
        """Whether the lists this codec reads are remembered as views a later put builds
        on (see :func:`.lists.resolve_list`): not for history pages, which no put uses."""

    def _inlined(self, values: Mapping[str, Any], versions: Mapping[str, Any]) -> dict[str, Typed]:
        """Every small scalar value of the checkpoint, changed this step or not.

        Unchanged ones too: the checkpoint record must hold all of them, since their
        versions have no blob (or an older one that goes once no checkpoint names it).
        """
        if not self.inline:
            return {}
        out = {}
        memo = self._inline_memo
        for channel, value in values.items():
            if channel in versions and _small_scalar(value):
                # by type too: True == 1 == 1.0 are three values; floats not at all
                # (-0.0 == 0.0)
                key = (type(value), value)
                typed = None if memo is None or type(value) is float else memo.get(key)
                if typed is None:
                    typed = compress(*self._dump(value, f"channel {channel!r}"))
                    if memo is not None and type(value) is not float:
                        if len(memo) >= INLINE_MEMO_SIZE:
                            memo.clear()
                        memo[key] = typed
                if len(typed[1]) <= INLINE_MAX_BYTES:
                    out[channel] = typed
        return out

    def _pack(self, typed: Typed, where: Location) -> Typed:
        """``typed`` compressed, then sealed at ``where`` when encryption is on."""
        typ, data = compress(*typed)
        if self.encryption is None:
            return typ, data
        return self.encryption.seal_typed(typ, data, where)

    def _packed_at(self, typed: Typed, at: Callable[..., Location], *where: Any) -> Typed:
        """:meth:`_pack` at ``at(*where)``, a location built only when encryption is on
        (a short turn packs about twenty values)."""
        if self.encryption is None:
            return compress(*typed)
        return self._pack(typed, at(*where))

    def _dump(self, value: Any, what: str) -> Typed:
        typ, data = self.serde.dumps_typed(value)
        if len(data) > self.max_value_bytes:
            raise ValueTooLargeError(what, len(data), self.max_value_bytes)
        return typ, data

    def encode_checkpoint(
        self,
        target: Target,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        user_id: str | None = None,
        whole: bool = False,
    ) -> EncodedCheckpoint:
        """``whole``: every channel's value stored, no list built on a stored one, so
        the checkpoint names no row it does not store (``refers`` is false): for a put
        whose parent went meanwhile (an expired thread revived by another write, which
        purged it), the parent's rows with it."""
        tid, ns, cid = target.thread_id, target.checkpoint_ns, checkpoint["id"]
        check_no_nul(cid, "checkpoint_id", "the checkpoint's id")
        parent_id = config["configurable"].get("checkpoint_id") or None
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        blobs = []
        items: dict[bytes, Typed] = {}
        nodes: dict[bytes, list[bytes]] = {}
        lists: dict[MemoKey, ChunkedList] = {}
        tk = target.thread_key
        inline = self._inlined(values, checkpoint["channel_versions"])
        if whole:
            new_versions = checkpoint["channel_versions"]
        refers = any(
            ch not in new_versions and ch not in inline for ch in checkpoint["channel_versions"]
        )
        for channel, version in new_versions.items():
            vtext = version if type(version) is str else version_text(version)
            value = values.get(channel, _ABSENT)
            key = (tk, ns, channel)
            if not worth_chunking(value):
                # The channel no longer holds the remembered list, so retention may soon
                # delete items only it used: a later list must not refer to them. The
                # objects a task returned for it are of no use either (one lock for both).
                self.memory.forget(key, written=channel not in inline)
                if channel in inline:
                    continue
                if value is _ABSENT:
                    blobs.append(EncodedBlob(channel, vtext, EMPTY, None))
                else:
                    dumped = self._dump(value, f"channel {channel!r}")
                    typ, data = self._packed_at(dumped, blob_at, tid, ns, channel, vtext, user_id)
                    blobs.append(EncodedBlob(channel, vtext, typ, data))
            else:
                base = None if whole else self.memory.base(key, value, parent_id)
                refers = refers or base is not None
                chunked = chunk_list(
                    tk,
                    value,
                    base,
                    partial(self._dump, what=f"channel {channel!r}"),
                    self.memory.take_written(key),
                    None if self.encryption is None else self.encryption.item_id_key(tk, user_id),
                )
                blobs.append(EncodedBlob(channel, vtext, LIST_TYPE, chunked.ref.encode()))
                # Item ids hash the serialized bytes, so compress only what is stored.
                packed = {
                    iid: self._packed_at(typed, item_at, tid, iid, user_id)
                    for iid, typed in chunked.items.items()
                }
                items.update(packed)
                if self.encryption is not None:
                    # The list memory keeps items as stored: a later read opens them
                    # like fetched ones (plaintext there would be refused). It counts
                    # them at their serialized size, not the sealed one.
                    chunked.sizes = {iid: len(data) for iid, (_, data) in chunked.items.items()}
                    chunked.items = packed
                nodes.update(chunked.nodes)
                lists[key] = chunked
        # The id is stored beside the body (it is the record's key).
        body.pop("id", None)
        # Versions are stored beside the checkpoint anyway (blobs are looked up by them),
        # so the body leaves them out unless a float version would not come back exact.
        # Sealed, it keeps them: blobs open at the versions it names, so versions edited
        # in the clear column (an older blob named) do not roll a value back.
        versions = checkpoint["channel_versions"]
        native = all(map(_native_version, versions.values()))
        if native and self.encryption is None:
            body.pop("channel_versions", None)
        elif self.encryption is not None:
            body[EMPTY_CHANNELS] = sorted(ch for ch in versions if ch not in values)
        meta = get_checkpoint_metadata(config, metadata)
        # A DeltaChannel shows as update counters in the metadata, or, at the steps that
        # reset those counters, as a snapshot value.
        counters = meta.get(DELTA_COUNTERS)
        delta_channels = sorted(
            set(counters if isinstance(counters, Mapping) else ())
            | {ch for ch, value in values.items() if isinstance(value, _DeltaSnapshot)}
        )
        run_id = meta.get("run_id")
        texts = {ch: v if type(v) is str else version_text(v) for ch, v in versions.items()}
        versions_json: dict[str, Any] = dict(versions) if native else dict(texts)
        for channel, (typ, data) in inline.items():
            if self.encryption is not None:
                where = blob_at(tid, ns, channel, texts[channel], user_id)
                typ, data = self.encryption.seal_typed(typ, data, where)
            versions_json[channel] = _inline_entry(versions_json[channel], typ, data)
        return EncodedCheckpoint(
            checkpoint_id=checkpoint["id"],
            parent_id=parent_id,
            checkpoint=self._packed_at(
                self._dump(body, "checkpoint"), checkpoint_at, tid, ns, cid, "checkpoint", user_id
            ),
            metadata=(JSON_METADATA, b"")
            if self.metadata_as_json and json_exact(dict(meta))
            else self._packed_at(
                self._dump(meta, "metadata"), checkpoint_at, tid, ns, cid, "metadata", user_id
            ),
            metadata_json=json_safe(  # a new dict: ``meta`` is LangGraph's copy already
                meta
                if self.metadata_keys is None
                else {k: v for k, v in meta.items() if k in self.metadata_keys}
            ),
            run_id=run_id if isinstance(run_id, str) else None,
            channel_versions=texts,
            versions_json=versions_json,
            blobs=blobs,
            delta_channels=delta_channels,
            valued_channels=sorted(values),
            items=items,
            nodes=nodes,
            lists=lists,
            changed=frozenset(new_versions),
            refers=refers and parent_id is not None,
        )

    def narrowing(self, filter: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The part of a ``list(filter=...)`` the database may narrow by: the keys the
        projection keeps (the whole filter is checked on the decoded metadata anyway)."""
        keep = self.metadata_keys
        if keep is None or not filter:
            return filter
        return {k: v for k, v in filter.items() if k in keep} or None

    def forget_replaced_lists(self, target: Target, checkpoint: Checkpoint) -> None:
        """Forget the remembered lists of channels the latest ``checkpoint`` shows holding
        something else (cleared elsewhere, then trimmed): LangGraph reads the latest
        checkpoint before it writes, and the next put must not refer to their items."""
        values = checkpoint["channel_values"]
        for channel in checkpoint["channel_versions"]:
            if not worth_chunking(values.get(channel)):
                self.memory.forget((target.thread_key, target.checkpoint_ns, channel))

    def commit(self, target: Target, encoded: EncodedCheckpoint) -> None:
        """Remember the lists of a checkpoint that is now stored, for the next step."""
        self.memory.advance(
            target.thread_key,
            target.checkpoint_ns,
            encoded.parent_id,
            encoded.checkpoint_id,
            encoded.changed,
        )
        for key, chunked in encoded.lists.items():
            remember_stored(self.memory, key, chunked, encoded.checkpoint_id)

    def resolve_lists(
        self,
        thread_id: str,
        checkpoint_ns: str,
        blobs: Iterable[tuple[str, str, bytes | None]],
        fetch: Fetch,
        parse: Callable[[Any], Iterable[ItemRow]] = iter,
        checkpoint_id: str | None = None,
    ) -> Generator[Any, Any, dict[str, list[Any]]]:
        """Rebuild the list channels among ``blobs`` (a plan step; see :mod:`.lists`),
        as views of ``checkpoint_id`` if given (and this codec tracks views)."""
        at = checkpoint_id if self.track_views else None
        tk = thread_key(thread_id)
        lists: dict[str, list[Any]] = {}
        for channel, typ, data in blobs:
            if typ == LIST_TYPE and data is not None:
                key = (tk, checkpoint_ns, channel)
                where = {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
                with decoding(f"the list items of channel {channel!r}", **where):
                    request = ListRequest(key, ListRef.decode(data), {})
                    sizes: dict[bytes, int] = {}
                    lists[channel] = yield from resolve_list(
                        request,
                        self.memory,
                        fetch,
                        partial(self._load_item, thread_id, sizes),
                        parse,
                        at,
                        sizes,
                    )
        return lists

    def encode_writes(
        self,
        target: Target,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        user_id: str | None = None,
    ) -> list[EncodedWrite]:
        encoded = []
        for idx, (channel, value) in enumerate(writes):
            # What a task returns for a list channel may be an edited element: the next
            # put of that list checks these objects for changes (see lists.chunk_list).
            key = (target.thread_key, target.checkpoint_ns, channel)
            self.memory.note_written(key, value if isinstance(value, list) else [value])
            stored_idx = WRITES_IDX_MAP.get(channel, idx)
            typ, data = self._packed_at(
                self._dump(value, f"write to channel {channel!r}"),
                write_at,
                target.thread_id,
                target.checkpoint_ns,
                target.checkpoint_id or "",
                task_id,
                stored_idx,
                channel,
                task_path,
                user_id,
            )
            encoded.append(EncodedWrite(task_id, stored_idx, channel, typ, data, task_path))
        return encoded

    def _located(self, typ: str) -> bool:
        """Whether loading a value of ``typ`` reads where it was stored: to open it, or to
        refuse a sealed one without keys (else its location need not be built)."""
        return self.encryption is not None or typ == SEALED_TYPE

    def _load(self, typ: str, data: bytes | None, where: Location | None = None) -> Any:
        """A stored value (opened first when encryption is on: ``where`` is where it must
        have been sealed)."""
        return self.serde.loads_typed(self._opened(typ, data, where))

    def _opened(self, typ: str, data: bytes | None, where: Location | None = None) -> Typed:
        """A stored value as the serializer made it: opened, then decompressed."""
        if self.encryption is not None and typ not in (EMPTY, LIST_TYPE):
            if where is None:
                raise AssertionError("an encrypted value read without its location")
            typ, data = self.encryption.open_typed(typ, data or b"", where)
        elif typ == SEALED_TYPE:
            # sealed, and this saver has no keys: refused (the serializer took it for
            # corrupt data, which sends an operator looking for the wrong problem)
            raise no_keys(where)
        return decompress(typ, data or b"")

    def _load_item(
        self, thread_id: str, sizes: dict[bytes, int], item_id: bytes, typ: str, data: bytes
    ) -> Any:
        """A stored list item; its serialized size goes in ``sizes`` (what the list memory
        counts for it: stored compressed, or sealed, it is a few times smaller than what
        the objects read from it hold)."""
        typed = self._opened(typ, data, item_at(thread_id, item_id))
        sizes[item_id] = len(typed[1])
        return self.serde.loads_typed(typed)

    def decode_stored(
        self,
        stored: StoredCheckpoint,
        metadata: CheckpointMetadata | None,
        fetch: Fetch,
        parse: Callable[[Any], Iterable[ItemRow]] = iter,
    ) -> Generator[Any, Any, CheckpointTuple]:
        """Decode a stored checkpoint, rebuilding its list channels first (a plan step)."""
        lists = yield from self.resolve_lists(
            stored.thread_id, stored.checkpoint_ns, stored.blobs, fetch, parse,
            stored.checkpoint_id,
        )  # fmt: skip
        return self.decode_tuple(stored, metadata, lists)

    def _load_at(
        self, typ: str, data: bytes | None, at: Location | None, what: str, /, **where: object
    ) -> Any:
        with decoding(what, **where):
            return self._load(typ, data, at)

    def decode_writes(
        self,
        rows: Iterable[tuple[str, str, str, bytes, str, int]],
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
    ) -> list[PendingWrite]:
        """Pending writes in ``writes_sort_key`` order, the order live execution applies them."""
        ordered = sorted(rows, key=lambda w: writes_sort_key(w[4], w[0], w[5]))
        where = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
        return [
            (
                task_id,
                ch,
                self._load_at(
                    typ,
                    data,
                    write_at(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, ch, path)
                    if self._located(typ)
                    else None,
                    f"the pending write of task {task_id!r} to channel {ch!r}",
                    **where,
                ),
            )
            for task_id, ch, typ, data, path, idx in ordered
        ]

    def decode_metadata(self, stored: StoredCheckpoint) -> CheckpointMetadata:
        at = checkpoint_at(stored.thread_id, stored.checkpoint_ns, stored.checkpoint_id, "metadata")
        if stored.metadata[0] == JSON_METADATA:
            if self.encryption is not None:
                # Metadata kept only in clear is plaintext: a clear type column must not
                # turn the sealed metadata into whatever the clear projection says.
                self.encryption.plaintext(at)
            return cast(CheckpointMetadata, dict(stored.metadata_json or {}))
        return cast(
            CheckpointMetadata,
            self._load_at(*stored.metadata, at, "the metadata", **_where(stored)),
        )

    def decode_tuple(
        self,
        stored: StoredCheckpoint,
        metadata: CheckpointMetadata | None = None,
        lists: Mapping[str, list[Any]] | None = None,
    ) -> CheckpointTuple:
        """Decode a stored checkpoint; ``lists`` holds its list channels, already rebuilt."""
        where = _where(stored)
        tid, ns, cid = stored.thread_id, stored.checkpoint_ns, stored.checkpoint_id
        with decoding("the checkpoint", **where):
            at = None
            if self._located(stored.checkpoint[0]):
                at = checkpoint_at(tid, ns, cid, "checkpoint")
            body = self._load(*stored.checkpoint, at)
            body.setdefault("id", stored.checkpoint_id)
            empty = body.pop(EMPTY_CHANNELS, None)
            if "channel_versions" not in body:
                body["channel_versions"] = plain_versions(stored.channel_versions or {})
            inline = inline_values(stored.channel_versions)
        versions = body["channel_versions"]

        def blob(ch: str, typ: str = SEALED_TYPE) -> Location | None:
            if not self._located(typ):
                return None
            return blob_at(tid, ns, ch, version_text(versions.get(ch, "")))

        if empty is not None:
            # The sealed body vouches for which channels have a value: one stored as
            # empty (its clear type edited) or missing (its row deleted) is refused.
            found = {ch for ch, typ, _ in stored.blobs if typ != EMPTY} | set(inline)
            missing = sorted(set(versions) - set(empty) - found)
            if missing:
                raise EncryptionError(
                    "a channel stored as empty or missing where the sealed checkpoint "
                    "has a value (edited in the database)",
                    **blob_at(tid, ns, missing[0], version_text(versions[missing[0]])).where(),
                )
        values = {
            ch: lists[ch]
            if typ == LIST_TYPE and lists
            else self._load_at(typ, data, blob(ch, typ), f"channel {ch!r}", **where)
            for ch, typ, data in stored.blobs
            if typ != EMPTY
        }
        for ch, typed in inline.items():
            values[ch] = self._load_at(*typed, blob(ch, typed[0]), f"channel {ch!r}", **where)
        body["channel_values"] = values
        parent = (
            checkpoint_config(stored.thread_id, stored.checkpoint_ns, stored.parent_id)
            if stored.parent_id
            else None
        )
        return CheckpointTuple(
            config=checkpoint_config(stored.thread_id, stored.checkpoint_ns, stored.checkpoint_id),
            checkpoint=body,
            metadata=metadata if metadata is not None else self.decode_metadata(stored),
            parent_config=parent,
            pending_writes=self.decode_writes(stored.writes, tid, ns, cid),
        )

    def delta_history(
        self,
        channels: Sequence[str],
        chain: Sequence[ChainLink],
        lists: Mapping[str, list[Any]] | None = None,
        thread_id: str = "",
        checkpoint_ns: str = "",
    ) -> dict[str, DeltaChannelHistory]:
        """Assemble ``get_delta_channel_history`` from a parent chain, newest ancestor first.

        Each channel takes the writes of every ancestor up to and including the first one
        that stores a value for it (its seed), oldest first; see
        ``BaseCheckpointSaver.get_delta_channel_history`` for the contract.
        """
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            per_link: list[list[PendingWrite]] = []
            seed: tuple[str, bytes | None] | None = None
            for link in chain:
                mine = [w for w in link.writes if w[1] == channel]
                per_link.append(
                    self.decode_writes(mine, thread_id, checkpoint_ns, link.checkpoint_id)
                )
                if channel in link.seeds:
                    seed = link.seeds[channel]
                    break
            what = f"the delta history of channel {channel!r}"
            entry: DeltaChannelHistory = {
                "writes": [w for writes in reversed(per_link) for w in writes]
            }
            if seed is not None and seed[0] == LIST_TYPE and lists is not None:
                entry["seed"] = lists[channel]
            elif seed is not None and seed[0] != EMPTY:
                version = link.versions.get(channel, "")
                entry["seed"] = self._load_at(
                    *seed,
                    blob_at(thread_id, checkpoint_ns, channel, version),
                    what,
                    thread_id=thread_id,
                    checkpoint_id=link.checkpoint_id,
                )
            result[channel] = entry
        return result


def _where(stored: StoredCheckpoint) -> dict[str, object]:
    return {
        "thread_id": stored.thread_id,
        "checkpoint_ns": stored.checkpoint_ns,
        "checkpoint_id": stored.checkpoint_id,
    }
