"""Stored values are deflated with a frozen preset dictionary (checkpoint.compression)."""

from __future__ import annotations

import hashlib
import os
import zlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_memory_plus.checkpoint import compression
from langgraph_memory_plus.checkpoint.compression import (
    DICTIONARY,
    MAX_BYTES,
    MIN_BYTES,
    SUFFIX,
    compress,
    decompress,
)

SERDE = JsonPlusSerializer()


def reply(n: int) -> AIMessage:
    return AIMessage(
        content=f"Here is answer number {n}, with a few words of ordinary text in it.",
        id=f"ai-{n}",
        response_metadata={"model_name": "some-model", "finish_reason": "stop"},
        usage_metadata={"input_tokens": 10 * n, "output_tokens": 12, "total_tokens": 10 * n + 12},
    )


def test_the_dictionary_is_frozen() -> None:
    """Stored data depends on these exact bytes: changing them needs a new SUFFIX."""
    assert SUFFIX == "+lgz1"
    assert hashlib.sha256(DICTIONARY).hexdigest() == (
        "6957e635a23c72435f76fa6d1938f8e99be0d34f80fc092dfc3c4fc60f76b2d5"
    )


@pytest.mark.parametrize("message", [reply(3), HumanMessage("hello there, how are you?", id="h")])
def test_messages_round_trip_smaller(message: AIMessage | HumanMessage) -> None:
    typ, raw = SERDE.dumps_typed(message)
    stored_typ, stored = compress(typ, raw)
    assert stored_typ == typ + SUFFIX
    assert len(stored) < 0.7 * len(raw)
    assert decompress(stored_typ, stored) == (typ, raw)
    assert SERDE.loads_typed(decompress(stored_typ, stored)) == message


def test_values_that_would_not_gain_are_stored_as_they_are() -> None:
    tiny = b"\x92\x01\x02"
    noise = os.urandom(4096)
    huge = b"a" * (MAX_BYTES + 1)
    for data in (tiny, noise, huge, b"x" * (MIN_BYTES - 1)):
        assert compress("msgpack", data) == ("msgpack", data)
        assert decompress("msgpack", data) == ("msgpack", data)


def test_ciphertext_is_stored_as_it_is() -> None:
    """After EncryptedSerializer there is nothing to compress, so sizes say nothing."""
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    typ, data = serde.dumps_typed(reply(1))
    assert compress(typ, data) == (typ, data)


def test_a_value_inflating_beyond_the_limit_is_refused() -> None:
    packer = zlib.compressobj(
        6, zlib.DEFLATED, compression._WBITS, compression._MEM_LEVEL, zdict=DICTIONARY
    )
    bomb = packer.compress(bytes(MAX_BYTES + 10)) + packer.flush()
    with pytest.raises(ValueError, match="inflates beyond"):
        decompress("msgpack" + SUFFIX, bomb)
