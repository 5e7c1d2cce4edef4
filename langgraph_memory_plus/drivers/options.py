"""Checking keyword options against the ``TypedDict`` that declares them.

Constructors and ``from_conn_string`` take their options as ``**options:
Unpack[SomeOptions]``: a type checker and an IDE see every name and type, and at run time
a misspelt name is an :class:`~langgraph_memory_plus.errors.InvalidConfigError` that names
it and the valid ones (Python's own ``TypeError`` would name a private base class), raised
before anything connects.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidConfigError


def option_names(*declarations: type) -> tuple[str, ...]:
    """The keys of ``TypedDict`` classes (their bases' keys included), in order."""
    names: dict[str, None] = {}
    for declaration in declarations:
        names.update(dict.fromkeys(declaration.__annotations__))
    return tuple(names)


def check_options(owner: str, given: Iterable[str], *declarations: type) -> None:
    """``InvalidConfigError`` for the first of ``given`` that no declaration has."""
    valid = option_names(*declarations)
    for name in given:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidConfigError(
                f"{owner} got an unknown option {name!r}{hint}; its options are {', '.join(valid)}"
            )


def split_options(
    given: Mapping[str, Any], declaration: type
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``given`` as (the options ``declaration`` has, the rest)."""
    names = set(option_names(declaration))
    mine = {k: v for k, v in given.items() if k in names}
    return mine, {k: v for k, v in given.items() if k not in names}
