"""Task drafts: multi-step work that spans conversations, kept in the store.

A cancellation takes three conversations: the flight on Monday, the passport number on
Tuesday, the refund method on Wednesday. A draft holds what is known so far, knows from
its schema (a pydantic model or a JSON schema) which required fields are still missing,
and is gone after its TTL (72 hours from creation by default): an expired draft is
never returned, even before the store's own expiry removes it. Submitting checks it is
complete (and valid, for a pydantic schema) and removes it from the pending namespace;
cancelling removes it.

Concurrent callers are safe on this package's stores: ``update`` merges its fields into
the draft as stored with a write conditional on the version read (retried on a lost
race), so two updates of different fields both land; ``submit`` and ``cancel`` remove
the draft with a conditional delete, so of two concurrent submits exactly one succeeds
and the other gets :class:`DraftConflictError`. ``create`` with the id of an open draft
overwrites nothing: a retry gets the draft as it stands, another create the conflict.
(Other ``BaseStore`` s have no versions: there the last write wins.)

Each draft is one store item under ``("users", "{user_id}", "pending_tasks")`` (by
default), the user id encoded as the memory nodes encode it (``.`` as ``%2E``, ``%`` as
``%25``, NUL as ``%00``; any other character as is), so the profile injector can show
open drafts beside the profile (:func:`langgraph_memory_plus.nodes.drafts.drafts_source`)
and the agent can fill them with tools
(:func:`langgraph_memory_plus.nodes.drafts.create_draft_tools`).
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp

from ..drivers.plan import Plan, adrive, drive
from ..errors import ConflictError, InvalidConfigError, MemoryPlusError
from ..store.base import ConditionalPutOp, StoreBase
from ..store.namespaces import DRAFTS, user_namespace
from ..threads.core import check_user_id

DEFAULT_NAMESPACE = DRAFTS  # declared in store.namespaces, which erasure reads
DEFAULT_TTL = timedelta(hours=72)
MAX_DRAFTS = 100
"""Open drafts read per user (a user with more has a problem a list will not solve)."""
UPDATE_TRIES = 20
"""Merges tried before an update gives up on a draft others keep changing."""


class DraftError(MemoryPlusError):
    """Base class of the draft errors."""


class DraftNotFoundError(DraftError, KeyError):
    """No open draft with this id for this user (never made, submitted, cancelled or expired)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "draft not found"


class DraftConflictError(DraftError, ConflictError):
    """Another caller submitted, cancelled or kept changing this draft at the same time."""


class DraftIncompleteError(DraftError, ValueError):
    """Submitted while required fields are missing or invalid; ``missing`` names them."""

    def __init__(self, message: str, missing: Sequence[str]) -> None:
        super().__init__(message)
        self.missing = list(missing)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Schema:
    """What a draft kind requires: field names, their labels, and an optional validator."""

    required: tuple[str, ...]
    labels: dict[str, str]
    properties: tuple[str, ...]
    validate: Callable[[dict[str, Any]], Any] | None = None

    @classmethod
    def of(cls, schema: Any) -> Schema:
        """From a pydantic model class or a JSON schema dict."""
        validate = None
        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            validate = getattr(schema, "model_validate")  # noqa: B009
            schema = schema.model_json_schema()
        if not isinstance(schema, Mapping):
            raise InvalidConfigError(
                f"a draft schema must be a pydantic model or a JSON schema dict, got {schema!r}"
            )
        props = schema.get("properties") or {}
        required = tuple(str(r) for r in schema.get("required") or ())
        labels = {name: name.replace("_", " ") for name in props}
        for name in required:
            labels.setdefault(name, name.replace("_", " "))
        return cls(required, labels, tuple(props), validate)

    def missing(self, fields: Mapping[str, Any]) -> list[str]:
        return [r for r in self.required if fields.get(r) in (None, "", [], {})]


