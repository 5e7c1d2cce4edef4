"""Task drafts for agents: tools to fill and submit them, and their profile section.

Adapters over :mod:`langgraph_memory_plus.approvals.drafts` (the policy): the tools find
the store and the user as the memory tools do, and, like them, never raise into the
graph: a missing draft, an unknown field or a draft that still lacks fields comes back
as a tool message with ``status="error"`` that the model can read and act on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from ..approvals.drafts import Draft as _Draft
from ..approvals.drafts import DraftError, TaskDrafts, is_live
from ..errors import InvalidConfigError
from .profile import Source
from .quoting import neutralize
from .scope import current_scope

logger = logging.getLogger(__name__)


class StartDraft(BaseModel):
    kind: str = Field(description="What kind of task, e.g. 'cancellation'.")
    fields: dict[str, Any] = Field(default_factory=dict, description="What is known so far.")


class UpdateDraft(BaseModel):
    draft_id: str = Field(description="The draft's id, as shown under 'Open tasks'.")
    fields: dict[str, Any] = Field(description="Field names and the values the user gave.")


class SubmitDraft(BaseModel):
    draft_id: str = Field(description="The draft's id, once nothing is still needed.")


def _user(config: RunnableConfig) -> str:
    """The run's user by the one rule the saver follows (``Scope.value``)."""
    try:
        user = current_scope(config=config).value("user_id")
    except InvalidConfigError as exc:
        raise ToolException(f"Error: {exc}") from exc
    if not isinstance(user, str) or not user:
        raise ToolException("Error: cannot tell whose drafts these are (no user_id).")
    return user


@contextmanager
def _reported(action: str) -> Iterator[None]:
    try:
        yield
    except ToolException:
        raise
    except (DraftError, InvalidConfigError) as exc:
        raise ToolException(f"Error: {exc}") from exc
    except Exception as exc:
        logger.exception("draft tool %s failed", action)
        raise ToolException(f"Error: {action} failed ({type(exc).__name__}).") from exc


def create_draft_tools(drafts: TaskDrafts) -> list[BaseTool]:
    """``[start_task_draft, update_task_draft, submit_task_draft]`` for the user of the
    run calling them."""

    # a draft's fields are the user's words: echoed back on one line, unable to write
    # markup or close a <memory> block (the profile shows them quoted too)
    def started(draft: _Draft) -> str:
        return f"Started draft {draft.id!r}: {neutralize(draft.summary())}."

    def update(draft: _Draft) -> str:
        return f"Updated draft {draft.id!r}: {neutralize(draft.summary())}."

    def submitted(draft: _Draft) -> str:
        return f"Submitted draft {draft.id!r} ({draft.kind})."

    def tool(
        name: str,
        schema: type[BaseModel],
        description: str,
        sync: Callable[..., Any],
        asyn: Callable[..., Any],
        say: Callable[[_Draft], str],
    ) -> BaseTool:
        def run(config: RunnableConfig, **args: Any) -> str:
            with _reported(name):
                return say(sync(_user(config), *args.values()))

        async def arun(config: RunnableConfig, **args: Any) -> str:
            with _reported(name):
                return say(await asyn(_user(config), *args.values()))

        return StructuredTool.from_function(
            run, arun, name, description, args_schema=schema, handle_tool_error=True
        )

    return [
        tool(
            "start_task_draft",
            StartDraft,
            "Start a draft for a task that needs more information than the user gave.",
            drafts.create,
            drafts.acreate,
            started,
        ),
        tool(
            "update_task_draft",
            UpdateDraft,
            "Add what the user just told you to one of their open task drafts.",
            drafts.update,
            drafts.aupdate,
            update,
        ),
        tool(
            "submit_task_draft",
            SubmitDraft,
            "Submit a task draft once it needs nothing more.",
            drafts.submit,
            drafts.asubmit,
            submitted,
        ),
    ]


def drafts_source(
    drafts: TaskDrafts,
    *,
    title: str = "Open tasks (drafts the user has not finished)",
    clock: Callable[[], datetime] | None = None,
) -> Source:
    """A :class:`~.profile.Source` that shows each open draft on one line, e.g.
    ``- cancellation (draft-1): flight: LH123; still needed: passport number``.
    Expired drafts are left out even before the store removes them."""
    now = clock or drafts.clock

    def entries(items: Any) -> list[tuple[str, Any]]:
        out = []
        moment = now()
        for item in items or []:
            if not is_live(item.value, moment):
                continue
            draft = _Draft.from_value("", item.value)
            out.append((f"{draft.kind} ({draft.id})", draft.summary()))
        return out

    ns = tuple(part for part in drafts.namespace)
    return Source(
        ns, key=None, title=title, limit=20, entries=entries, origin="task drafts the user started"
    )
