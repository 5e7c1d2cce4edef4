"""What an interrupt asks a reviewer, and how a decision answers it.

Pending approvals are not stored anywhere of their own: they are read from the thread
index's ``interrupts`` (kept by the savers in the same write as the checkpoint), so a
reviewer's queue can never drift from what the threads are really waiting for. This
module turns one interrupt value into the actions it asks about, and one decision into
the ``resume`` value the interrupting code expects. Three shapes are understood:

* LangChain 1.x ``HumanInTheLoopMiddleware``, batched: ``{"action_requests": [...],
  "review_configs": [...]}``, resumed with ``{"decisions": [decision, ...]}``;
* the same middleware per call: ``{"type": "tool_approval", "name", "args", ...}``,
  resumed with one decision;
* Agent Inbox's ``HumanInterrupt`` (``[{"action_request": {"action", "args"}, "config":
  {"allow_accept", ...}}]``), resumed with a list of ``HumanResponse``;

anything else is shown raw and resumed with whatever the reviewer passes as ``args``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..errors import InvalidConfigError, MemoryPlusError

Status = Literal["pending", "approved", "rejected", "edited", "expired"]
STATUSES: tuple[Status, ...] = ("pending", "approved", "rejected", "edited", "expired")
Decision = Literal["approve", "reject", "edit", "respond"]
DECISIONS: tuple[Decision, ...] = ("approve", "reject", "edit", "respond")
Kind = Literal["hitl", "tool_approval", "agent_inbox", "raw"]

STATUS_OF: dict[str, Status] = {
    "approve": "approved",
    "reject": "rejected",
    "edit": "edited",
    "respond": "rejected",  # the tool did not run: the reviewer answered in its place
    "expire": "expired",
}


class ApprovalError(MemoryPlusError):
    """Base class of the approval errors."""


class ApprovalNotFoundError(ApprovalError, KeyError):
    """No pending interrupt and no decision record has this id."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "approval not found"


class ApprovalConflictError(ApprovalError):
    """Someone else decided this approval first (the message says who and what)."""


class ApprovalExpiredError(ApprovalError):
    """The approval window passed; the request is cancelled, nothing was resumed."""


class DecisionNotAllowedError(ApprovalError, InvalidConfigError):
    """The request's review config does not allow this decision (or its arguments)."""


@dataclass(frozen=True)
class Action:
    """One action a request asks about: a tool name, its arguments, what may be decided."""

    name: str
    args: dict[str, Any]
    description: str = ""
    allowed_decisions: tuple[Decision, ...] | None = None
    """``None``: the request does not say (raw values); anything is passed on."""


@dataclass(frozen=True)
class DecisionRecord:
    """Who decided what and when: kept in the store, with no TTL, after the thread is gone."""

    approval_id: str
    thread_id: str
    user_id: Any
    decision: str
    """``approve``, ``reject``, ``edit``, ``respond``, or ``expire`` (by the sweep)."""
    by: str
    decided_at: datetime
    args: Any = None
    message: str | None = None
    actions: tuple[dict[str, Any], ...] = ()
    resumed_at: datetime | None = None
    """When the thread was resumed with it; ``None`` until then (a crash in between
    leaves it ``None``, and :meth:`Approvals.recover` finishes the job)."""

    @property
    def status(self) -> Status:
        return STATUS_OF[self.decision]

    def as_value(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "thread_id": self.thread_id,
            "user_id": self.user_id,
            "decision": self.decision,
            "by": self.by,
            "decided_at": self.decided_at.isoformat(),
            "args": self.args,
            "message": self.message,
            "actions": [dict(a) for a in self.actions],
            "resumed_at": None if self.resumed_at is None else self.resumed_at.isoformat(),
            "status": self.status,
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> DecisionRecord:
        resumed = value.get("resumed_at")
        return cls(
            approval_id=value["approval_id"],
            thread_id=value["thread_id"],
            user_id=value.get("user_id"),
            decision=value["decision"],
            by=value["by"],
            decided_at=datetime.fromisoformat(value["decided_at"]),
            args=value.get("args"),
            message=value.get("message"),
            actions=tuple(dict(a) for a in value.get("actions") or ()),
            resumed_at=None if resumed is None else datetime.fromisoformat(resumed),
        )


@dataclass(frozen=True)
class Approval:
    """One interrupt waiting for (or answered by) a reviewer."""

    id: str
    """The interrupt's id: what ``Command(resume={id: ...})`` addresses."""
    thread_id: str
    user_id: Any
    task_id: str
    created_at: datetime
    expires_at: datetime
    status: Status
    kind: Kind
    actions: tuple[Action, ...]
    value: Any = field(repr=False)
    """The raw interrupt value."""
    decision: DecisionRecord | None = None

    @property
    def action(self) -> str | None:
        """The (first) requested action's name."""
        return self.actions[0].name if self.actions else None

    @property
    def args(self) -> dict[str, Any]:
        """The (first) requested action's arguments."""
        return dict(self.actions[0].args) if self.actions else {}

    @property
    def allowed_decisions(self) -> tuple[Decision, ...] | None:
        """Decisions every action allows (``None``: the request does not say)."""
        known = [a.allowed_decisions for a in self.actions if a.allowed_decisions is not None]
        if not known:
            return None
        return tuple(d for d in DECISIONS if all(d in k for k in known))


# -- parsing requests ---------------------------------------------------------------


def _decisions(values: Any) -> tuple[Decision, ...] | None:
    if not isinstance(values, (list, tuple)):
        return None
    return tuple(d for d in DECISIONS if d in values)


def _schema_decisions(schema: Any) -> tuple[Decision, ...] | None:
    """Decision types a per-call interrupt's ``response_schema`` admits, when readable."""
    if isinstance(schema, type):
        try:
            from pydantic import TypeAdapter

            schema = TypeAdapter(schema).json_schema()
        except Exception:  # a schema we cannot read says nothing: allow everything
            return None
    if not isinstance(schema, Mapping):
        return None
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, Mapping):
            props = node.get("properties")
            if isinstance(props, Mapping) and isinstance(props.get("type"), Mapping):
                const = props["type"].get("const")
                if isinstance(const, str):
                    found.add(const)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return tuple(d for d in DECISIONS if d in found) or None


