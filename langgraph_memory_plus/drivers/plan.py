"""Plans: storage operations written once, driven by thin sync and async drivers.

A plan is a generator that yields *commands* (a SQL statement, a Redis call) and receives
each command's result back through ``send``; its return value is the operation's result.
The plan holds all the logic (what to ask, how to decode the answer, what to ask next);
a driver only knows how to run one command, synchronously or with ``await``. This is the
split psycopg 3 uses between its generators and its connection classes, and it is what
lets one implementation serve ``get_tuple`` and ``aget_tuple`` alike.

A command that fails is thrown into the plan at its ``yield``: a plan that does not catch
it fails with it, as if it had run the command itself; one that must clean up (undo the
shards a batch already wrote) can catch it, yield more commands, and re-raise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

C = TypeVar("C")
R = TypeVar("R")

Plan = Generator[C, Any, R]
"""A generator yielding commands of type ``C`` and returning ``R``."""


class Restart(Exception):
    """Raised by a plan to undo what it did (the driver rolls its transaction back, as
    for any exception) so that its caller runs another plan instead: a put whose
    parent went, put again whole. Not an error: listeners are not told of it."""


def before_first_command(first: Plan[C, object], plan: Plan[C, R]) -> Plan[C, R]:
    """``plan`` with ``first`` run just before its first command: after ``plan`` checked
    its arguments (a bad config stays the error it is), in the same run and transaction.
    A plan that sends no command needs no ``first``."""
    try:
        command = next(plan)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    yield from first
    while True:
        try:
            try:
                result = yield command
            except Exception as exc:
                command = plan.throw(exc)
            else:
                command = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def drive(plan: Plan[C, R], execute: Callable[[C], Any]) -> R:
    """Run ``plan`` to completion, executing each command synchronously."""
    try:
        command = next(plan)
        while True:
            try:
                result = execute(command)
            except Exception as exc:
                command = plan.throw(exc)
            else:
                command = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(plan: Plan[C, R], execute: Callable[[C], Awaitable[Any]]) -> R:
    """Run ``plan`` to completion, awaiting each command."""
    try:
        command = next(plan)
        while True:
            try:
                result = await execute(command)
            except Exception as exc:
                command = plan.throw(exc)
            else:
                command = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
