"""``batch`` stores under the reserved root ``"langgraph"`` as ``InMemoryStore`` does.

LangGraph's store spec refuses that root only in ``put()`` / ``aput()``; ops handed to
``batch`` directly (upstream's own suites do) must be stored and read back.
"""

from __future__ import annotations

import pytest
from backends import BACKENDS
from backends_support import open_async, open_sync, space_for
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

NS = ("langgraph", "runs")


def answers(store: object) -> list[object]:
    put = [PutOp(NS, "k", {"v": 1}), PutOp(("other",), "k", {"v": 2})]
    store.batch(put)  # type: ignore[attr-defined]
    got = store.batch([GetOp(NS, "k"), SearchOp(("langgraph",))])  # type: ignore[attr-defined]
    return [got[0].value, [(i.namespace, i.key, i.value) for i in got[1]]]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_batch_takes_the_reserved_root(backend: str, request: pytest.FixtureRequest) -> None:
    space = space_for(backend, request)
    with open_sync(space, "store") as store:
        assert answers(store) == answers(InMemoryStore())
        with pytest.raises(InvalidNamespaceError, match='cannot be "langgraph"'):
            store.put(NS, "k2", {"v": 3})
        store.batch([PutOp(NS, "k", None)])
        assert store.get(NS, "k") is None


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_abatch_takes_the_reserved_root(backend: str, request: pytest.FixtureRequest) -> None:
    space = space_for(backend, request)
    async with open_async(space, "store") as store:
        await store.abatch([PutOp(NS, "k", {"v": 1})])
        assert (await store.aget(NS, "k")).value == {"v": 1}
        with pytest.raises(InvalidNamespaceError):
            await store.aput(NS, "k2", {"v": 3})
