"""Checkpointers (short-term memory, per thread): one core, a driver per backend."""

from .config import TTLConfig

__all__ = ["TTLConfig"]
