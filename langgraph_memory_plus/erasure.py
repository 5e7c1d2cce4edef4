"""``erase_user``: the public path of :mod:`langgraph_memory_plus.privacy.erasure`.

The implementation lives in the ``privacy`` layer; this root module keeps the documented
import (``from langgraph_memory_plus.erasure import erase_user``) working.
"""

from .privacy.erasure import (
    ErasureProgress,
    ErasureReport,
    aerase_user,
    alift_erasure,
    anonymized,
    erase_user,
    lift_erasure,
)

__all__ = [
    "ErasureProgress",
    "ErasureReport",
    "aerase_user",
    "alift_erasure",
    "anonymized",
    "erase_user",
    "lift_erasure",
]
