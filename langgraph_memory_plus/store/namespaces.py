"""Namespace and key checks, and namespace match conditions, shared by every store backend.

``BaseStore``'s convenience methods check labels before they build an op, but ops handed
to ``batch`` directly skip those checks. A backend that keys rows by delimited text must
not let the label ``"a.b"`` address the namespace ``("a", "b")``, so every op is checked
here again, raising LangGraph's own ``InvalidNamespaceError`` with LangGraph's messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import InvalidNamespaceError, MatchCondition

from ..errors import InvalidConfigError
from .values import InvalidValueError, escape_text, unescape_text

WILDCARD = "*"


def check_labels(namespace: Any) -> tuple[str, ...]:
    """LangGraph's label rules: strings, non-empty, no ``.``, no NUL."""
    if isinstance(namespace, list):
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(
            f"Namespace must be a tuple of strings, got {type(namespace).__name__}: {namespace!r}"
        )
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"Invalid namespace label '{label}' found in {namespace}. Namespace labels"
                f" must be strings, but got {type(label).__name__}."
            )
        if "." in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label '{label}' found in {namespace}. "
                "Namespace labels cannot contain periods ('.')."
            )
        if "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label '{label}' found in {namespace}. "
                "Namespace labels cannot contain NUL bytes ('\\x00')."
            )
        if not label:
            raise InvalidNamespaceError(
                f"Namespace labels cannot be empty strings. Got {label} in {namespace}"
            )
    return namespace


def check_writable(namespace: Any) -> tuple[str, ...]:
    """The rules for a namespace that will hold an item: labels, non-empty, root not reserved."""
    if isinstance(namespace, (tuple, list)) and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    labels = check_labels(namespace)
    if labels[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {labels}'
        )
    return labels


def check_key(key: Any) -> str:
    """Item keys are strings; ``BaseStore`` converts with ``str()`` but ops may carry anything.

    A non-string key is refused rather than converted, so ``1`` and ``"1"`` never name the
    same item by accident.
    """
    if not isinstance(key, str):
        raise InvalidValueError(f"item keys must be strings, got {type(key).__name__}: {key!r}")
    return key


def check_count(value: Any, what: str) -> int:
    """``limit``, ``offset`` and ``max_depth`` are non-negative integers.

    Negative values are refused rather than read as Python slices: "the last N" is not a
    stable page of a store that others write to.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidConfigError(f"{what} must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True)
class Condition:
    """A validated match condition: ``labels[i] is None`` is the ``*`` wildcard."""

    suffix: bool
    labels: tuple[str | None, ...]

    def matches(self, namespace: tuple[str, ...]) -> bool:
        """The in-memory check, for backends that filter namespaces in Python."""
        n = len(self.labels)
        if len(namespace) < n:
            return False
        part = namespace[len(namespace) - n :] if self.suffix else namespace[:n]
        return all(want is None or want == got for want, got in zip(self.labels, part, strict=True))

    @property
    def literal_head(self) -> tuple[str, ...]:
        """The leading labels of a prefix condition before any wildcard (for index ranges)."""
        head: list[str] = []
        if not self.suffix:
            for label in self.labels:
                if label is None:
                    break
                head.append(label)
        return tuple(head)


def read_conditions(conditions: Sequence[Any] | None) -> tuple[Condition, ...]:
    """Check ``ListNamespacesOp.match_conditions`` and turn them into :class:`Condition`."""
    out: list[Condition] = []
    for condition in conditions or ():
        if not isinstance(condition, MatchCondition):
            try:
                condition = MatchCondition(*condition)
            except TypeError:
                raise InvalidConfigError(
                    f"match conditions must be MatchCondition(match_type, path), got {condition!r}"
                ) from None
        if condition.match_type not in ("prefix", "suffix"):
            raise InvalidConfigError(
                f"Unsupported match type: {condition.match_type!r}; use 'prefix' or 'suffix'"
            )
        path = check_labels(tuple(condition.path))
        out.append(
            Condition(
                suffix=condition.match_type == "suffix",
                labels=tuple(None if label == WILDCARD else label for label in path),
            )
        )
    return tuple(out)


def prefix_text(namespace: tuple[str, ...]) -> str:
    """A namespace as one text column: labels (NUL-escaped) joined by ``.``.

    Labels cannot contain ``.`` (LangGraph's rule), so the join is reversible, and the SQL
    backends index it for prefix searches.
    """
    return ".".join(escape_text(label) for label in namespace)


def namespace_of(prefix: str) -> tuple[str, ...]:
    """The namespace a :func:`prefix_text` column holds."""
    return tuple(unescape_text(label) for label in prefix.split("."))
