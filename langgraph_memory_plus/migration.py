"""``copy_threads`` and friends: the public path of :mod:`langgraph_memory_plus.transfer.migration`.

The implementation lives in the ``transfer`` layer; this root module keeps the documented
import (``from langgraph_memory_plus.migration import copy_threads, copy_store``) working.
"""

from .transfer.migration import (
    CopyProgress,
    CopyReport,
    acopy_store,
    acopy_threads,
    alist_thread_ids,
    averify_threads,
    copy_store,
    copy_threads,
    list_thread_ids,
    verify_threads,
)

__all__ = [
    "CopyProgress",
    "CopyReport",
    "acopy_store",
    "acopy_threads",
    "alist_thread_ids",
    "averify_threads",
    "copy_store",
    "copy_threads",
    "list_thread_ids",
    "verify_threads",
]
