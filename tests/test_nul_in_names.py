"""NUL in a namespace or a checkpoint id: refused alike on every backend, before any write.

Namespaces and checkpoint ids are stored as text (PostgreSQL refuses NUL in text, SQLite's
JSON functions cut at it), so each backend used to fail its own way: PostgreSQL with a
driver ``DataError`` from inside the write, the others with ``InvalidConfigError``. A
thread id may hold NUL on every backend (it is stored as bytes), as in ``InMemorySaver``.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_memory_plus.errors import InvalidConfigError

pytestmark = pytest.mark.storage


def _cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


@pytest.mark.parametrize(
    "where", [{"ns": "sub\x00graph"}, {"checkpoint_id": "1f0\x00abc"}], ids=["ns", "id"]
)
def test_nul_in_a_namespace_or_checkpoint_id_is_refused_alike(
    saver_factory: Any, where: dict[str, str]
) -> None:
    with saver_factory() as saver:
        bad = _cfg("t-nul", **where)
        with pytest.raises(InvalidConfigError, match="NUL"):
            saver.put(bad, empty_checkpoint(), {"step": 0}, {})
        with pytest.raises(InvalidConfigError, match="NUL"):
            saver.put_writes(_cfg("t-nul", where.get("ns", ""), "1f0\x00abc"), [("a", 1)], "task")
        with pytest.raises(InvalidConfigError, match="NUL"):
            saver.get_tuple(bad)
        with pytest.raises(InvalidConfigError, match="NUL"):
            list(saver.list(bad))
        with pytest.raises(InvalidConfigError, match="NUL"):
            list(saver.list(_cfg("t-nul"), before=_cfg("t-nul", checkpoint_id="a\x00")))
        assert list(saver.list(_cfg("t-nul"))) == []  # nothing was stored


def test_nul_in_the_id_of_a_stored_checkpoint_is_refused_alike(saver_factory: Any) -> None:
    """The id a put stores is the checkpoint's own (``checkpoint["id"]``), not the
    config's: refused alike too (SQLite stored it, PostgreSQL raised ``DataError``)."""
    with saver_factory() as saver:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = "1f0\x00x"
        with pytest.raises(InvalidConfigError, match="checkpoint_id must not contain NUL"):
            saver.put(_cfg("t-nul-id"), checkpoint, {"step": 0}, {})
        assert saver.get_tuple(_cfg("t-nul-id")) is None


def test_nul_in_a_thread_id_round_trips(saver_factory: Any) -> None:
    with saver_factory() as saver:
        config = saver.put(_cfg("a\x00b"), empty_checkpoint(), {"step": 0}, {})
        saver.put_writes(config, [("a", 1)], "task")
        found = saver.get_tuple(_cfg("a\x00b"))
        assert found is not None and found.config["configurable"]["thread_id"] == "a\x00b"
        assert found.pending_writes == [("task", "a", 1)]
        assert saver.get_tuple(_cfg("a")) is None and saver.get_tuple(_cfg("a\x00")) is None