@dataclass(frozen=True)
class Draft:
    """One open draft, as stored."""

    id: str
    user_id: str
    kind: str
    fields: dict[str, Any]
    missing: list[str]
    """Required fields not filled yet (field names)."""
    missing_labels: list[str]
    """The same, for people: ``passport number``."""
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    status: str = "open"
    """``open``; ``submitted`` / ``cancelled`` on what those calls return."""

    @property
    def complete(self) -> bool:
        return not self.missing

    def as_value(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "fields": dict(self.fields),
            "missing": list(self.missing),
            "missing_labels": list(self.missing_labels),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "status": self.status,
        }

    @classmethod
    def from_value(cls, user_id: str, value: Mapping[str, Any]) -> Draft:
        return cls(
            id=value["id"],
            user_id=user_id,
            kind=value["kind"],
            fields=dict(value.get("fields") or {}),
            missing=list(value.get("missing") or []),
            missing_labels=list(value.get("missing_labels") or []),
            created_at=datetime.fromisoformat(value["created_at"]),
            updated_at=datetime.fromisoformat(value["updated_at"]),
            expires_at=datetime.fromisoformat(value["expires_at"]),
            status=value.get("status", "open"),
        )

    def summary(self) -> str:
        """One line for the model: what is known, and what is still needed."""
        known = "; ".join(f"{k}: {v}" for k, v in self.fields.items() if v not in (None, ""))
        parts = [known] if known else []
        if self.missing_labels:
            parts.append("still needed: " + ", ".join(self.missing_labels))
        else:
            parts.append("complete, ready to submit")
        return "; ".join(parts)


def is_live(value: Any, now: datetime) -> bool:
    """Whether a stored item is an open draft not past its TTL."""
    if not isinstance(value, Mapping) or value.get("status", "open") != "open":
        return False
    try:
        return datetime.fromisoformat(value["expires_at"]) > now
    except (KeyError, TypeError, ValueError):
        return False


