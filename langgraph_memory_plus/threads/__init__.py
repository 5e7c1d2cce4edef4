"""The thread index kept by the savers: search/count/get, sessions (see ``core``)."""

from .core import ThreadQuery, ThreadRecord, ThreadSize, status_of

__all__ = ["ThreadQuery", "ThreadRecord", "ThreadSize", "status_of"]
