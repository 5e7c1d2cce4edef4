"""Pending work that survives restarts: human approvals (read from the thread index) and
task drafts (kept in the store). See ``queue`` and ``drafts``."""

from .core import (
    Action,
    Approval,
    ApprovalConflictError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    DecisionNotAllowedError,
    DecisionRecord,
    parse_request,
)
from .drafts import (
    Draft,
    DraftConflictError,
    DraftError,
    DraftIncompleteError,
    DraftNotFoundError,
    TaskDrafts,
)
from .queue import Approvals, check_ttl

__all__ = [
    "Action",
    "Approval",
    "ApprovalConflictError",
    "ApprovalError",
    "ApprovalExpiredError",
    "ApprovalNotFoundError",
    "Approvals",
    "DecisionNotAllowedError",
    "DecisionRecord",
    "Draft",
    "DraftConflictError",
    "DraftError",
    "DraftIncompleteError",
    "DraftNotFoundError",
    "TaskDrafts",
    "check_ttl",
    "parse_request",
]
