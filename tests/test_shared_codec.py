"""A saver builds its codec once and shares it between calls (issue 39): what must still
follow the saver.

``with_allowlist`` clones a saver with a new ``serde`` (a shallow copy, so the clone starts
with the original's codec), and encryption can be swapped on a saver (a rekey): both must
encode with what the saver has now, and the original must keep its own.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_memory_plus import Encryption
from langgraph_memory_plus.checkpoint.codec import json_safe

pytestmark = pytest.mark.storage

K1, K2 = b"\x01" * 32, b"\x02" * 32


class CountingSerde(JsonPlusSerializer):
    """Counts what it serializes: shows which serializer a put used."""

    def __init__(self) -> None:
        super().__init__()
        self.dumped = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.dumped += 1
        return super().dumps_typed(obj)


def _put(saver: Any, value: Any) -> Any:
    config = {"configurable": {"thread_id": f"c-{uuid.uuid4()}", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": value}
    checkpoint["channel_versions"] = {"v": "1"}
    return saver.put(config, checkpoint, {"step": 0}, {"v": "1"})


def test_a_clone_with_a_new_serde_encodes_with_it_and_the_original_with_its_own(
    saver_factory: Any,
) -> None:
    first, second = CountingSerde(), CountingSerde()
    with saver_factory(serde=first) as saver:
        _put(saver, "warm")  # the codec is built and shared from here on
        clone = copy.copy(saver)  # what ``with_allowlist`` does
        clone.serde = second
        before = first.dumped
        stored = _put(clone, "on the clone")
        assert second.dumped > 0 and first.dumped == before
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.checkpoint["channel_values"]["v"] == "on the clone"
        _put(saver, "on the original")
        assert first.dumped > before


def test_a_saver_whose_encryption_is_swapped_seals_with_the_new_one(saver_factory: Any) -> None:
    with saver_factory(encryption=Encryption({"k1": K1})) as saver:
        stored = _put(saver, "sealed under k1")
        saver.encryption = Encryption({"k2": K2})
        stored_new = _put(saver, "sealed under k2")
    with saver_factory(encryption=Encryption({"k2": K2})) as s:
        tup = s.get_tuple(stored_new)
        assert tup is not None and tup.checkpoint["channel_values"]["v"] == "sealed under k2"
    with saver_factory(encryption=Encryption({"k1": K1})) as s:
        tup = s.get_tuple(stored)
        assert tup is not None and tup.checkpoint["channel_values"]["v"] == "sealed under k1"


class Text(str):
    pass


class Table(dict):  # type: ignore[type-arg]
    pass


def test_the_json_projection_is_the_same_for_subclasses_as_for_exact_types() -> None:
    """``json_safe`` checks exact types first; subclasses take the general path."""
    for value in ("a\x00b", {"k\x00": ["x\x00", 1.5, float("nan"), True, None]}):
        expected = json_safe(value)
        assert expected == json_safe(Text(value) if isinstance(value, str) else Table(value))
    assert json_safe(Text("a\x00b")) == "a\\u0000b" and json_safe(Text("ab")) == "ab"
    assert json_safe({1: Text("x")}) == {"1": "x"}
