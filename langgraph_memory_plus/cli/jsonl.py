"""``thread export`` / ``thread import``: a thread as JSON lines, lossless.

Line 1 is a header ``{"format": "langgraph-memory-plus/thread", "version": 1,
"thread_id": ...}``. Then, oldest first, one line per call a saver received when the
thread was written, replayable as is:

- ``{"op": "put", "ns": ..., "parent": id or null, "checkpoint": [type, base64],
  "metadata": [type, base64], "new_versions": {...}}``
- ``{"op": "writes", "ns": ..., "checkpoint_id": ..., "task_id": ..., "task_path": ...,
  "writes": [[channel, type, base64], ...]}``

Values are the saver's serializer's typed bytes (``serde.dumps_typed``), base64 encoded,
so anything LangGraph can checkpoint survives, encrypted payloads included (import with
the same key). The export is :func:`~langgraph_memory_plus.migration.copy_threads` into a
writer that prints instead of storing, so it reads in the same bounded batches.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ..transfer.migration import CopyReport, Progress, copy_threads
from .output import FOUND_PROBLEMS, CliError

FORMAT = "langgraph-memory-plus/thread"
VERSION = 1


def _typed(pair: tuple[str, bytes]) -> list[str]:
    return [pair[0], base64.b64encode(pair[1]).decode("ascii")]


def _untyped(value: Any) -> tuple[str, bytes]:
    typ, data = value
    return str(typ), base64.b64decode(data)


class JsonLinesWriter(BaseCheckpointSaver[Any]):
    """A target for ``copy_threads`` that writes each ``put`` and ``put_writes`` as a line."""

    def __init__(self, out: TextIO, serde: Any) -> None:
        super().__init__(serde=serde)
        self.out = out

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return iter(())  # nothing written yet: everything is copied

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return None

    def _line(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        c = config["configurable"]
        self._line(
            {
                "op": "put",
                "ns": c.get("checkpoint_ns", ""),
                "parent": c.get("checkpoint_id"),
                "checkpoint": _typed(self.serde.dumps_typed(checkpoint)),
                "metadata": _typed(self.serde.dumps_typed(metadata)),
                "new_versions": dict(new_versions),
            }
        )
        return config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        c = config["configurable"]
        self._line(
            {
                "op": "writes",
                "ns": c.get("checkpoint_ns", ""),
                "checkpoint_id": c["checkpoint_id"],
                "task_id": task_id,
                "task_path": task_path,
                "writes": [[ch, *_typed(self.serde.dumps_typed(v))] for ch, v in writes],
            }
        )


def export_thread(
    saver: Any, thread_id: str, out: TextIO, progress: Progress | None = None
) -> CopyReport:
    out.write(json.dumps({"format": FORMAT, "version": VERSION, "thread_id": thread_id}) + "\n")
    return copy_threads(saver, JsonLinesWriter(out, saver.serde), [thread_id], progress=progress)


def import_thread(
    saver: Any, lines: Any, thread_id: str | None = None, progress: Any = None
) -> tuple[str, int, int]:
    """Replay an export (a text stream: ``readline`` and iteration) into ``saver``;
    returns (thread id, checkpoints, writes)."""
    header = _parse(lines.readline(), 1)
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise CliError(f"not a {FORMAT} v{VERSION} export (first line: {header!r:.100})")
    tid = thread_id or str(header["thread_id"])
    checkpoints = writes = 0
    for number, raw in enumerate(lines, start=2):
        if not raw.strip():
            continue
        rec = _parse(raw, number)
        configurable: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": rec.get("ns", "")}
        try:
            if rec["op"] == "put":
                if rec["parent"]:
                    configurable["checkpoint_id"] = rec["parent"]
                saver.put(
                    {"configurable": configurable},
                    saver.serde.loads_typed(_untyped(rec["checkpoint"])),
                    saver.serde.loads_typed(_untyped(rec["metadata"])),
                    rec["new_versions"],
                )
                checkpoints += 1
                if progress is not None:
                    progress(checkpoints)
            elif rec["op"] == "writes":
                configurable["checkpoint_id"] = rec["checkpoint_id"]
                values = [
                    (ch, saver.serde.loads_typed((t, base64.b64decode(d))))
                    for ch, t, d in rec["writes"]
                ]
                saver.put_writes(
                    {"configurable": configurable}, values, rec["task_id"], rec.get("task_path", "")
                )
                writes += len(values)
            else:
                raise CliError(f"line {number}: unknown op {rec['op']!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise CliError(f"line {number}: bad record ({type(exc).__name__}: {exc})") from None
    return tid, checkpoints, writes


def _parse(raw: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise CliError(f"line {number}: not JSON ({exc})", FOUND_PROBLEMS) from None
    if not isinstance(value, dict):
        raise CliError(f"line {number}: not a JSON object")
    return value
