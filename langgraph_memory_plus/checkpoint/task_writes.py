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

Each write keeps the task path of the call that stored it, as ``InMemorySaver`` does, since
pending writes are read back in ``writes_sort_key`` order, by path first: the record has
one path (its row's, or its head on Redis), and a write stored by a call with another path
carries that one after its index (``<index> <path>``). A task's calls almost always share
a path, so records stay as they were.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .codec import EncodedWrite

Write = tuple[int, str, str, bytes, str]
"""(index, channel, type, data, task path)."""

WriteRow = tuple[str, str, str, bytes, str, int]
"""(task_id, channel, type, data, task_path, index): a row of ``StoredCheckpoint.writes``."""


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def pack(writes: Iterable[Write], path: str) -> bytes:
    """The record of ``writes`` whose own path is ``path`` unless it says otherwise: four
    netstrings a write, formatted at once (every put_writes packs its record)."""
    out = []
    for idx, channel, typ, data, own in writes:
        head = b"%d" % idx if own == path else b"%d %s" % (idx, _utf8(own))
        ch, ty = _utf8(channel), _utf8(typ)
        out.append(
            b"%d:%s%d:%s%d:%s%d:%s" % (len(head), head, len(ch), ch, len(ty), ty, len(data), data)
        )
    return b"".join(out)


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


def unpack(raw: bytes, path: str) -> list[Write]:
    """The writes of a record whose path is ``path``."""
    parts: list[bytes] = []
    view = bytes(raw)
    pos = 0
    while pos < len(view):
        part, pos = _read(view, pos)
        parts.append(part)
    if len(parts) % 4:
        raise ValueError("malformed pending-writes record")
    out: list[Write] = []
    for i in range(0, len(parts), 4):
        idx, own, other = parts[i].partition(b" ")
        out.append(
            (
                int(idx),
                parts[i + 1].decode("utf-8", "surrogatepass"),
                parts[i + 2].decode("utf-8", "surrogatepass"),
                parts[i + 3],
                other.decode("utf-8", "surrogatepass") if own else path,
            )
        )
    return out


def of_encoded(writes: Sequence[EncodedWrite]) -> list[Write]:
    return [(w.idx, w.channel, w.type, w.data, w.task_path) for w in writes]


def merge(stored: Sequence[Write], new: Sequence[Write]) -> list[Write]:
    """``new`` applied over ``stored``: regular writes keep the first, special the last."""
    merged = {w[0]: w for w in stored}
    for write in new:
        if write[0] < 0 or write[0] not in merged:
            merged[write[0]] = write
    return list(merged.values())


def rows(task_id: str, task_path: str, raw: bytes) -> list[WriteRow]:
    """A stored record as rows of ``StoredCheckpoint.writes``."""
    writes = unpack(raw, task_path)
    return [(task_id, ch, typ, data, own, idx) for idx, ch, typ, data, own in writes]
