"""Namespace and key checks, and namespace match conditions, shared by every store backend.

``BaseStore``'s convenience methods check labels before they build an op, but ops handed
to ``batch`` directly skip those checks. A backend that keys rows by delimited text must
not let the label ``"a.b"`` address the namespace ``("a", "b")``, so every op is checked
here again, raising LangGraph's own ``InvalidNamespaceError`` with LangGraph's messages.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
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


# -- user ids in namespaces ----------------------------------------------------------------
#
# Every writer of user data and ``erase_user`` put a user id into a namespace label the
# same way, through these functions: a label holding ``alice@example.com`` is the one the
# profile, the memory tools, the task drafts and erasure all name.

_LABEL_ESCAPES = (("%", "%25"), (".", "%2E"), ("\x00", "%00"))


def label_value(value: str | int) -> str:
    """``value`` (a user id) made safe as (part of) a namespace label, reversibly.

    LangGraph refuses labels with ``.`` and this package's stores refuse NUL, but user ids
    are e-mail addresses, phone numbers, names in any script. Percent-encoding exactly
    ``%``, ``.`` and NUL keeps every id usable and distinct (``%`` is encoded too, so the
    mapping is one-to-one; :func:`label_value_of` reverses it); every other character,
    ``/``, ``@``, ``+`` and Chinese included, stays as it is.
    """
    text = str(value)
    for raw, escaped in _LABEL_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def label_value_of(label: str) -> str:
    """The value :func:`label_value` encoded into ``label``."""
    out, i = [], 0
    while i < len(label):
        code = label[i : i + 3]
        raw = next((r for r, escaped in _LABEL_ESCAPES if escaped == code), None)
        if raw is not None:
            out.append(raw)
            i += 3
        else:
            out.append(label[i])
            i += 1
    return "".join(out)


def fill_namespace(template: Sequence[str], values: Mapping[str, str | int]) -> tuple[str, ...]:
    """``template``'s labels with each ``{name}`` replaced by ``values[name]`` as
    :func:`label_value` encodes it (``{{``/``}}`` are literal braces, as in ``format``)."""
    encoded = {name: label_value(value) for name, value in values.items()}
    return tuple(label.format_map(encoded) for label in template)


def template_fields(template: Sequence[str]) -> frozenset[str]:
    """The placeholder names of a namespace template's labels."""
    return frozenset(
        name for label in template for _, name, _, _ in string.Formatter().parse(label) if name
    )


def user_namespace(template: Sequence[str], user_id: str) -> tuple[str, ...]:
    """The namespace a template names for one user: ``("users", "{user_id}")`` and
    ``"alice@example.com"`` give ``("users", "alice@example%2Ecom")``."""
    return fill_namespace(template, {"user_id": user_id})


@dataclass(frozen=True)
class UserData:
    """Where a component of this package keeps user data in the store."""

    writer: str
    """The public API that writes there (``create_memory_tools``, ``TaskDrafts``...)."""
    template: tuple[str, ...]
    """A namespace template holding ``{user_id}`` (and no other placeholder)."""


_DECLARED: dict[tuple[str, tuple[str, ...]], UserData] = {}


def declare_user_data(writer: str, template: Sequence[str]) -> tuple[str, ...]:
    """Declare that ``writer`` keeps user data under ``template``; returns the template.

    The package's own writers are declared at the end of this module (their defaults are
    these constants), so ``erase_user``'s default (:func:`declared_user_data`) is, by
    construction, the union of what the package writes; an application's own writer may
    declare its namespace too. A template must name ``{user_id}`` and nothing else: erasure
    knows only the user id.
    """
    labels = tuple(template)
    if template_fields(labels) != {"user_id"}:
        raise InvalidConfigError(
            f"{writer}: a user data namespace names {{user_id}} and no other value, got {labels!r}"
        )
    _DECLARED[(writer, labels)] = UserData(writer, labels)
    return labels


def declared_user_data() -> tuple[UserData, ...]:
    """Every declaration made so far, in declaration order."""
    return tuple(_DECLARED.values())


def user_of_namespace(namespace: Sequence[str]) -> str | None:
    """The user id of a namespace under a declared user data template (the longest that
    matches), else ``None``: whose per-tenant key seals an item there."""
    best: tuple[int, str] | None = None
    for data in _DECLARED.values():
        template = data.template
        if len(namespace) < len(template):
            continue
        user = None
        for label, want in zip(namespace, template, strict=False):
            if want == "{user_id}":
                user = label_value_of(label)
            elif label != want:
                break
        else:
            if user is not None and (best is None or len(template) > best[0]):
                best = (len(template), user)
    return None if best is None else best[1]


# The package's own writers of user data. They are declared here, in the layer below every
# writer and below erasure, so that erase_user's default needs no import of the writers;
# each writer takes its default namespace from these constants.
MEMORIES = declare_user_data("create_memory_tools", ("memories", "{user_id}"))
PROFILE = declare_user_data("PreferenceLearner", ("users", "{user_id}"))
DRAFTS = declare_user_data("TaskDrafts", ("users", "{user_id}", "pending_tasks"))
