"""Adversarial tests of encryption at rest (issue 37): what the first round missed.

Key material in errors, ids that are hard to encode, an interrupt resumed and a ``Send``
fan-out, threads copied into an encrypted database through the CLI, rekeys racing.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_erasure import Target, mentions, target

from langgraph_memory_plus.encryption import ENV_KEYS, Encryption, EncryptionError
from langgraph_memory_plus.errors import InvalidConfigError

pytestmark = pytest.mark.storage
__all__ = ["target"]

K1, K2 = os.urandom(32), os.urandom(32)


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _leaks(text: str, key: bytes) -> bool:
    """Whether ``text`` shows any common rendering of ``key`` (or a good part of one)."""
    forms = [_b64(key), key.hex(), repr(key), base64.urlsafe_b64encode(key).decode()]
    return any(form[2:14] in text for form in forms)


# -- key material never in an error ----------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "{b64}",  # the bare key, no id (the most common mistake)
        "k1:{b64}",  # the wrong separator
        "k1={b64},{b64}",  # a second entry without an id
        "{b64}=k1",  # swapped
        "k1={b64}x",  # a key that is not valid base64
        "k1={short}",  # a key of the wrong length
    ],
)
def test_a_malformed_key_variable_is_a_clear_error_without_the_key(value: str) -> None:
    raw = value.format(b64=_b64(K1), short=_b64(K1[:20]))
    with pytest.raises(InvalidConfigError) as caught:
        Encryption.from_env({ENV_KEYS: raw})
    assert ENV_KEYS in str(caught.value)
    assert not _leaks(str(caught.value), K1), str(caught.value)
    assert not _leaks(repr(caught.value), K1)


@pytest.mark.parametrize(
    "keys",
    [
        lambda: {K1: "k1"},  # swapped key and id
        lambda: {_b64(K1): K1},  # the key's text as its id
        lambda: {"k1": _b64(K1)},  # a key as base64 text
        lambda: {"k1": K1.hex()},  # a key as hex text
        lambda: {"k1": K1[:31]},  # short
        lambda: {"k1=" + _b64(K1): K1},  # a key id with '='
    ],
)
def test_a_wrong_key_argument_is_a_clear_error_without_the_key(keys: Any) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        Encryption(keys())
    assert not _leaks(str(caught.value), K1), str(caught.value)