_INBOX_FLAGS = (
    ("allow_accept", "approve"),
    ("allow_edit", "edit"),
    ("allow_ignore", "reject"),
    ("allow_respond", "respond"),
)


def _inbox(value: Any) -> list[Mapping[str, Any]] | None:
    items = [value] if isinstance(value, Mapping) else value
    if not isinstance(items, list) or not items:
        return None
    if all(isinstance(i, Mapping) and isinstance(i.get("action_request"), Mapping) for i in items):
        return items
    return None


def parse_request(value: Any, response_schema: Any = None) -> tuple[Kind, tuple[Action, ...]]:
    """The kind of request an interrupt value is, and the actions it asks about."""
    if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
        configs = {
            c.get("action_name"): _decisions(c.get("allowed_decisions"))
            for c in value.get("review_configs") or []
            if isinstance(c, Mapping)
        }
        actions = tuple(
            Action(
                str(r.get("name")),
                dict(r.get("args") or {}),
                str(r.get("description") or ""),
                configs.get(r.get("name")),
            )
            for r in value["action_requests"]
            if isinstance(r, Mapping)
        )
        return "hitl", actions
    if isinstance(value, Mapping) and value.get("type") == "tool_approval":
        action = Action(
            str(value.get("name")),
            dict(value.get("args") or {}),
            str(value.get("description") or ""),
            _schema_decisions(response_schema),
        )
        return "tool_approval", (action,)
    if (items := _inbox(value)) is not None:
        inbox: list[Action] = []
        for item in items:
            request, config = item["action_request"], item.get("config") or {}
            allowed = tuple(d for flag, d in _INBOX_FLAGS if config.get(flag))
            inbox.append(
                Action(
                    str(request.get("action")),
                    dict(request.get("args") or {}),
                    str(item.get("description") or ""),
                    allowed,  # type: ignore[arg-type]
                )
            )
        return "agent_inbox", tuple(inbox)
    return "raw", ()


# -- answering them -----------------------------------------------------------------


def check_decision(approval: Approval, decision: Any, args: Any) -> None:
    """Refuse what the request does not allow, before anything is recorded."""
    if decision not in DECISIONS:
        raise DecisionNotAllowedError(f"unknown decision {decision!r}; use one of {DECISIONS}")
    allowed = approval.allowed_decisions
    if allowed is not None and decision not in allowed:
        raise DecisionNotAllowedError(
            f"approval {approval.id!r} ({approval.action}) allows {list(allowed)}, not {decision!r}"
        )
    if decision == "edit":
        if approval.kind != "raw" and len(approval.actions) != 1:
            raise DecisionNotAllowedError(
                f"approval {approval.id!r} asks about {len(approval.actions)} actions; "
                "an edit applies to one"
            )
        if approval.kind != "raw" and not isinstance(args, Mapping):
            raise DecisionNotAllowedError(
                f"an edit needs the new arguments as a dict (args=...), got {args!r}"
            )
    elif args is not None and approval.kind != "raw":
        raise DecisionNotAllowedError(f"args only go with an edit, not with {decision!r}")


def _hitl_decision(decision: str, action: Action, args: Any, message: str | None) -> Any:
    if decision == "approve":
        return {"type": "approve"}
    if decision == "edit":
        return {"type": "edit", "edited_action": {"name": action.name, "args": dict(args)}}
    if decision == "respond":
        return {"type": "respond", "message": message or ""}
    out: dict[str, Any] = {"type": "reject"}
    if message:
        out["message"] = message
    return out


def _inbox_response(decision: str, action: Action, args: Any, message: str | None) -> Any:
    if decision == "approve":
        return {"type": "accept", "args": None}
    if decision == "edit":
        return {"type": "edit", "args": {"action": action.name, "args": dict(args)}}
    if decision == "respond":
        return {"type": "response", "args": message or ""}
    return {"type": "ignore", "args": None}


def resume_value(approval: Approval, record: DecisionRecord) -> Any:
    """What the interrupting code gets back from ``interrupt()`` for this decision."""
    decision, args, message = record.decision, record.args, record.message
    if approval.kind == "hitl":
        return {"decisions": [_hitl_decision(decision, a, args, message) for a in approval.actions]}
    if approval.kind == "tool_approval":
        return _hitl_decision(decision, approval.actions[0], args, message)
    if approval.kind == "agent_inbox":
        return [_inbox_response(decision, a, args, message) for a in approval.actions]
    if args is not None:
        return args
    return {"decision": decision, "message": message}


def action_dicts(actions: Sequence[Action]) -> tuple[dict[str, Any], ...]:
    return tuple({"name": a.name, "args": dict(a.args)} for a in actions)
