"""Compression of stored values with a preset dictionary.

Checkpoints, pending writes and list items are small (a few hundred bytes each), so
general-purpose compression barely helps them, and PostgreSQL's TOAST does not even try
below about 2 KB. Yet much of each one is the same names every time: the message
classes' module paths, ``additional_kwargs``, ``response_metadata``, ``versions_seen``,
``branch:to:``. Deflate primed with a dictionary of those names stores each of them as a
few bits, and the free text around them compresses as usual.

The dictionary is part of the storage format: a compressed value's type is the
serializer's type plus :data:`SUFFIX`, so the dictionary below must never change; a
new one needs a new suffix (and this module must keep reading the old).

Compression runs after the serializer, on what it produced. With ``EncryptedSerializer``
that is ciphertext, which does not compress and is stored as it is, so nothing about
the plaintext shows in the stored sizes.
"""

from __future__ import annotations

import zlib

SUFFIX = "+lgz1"
"""Appended to the serializer's type of a value stored compressed."""

MIN_BYTES = 48
"""Smaller values are stored as they are: the saving would be a few bytes at best."""

MAX_BYTES = 1 << 20
"""Larger values are stored as they are: a 4 KB window gains little on them, and
PostgreSQL compresses large values itself."""

_WBITS = -12  # raw deflate (no header or checksum), 4 KB window: cheap to set up per value
_MEM_LEVEL = 4
_LEVEL = 6


def _msgpack_str(text: str) -> bytes:
    """``text`` with the msgpack string header it carries inside a serialized value."""
    raw = text.encode()
    if len(raw) < 32:
        return bytes([0xA0 | len(raw)]) + raw
    return bytes([0xD9, len(raw)]) + raw


# Frozen: see the module docstring. Rarer names first; deflate finds the last ones
# with the shortest distances.
_NAMES = (
    "langchain_core.messages.function",
    "FunctionMessage",
    "langchain_core.messages.chat",
    "ChatMessage",
    "langchain_core.messages.system",
    "SystemMessage",
    "langchain_core.messages.modifier",
    "RemoveMessage",
    "langgraph.types",
    "Interrupt",
    "Send",
    "Command",
    "resume",
    "goto",
    "update",
    "graph",
    "when",
    "during",
    "ns",
    "value",
    "__interrupt__",
    "__resume__",
    "__error__",
    "__scheduled__",
    "__pregel_tasks",
    "__end__",
    "checkpoint_ns",
    "checkpoint_id",
    "thread_id",
    "writes",
    "input",
    "fork",
    "source",
    "step",
    "parents",
    "run_id",
    "user_id",
    "assistant_id",
    "graph_id",
    "langgraph_step",
    "langgraph_node",
    "example",
    "artifact",
    "status",
    "success",
    "error",
    "tool_call_id",
    "langchain_core.messages.tool",
    "ToolMessage",
    "tool",
    "invalid_tool_calls",
    "tool_calls",
    "tool_call",
    "args",
    "function",
    "arguments",
    "index",
    "logprobs",
    "system_fingerprint",
    "service_tier",
    "model_provider",
    "openai",
    "anthropic",
    "stop_reason",
    "end_turn",
    "tool_use",
    "input_token_details",
    "output_token_details",
    "cache_creation",
    "cache_read",
    "reasoning",
    "audio",
    "usage_metadata",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "token_usage",
    "model_name",
    "finish_reason",
    "stop",
    "response_metadata",
    "additional_kwargs",
    "name",
    "type",
    "human",
    "ai",
    "content",
    "text",
    "langchain_core.messages.human",
    "HumanMessage",
    "langchain_core.messages.ai",
    "AIMessage",
    "model_validate",
    "__start__",
    "__input__",
    "messages",
    "updated_channels",
    "branch:to:",
    "channel_versions",
    "versions_seen",
    "channel_values",
    "ts",
    "id",
    "v",
)
DICTIONARY = b"".join(_msgpack_str(name) for name in _NAMES)

# Loading the dictionary into a compressor costs about as much as compressing a small
# value; every value starts from a copy of this primed one instead.
_PRIMED = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zdict=DICTIONARY)


def compress(typ: str, data: bytes) -> tuple[str, bytes]:
    """The value to store: compressed when that saves at least a tenth of its size."""
    if not MIN_BYTES <= len(data) <= MAX_BYTES:
        return typ, data
    packer = _PRIMED.copy()
    packed = packer.compress(data) + packer.flush()
    if len(packed) * 10 > len(data) * 9:
        return typ, data
    return typ + SUFFIX, packed


def decompress(typ: str, data: bytes) -> tuple[str, bytes]:
    """The serializer's (type, bytes) of a stored value.

    Nothing larger than :data:`MAX_BYTES` is ever compressed, so a value that would
    inflate beyond it is refused rather than expanded.
    """
    if not typ.endswith(SUFFIX):
        return typ, data
    unpacker = zlib.decompressobj(_WBITS, zdict=DICTIONARY)
    raw = unpacker.decompress(data, MAX_BYTES + 1)
    if len(raw) > MAX_BYTES or unpacker.unconsumed_tail:
        raise ValueError(f"a stored compressed value inflates beyond {MAX_BYTES} bytes")
    return typ[: -len(SUFFIX)], raw + unpacker.flush()
