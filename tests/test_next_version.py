"""Channel versions the savers mint: ``<7 base-36 digits>.<6 base-36 digits>``, sorting as
text in counter order (blobs are keyed by version; LangGraph compares them)."""

from __future__ import annotations

import random
import re

import pytest

from langgraph_memory_plus.checkpoint.saver import CheckpointSaverBase, _base36

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _reference(n: int, width: int) -> str:
    """Base 36 one digit a division, as the package wrote it before issue 39."""
    digits = []
    while n:
        n, r = divmod(n, 36)
        digits.append(_DIGITS[r])
    return "".join(reversed(digits)).rjust(width, "0")


@pytest.mark.parametrize("width", [6, 7])
def test_base36_matches_one_digit_at_a_time(width: int) -> None:
    edges = [0, 1, 35, 36, 1295, 1296, 36**3, 36**6 - 1, 36**6, 36**7 - 1, 36**7, 36**8 + 5]
    rng = random.Random(39)
    for n in edges + [rng.getrandbits(rng.randint(1, 48)) for _ in range(20_000)]:
        assert _base36(n, width) == _reference(n, width), n


def test_next_versions_sort_in_counter_order() -> None:
    next_version = CheckpointSaverBase.get_next_version
    current: str | None = None
    seen = []
    for _ in range(1300):  # crosses 36 and 36**2
        current = next_version(None, current, None)  # type: ignore[arg-type]
        assert re.fullmatch(r"[0-9a-z]{7}\.[0-9a-z]{6}", current)
        seen.append(current)
    assert seen == sorted(seen)
    assert [int(v.split(".")[0], 36) for v in seen] == list(range(1, 1301))
    # a decimal counter of 10+ digits (older versions, LangGraph's format) is read as decimal
    assert next_version(None, "0000000099.5", None).split(".")[0] == _base36(100, 7)  # type: ignore[arg-type]
    assert next_version(None, 41, None).split(".")[0] == _base36(42, 7)  # type: ignore[arg-type]
