"""Field tokens: the short strings of an item's value, by path, for an equality index.

A filtered search over many namespaces would otherwise read every item under its prefix
to evaluate the filter. A store that keeps an index of *tokens* (path, string) can read
only the items holding a token the filter requires, then decide each with
:func:`.filters.holds` as before. So the index only has to be *sound*: every item that
matches the filter holds the token. That is why both halves are written here, side by
side:

- :func:`value_tokens`: the (path, text) of every string of at most :data:`MAX_TOKEN`
  characters reached through dicts only, along keys made of ASCII letters and digits
  starting with a letter. ``path`` is the keys joined by ``.`` (unambiguous for such
  keys). Lists are not entered: filters match lists element-wise, never by path.
- :func:`filter_tokens`: the tokens every item matching a filter holds: its string
  equalities (``{"kind": "fact"}``, ``{"meta": {"src": "doc"}}``, ``{"$eq": "x"}``, the
  strings of an ``$eq`` dict operand) along such paths.

The key rule is the one SQLite's ``json_tree`` leaves unquoted in ``fullkey`` in every
version, so the SQLite migration can build the same tokens in SQL for existing rows.
Strings are compared as stored (escaped where the store escapes them, see
:mod:`.values`), since escaping is one-to-one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .filters import AllOf, Cond, Equals, Fields

MAX_TOKEN = 64
"""Longer strings are not indexed: they are rarely filtered on and would bloat it."""

_SIMPLE = re.compile(r"[A-Za-z][A-Za-z0-9]*", re.ASCII)

Token = tuple[str, str]


def simple_key(key: str) -> bool:
    """Whether ``key`` may be part of a token's path."""
    return _SIMPLE.fullmatch(key) is not None


def value_tokens(stored: Any) -> set[Token]:
    """The tokens of a stored (decoded, still escaped) value."""
    out: set[Token] = set()

    def walk(obj: dict[str, Any], path: str) -> None:
        for key, item in obj.items():
            if not simple_key(key):
                continue
            at = f"{path}.{key}" if path else key
            if isinstance(item, str):
                if len(item) <= MAX_TOKEN:
                    out.add((at, item))
            elif isinstance(item, dict):
                walk(item, at)

    if isinstance(stored, dict):
        walk(stored, "")
    return out


def filter_tokens(cond: Fields | None, escape: Callable[[str], str]) -> list[Token]:
    """Tokens every item matching ``cond`` holds, in filter order; ``escape`` maps an
    operand string to its stored form."""
    out: list[Token] = []

    def operand(value: Any, path: str) -> None:
        if isinstance(value, str):
            text = escape(value)
            if len(text) <= MAX_TOKEN:
                out.append((path, text))
        elif isinstance(value, dict):
            for key, item in value.items():
                if simple_key(key):
                    operand(item, f"{path}.{key}")

    def visit(c: Cond, path: str) -> None:
        if isinstance(c, Equals):
            operand(c.operand, path)
        elif isinstance(c, AllOf):
            for sub in c.conds:
                visit(sub, path)
        elif isinstance(c, Fields):
            for key, sub in c.fields:
                if simple_key(key):
                    visit(sub, f"{path}.{key}" if path else key)

    if cond is not None:
        visit(cond, "")
    return out