class TaskDrafts:
    """Drafts of multi-step tasks per user, in ``store`` (see the module docs).

    Args:
        store: where drafts live.
        schemas: per draft kind, a pydantic model or JSON schema (its ``required`` fields
            are what a draft waits for). A single schema serves every kind.
        namespace: per-user namespace; ``{user_id}`` is filled in.
        ttl: how long a draft lives after it is created.
    """

    def __init__(
        self,
        store: BaseStore,
        schemas: Mapping[str, Any] | Any,
        *,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        ttl: timedelta = DEFAULT_TTL,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
            raise InvalidConfigError(f"ttl must be a positive timedelta, got {ttl!r}")
        if isinstance(schemas, Mapping) and "properties" not in schemas and "type" not in schemas:
            self._schemas: dict[str, Schema] | Schema = {
                str(k): Schema.of(v) for k, v in schemas.items()
            }
        else:
            self._schemas = Schema.of(schemas)
        self.store = store
        self.namespace = tuple(namespace)
        self.ttl = ttl
        self.clock = clock

    def namespace_for(self, user_id: Any) -> tuple[str, ...]:
        """The user's namespace: any non-empty string works as a user id (e-mail
        addresses, phone numbers, ``/``, any script), encoded one-to-one into the label as
        the memory nodes' namespace templates encode it."""
        if not isinstance(user_id, str) or not user_id:
            raise InvalidConfigError(f"user_id must be a non-empty string, got {user_id!r}")
        check_user_id(user_id)
        return user_namespace(self.namespace, user_id)  # the encoding erasure uses

    def schema(self, kind: str) -> Schema:
        if isinstance(self._schemas, Schema):
            return self._schemas
        try:
            return self._schemas[kind]
        except KeyError:
            raise InvalidConfigError(
                f"unknown draft kind {kind!r}; known kinds: {sorted(self._schemas)}"
            ) from None

    # -- plans (commands are store op lists) ----------------------------------------------

    def _conditional(self, op: PutOp, version: int | None) -> list[Any]:
        """``op`` applied only if the item is still at ``version`` (stores with versions)."""
        if version is None or not isinstance(self.store, StoreBase):
            return [op]
        return [ConditionalPutOp(op, version)]

    def _put(self, draft: Draft, version: int | None = None) -> list[Any]:
        left = (draft.expires_at - self.clock()).total_seconds() / 60.0
        ns = self.namespace_for(draft.user_id)
        op = PutOp(ns, draft.id, draft.as_value(), index=False, ttl=max(left, 1 / 60))
        return self._conditional(op, version)

    def _built(
        self,
        user_id: str,
        kind: str,
        fields: dict[str, Any],
        draft_id: str,
        created: datetime,
        expires: datetime,
    ) -> Draft:
        schema = self.schema(kind)
        unknown = sorted(set(fields) - set(schema.properties)) if schema.properties else []
        if unknown:
            raise InvalidConfigError(f"draft {kind!r} has no field(s) {unknown}")
        missing = schema.missing(fields)
        return Draft(
            draft_id,
            user_id,
            kind,
            fields,
            missing,
            [schema.labels[m] for m in missing],
            created,
            self.clock(),
            expires,
        )

    def _read(self, user_id: str, draft_id: str) -> Plan[list[Any], tuple[Draft | None, int]]:
        """The open draft (``None``: none) and the version it was read at."""
        (item,) = yield [GetOp(self.namespace_for(user_id), str(draft_id), refresh_ttl=False)]
        if item is None or not is_live(item.value, self.clock()):
            return None, 0
        return Draft.from_value(user_id, item.value), int(getattr(item, "version", 0) or 0)

    def _get_plan(self, user_id: str, draft_id: str) -> Plan[list[Any], Draft | None]:
        draft, _ = yield from self._read(user_id, draft_id)
        return draft

    def _open(
        self, user_id: str, draft_id: str, raced: bool = False
    ) -> Plan[list[Any], tuple[Draft, int]]:
        draft, version = yield from self._read(user_id, draft_id)
        if draft is None and raced:
            raise DraftConflictError(
                f"draft {draft_id!r} was submitted or cancelled by another caller meanwhile"
            )
        if draft is None:
            raise DraftNotFoundError(f"no open draft {draft_id!r} for this user")
        return draft, version

    def _create_plan(
        self, user_id: str, kind: str, fields: Mapping[str, Any] | None, draft_id: str | None
    ) -> Plan[list[Any], Draft]:
        now = self.clock()
        chosen = draft_id or f"draft-{uuid.uuid4().hex[:12]}"
        draft = self._built(user_id, kind, dict(fields or {}), chosen, now, now + self.ttl)
        version = 0  # create only: a retried create must not wipe what was added since
        for _ in range(UPDATE_TRIES):
            try:
                yield self._put(draft, version)
            except ConflictError:
                (item,) = yield [GetOp(self.namespace_for(user_id), chosen, refresh_ttl=False)]
                if item is not None and is_live(item.value, self.clock()):
                    found = Draft.from_value(user_id, item.value)
                    if found.kind == kind and all(
                        found.fields.get(k) == v for k, v in draft.fields.items()
                    ):
                        return found  # this create, retried: the draft as it stands now
                    raise DraftConflictError(
                        f"an open draft {chosen!r} exists for this user; update it instead"
                    ) from None
                version = 0 if item is None else int(getattr(item, "version", 0) or 0)
                continue  # an expired one the store still holds: replaced
            return draft
        raise DraftConflictError(f"draft {chosen!r} keeps changing; try again")

    def _update_plan(
        self, user_id: str, draft_id: str, fields: Mapping[str, Any]
    ) -> Plan[list[Any], Draft]:
        if not isinstance(fields, Mapping):
            raise InvalidConfigError(f"fields must be a dict, got {fields!r}")
        for attempt in range(UPDATE_TRIES):
            draft, version = yield from self._open(user_id, draft_id, raced=attempt > 0)
            merged = {**draft.fields, **fields}
            new = self._built(
                user_id, draft.kind, merged, draft.id, draft.created_at, draft.expires_at
            )
            try:  # merged into the draft as read, or read again
                yield self._put(new, version)
            except ConflictError:
                continue
            return new
        raise DraftConflictError(f"draft {draft_id!r} keeps changing; try again")

    def _list_plan(self, user_id: str) -> Plan[list[Any], list[Draft]]:
        ns = self.namespace_for(user_id)
        (items,) = yield [SearchOp(ns, None, MAX_DRAFTS, 0, refresh_ttl=False)]
        now = self.clock()
        found = [Draft.from_value(user_id, i.value) for i in items if is_live(i.value, now)]
        return sorted(found, key=lambda d: (d.created_at, d.id))

    def _remove(self, user_id: str, draft_id: str, check: bool) -> Plan[list[Any], Draft]:
        """Remove the open draft (after checking it, for a submit) with a delete
        conditional on the version checked: of concurrent callers exactly one gets it."""
        for attempt in range(UPDATE_TRIES):
            draft, version = yield from self._open(user_id, draft_id, raced=attempt > 0)
            if check:
                self._check_complete(draft)
            op = PutOp(self.namespace_for(user_id), draft.id, None)
            try:
                yield self._conditional(op, version)
            except ConflictError:
                continue  # changed (checked again) or removed (a conflict) meanwhile
            return draft
        raise DraftConflictError(f"draft {draft_id!r} keeps changing; try again")

    def _check_complete(self, draft: Draft) -> None:
        if draft.missing:
            raise DraftIncompleteError(
                f"draft {draft.id!r} still needs: {', '.join(draft.missing_labels)}", draft.missing
            )
        validate = self.schema(draft.kind).validate
        if validate is not None:
            try:
                validate(draft.fields)
            except ValueError as exc:
                bad = [
                    ".".join(str(p) for p in e.get("loc", ()))
                    for e in getattr(exc, "errors", lambda: [])()
                ]
                raise DraftIncompleteError(
                    f"draft {draft.id!r} has invalid field(s): {', '.join(bad) or exc}", bad
                ) from None

    def _submit_plan(self, user_id: str, draft_id: str) -> Plan[list[Any], Draft]:
        draft = yield from self._remove(user_id, draft_id, check=True)
        return Draft(**{**draft.__dict__, "status": "submitted"})

    def _cancel_plan(self, user_id: str, draft_id: str) -> Plan[list[Any], Draft]:
        draft = yield from self._remove(user_id, draft_id, check=False)
        return Draft(**{**draft.__dict__, "status": "cancelled"})

    # -- synchronous API ------------------------------------------------------------------

    def create(
        self,
        user_id: str,
        kind: str,
        fields: Mapping[str, Any] | None = None,
        *,
        draft_id: str | None = None,
    ) -> Draft:
        """Start a draft of ``kind`` with what is known so far. With the ``draft_id`` of
        an open draft: that draft as it stands if it already holds these fields (a retried
        create wipes nothing added since), else :class:`DraftConflictError`."""
        return drive(self._create_plan(user_id, kind, fields, draft_id), self.store.batch)

    def update(self, user_id: str, draft_id: str, fields: Mapping[str, Any]) -> Draft:
        """Set (or overwrite) fields of an open draft; its TTL is not extended."""
        return drive(self._update_plan(user_id, draft_id, fields), self.store.batch)

    def get(self, user_id: str, draft_id: str) -> Draft | None:
        return drive(self._get_plan(user_id, draft_id), self.store.batch)

    def list(self, user_id: str) -> builtins.list[Draft]:
        """A user's open drafts, oldest first."""
        return drive(self._list_plan(user_id), self.store.batch)

    def submit(self, user_id: str, draft_id: str) -> Draft:
        """The completed draft (status ``submitted``), removed from the pending ones;
        :class:`DraftIncompleteError` while required fields are missing or invalid,
        :class:`DraftConflictError` when a concurrent caller submitted or cancelled it."""
        return drive(self._submit_plan(user_id, draft_id), self.store.batch)

    def cancel(self, user_id: str, draft_id: str) -> Draft:
        """Drop an open draft; returns it with status ``cancelled``."""
        return drive(self._cancel_plan(user_id, draft_id), self.store.batch)

    # -- asynchronous API -----------------------------------------------------------------

    async def acreate(
        self,
        user_id: str,
        kind: str,
        fields: Mapping[str, Any] | None = None,
        *,
        draft_id: str | None = None,
    ) -> Draft:
        return await adrive(self._create_plan(user_id, kind, fields, draft_id), self.store.abatch)

    async def aupdate(self, user_id: str, draft_id: str, fields: Mapping[str, Any]) -> Draft:
        return await adrive(self._update_plan(user_id, draft_id, fields), self.store.abatch)

    async def aget(self, user_id: str, draft_id: str) -> Draft | None:
        return await adrive(self._get_plan(user_id, draft_id), self.store.abatch)

    async def alist(self, user_id: str) -> builtins.list[Draft]:
        return await adrive(self._list_plan(user_id), self.store.abatch)

    async def asubmit(self, user_id: str, draft_id: str) -> Draft:
        return await adrive(self._submit_plan(user_id, draft_id), self.store.abatch)

    async def acancel(self, user_id: str, draft_id: str) -> Draft:
        return await adrive(self._cancel_plan(user_id, draft_id), self.store.abatch)
