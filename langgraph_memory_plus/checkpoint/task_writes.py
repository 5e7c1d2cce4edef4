"""One task's pending writes, stored as one record.

LangGraph saves what a task wrote in one ``put_writes`` call, and most tasks write two or
three channels (the state key and the edge that triggers the next node). Stored as a row
(or hash field) per write, every write repeated the key (thread, namespace, checkpoint,
task) and its index entry: in a chat that overhead was most of the pending writes' bytes.
So the PostgreSQL and Redis savers store one record per (checkpoint, task).

The record is a run of netstrings (``<length>:<bytes>``), four per write: index, channel,
type, data. Netstrings are binary safe, a few lines of Lua parse them (Redis merges a
second call in its script) and SQL can build them (the PostgreSQL migration packs
existing rows with ``string_agg``).

A second call for the same task merges as ``BaseCheckpointSaver`` says: a regular write
(index >= 0) already stored stays, a special one (``ERROR``, ``INTERRUPT``, ``RESUME``...,
whose index is negative) is replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .codec import EncodedWrite

Write = tuple[int, str, str, bytes]
"""(index, channel, type, data)."""

WriteRow = tuple[str, str, str, bytes, str, int]
"""(task_id, channel, type, data, task_path, index): a row of ``StoredCheckpoint.writes``."""


def _netstring(data: bytes) -> bytes:
    return b"%d:%s" % (len(data), data)


def pack(writes: Iterable[Write]) -> bytes:
    return b"".join(
        _netstring(b"%d" % idx)
        + _netstring(channel.encode("utf-8", "surrogatepass"))
        + _netstring(typ.encode("utf-8", "surrogatepass"))
        + _netstring(data)
        for idx, channel, typ, data in writes
    )


def _read(view: bytes, pos: int) -> tuple[bytes, int]:
    """The netstring at ``pos`` and the position after it."""
    colon = view.index(b":", pos)
    start = colon + 1
    stop = start + int(view[pos:colon])
    if stop > len(view):
        raise ValueError("truncated pending-writes record")
    return view[start:stop], stop


def split_head(raw: bytes) -> tuple[bytes, bytes]:
    """A record's leading netstring (Redis puts the task path there) and the rest."""
    view = bytes(raw)
    head, pos = _read(view, 0)
    return head, view[pos:]


def unpack(raw: bytes) -> list[Write]:
    parts: list[bytes] = []
    view = bytes(raw)
    pos = 0
    while pos < len(view):
        part, pos = _read(view, pos)
        parts.append(part)
    if len(parts) % 4:
        raise ValueError("malformed pending-writes record")
    return [
        (
            int(parts[i]),
            parts[i + 1].decode("utf-8", "surrogatepass"),
            parts[i + 2].decode("utf-8", "surrogatepass"),
            parts[i + 3],
        )
        for i in range(0, len(parts), 4)
    ]


def of_encoded(writes: Sequence[EncodedWrite]) -> list[Write]:
    return [(w.idx, w.channel, w.type, w.data) for w in writes]


def merge(stored: Sequence[Write], new: Sequence[Write]) -> list[Write]:
    """``new`` applied over ``stored``: regular writes keep the first, special the last."""
    merged = {w[0]: w for w in stored}
    for write in new:
        if write[0] < 0 or write[0] not in merged:
            merged[write[0]] = write
    return list(merged.values())


def rows(task_id: str, task_path: str, raw: bytes) -> list[WriteRow]:
    """A stored record as rows of ``StoredCheckpoint.writes``."""
    return [(task_id, ch, typ, data, task_path, idx) for idx, ch, typ, data in unpack(raw)]
