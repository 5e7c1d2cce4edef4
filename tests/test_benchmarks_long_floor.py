"""A smoke run of ``benchmarks/long_floor.py``: the four floors are savers of the chat
conversation (so their times are those of a turn that keeps it), the fresh one's reads
share no object, and one run reports every saver's figures over each official saver's.
Nothing here depends on speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import long_floor, workloads  # noqa: E402
from benchmarks.shape_floor import SharedLeavesSaver  # noqa: E402

pytestmark = pytest.mark.storage


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


@pytest.mark.parametrize(
    "kind",
    [
        "no storage",
        "fresh objects",
        "fresh objects, C build",
        "fresh objects, C build, checked puts",
        "fresh containers, shared leaves, checked puts",
    ],
)
def test_the_floors_keep_the_conversation_and_only_fresh_reads_share_nothing(
    kind: str,
) -> None:
    saver = {
        long_floor.NO_STORAGE: long_floor.NoStorageSaver,
        long_floor.FRESH: long_floor.FreshObjectsSaver,
        long_floor.FRESH_C: long_floor.TemplateSaver,
        long_floor.FRESH_CHECKED: long_floor.CheckedTemplateSaver,
        long_floor.SHARED_LEAVES: SharedLeavesSaver,
    }[kind]()
    fresh = kind != long_floor.NO_STORAGE
    graph = workloads.chat_graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "floor"}}
    for turn in (1, 2, 3):
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    first = graph.get_state(config).values["messages"]
    second = graph.get_state(config).values["messages"]
    workloads._check_conversation(dict(graph.get_state(config).values), 3, "floor")
    assert [m.id for m in first] == [m.id for m in second]
    shared = [
        a is b or a.response_metadata is b.response_metadata
        for a, b in zip(first, second, strict=True)
    ]
    assert not any(shared) if fresh else all(a is b for a, b in zip(first, second, strict=True))
    if fresh:
        first[0].content = "edited"
        assert graph.get_state(config).values["messages"][0].content != "edited"
    # Nested containers too (the Python floor shares them).
    if kind not in (long_floor.NO_STORAGE, long_floor.FRESH):
        usage = [m.response_metadata.get("token_usage") for m in first]
        again = [m.response_metadata.get("token_usage") for m in second]
        assert any(usage)
        assert not any(u is not None and u is v for u, v in zip(usage, again, strict=True))


def _edit_first_in_node(saver: object) -> list[str]:
    """The text of the first message after a node reassigned it in place (returning only
    a new message), read back: what LangGraph's savers store is the list at the put."""

    def model(state: State) -> dict[str, Any]:
        state["messages"][0].content = "edited in place"
        return {"messages": [AIMessage("reply", id=f"a{len(state['messages'])}")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=saver)  # type: ignore[arg-type]
    config: RunnableConfig = {"configurable": {"thread_id": "edit"}}
    graph.invoke({"messages": [workloads.user_message(1)]}, config)
    graph.invoke({"messages": [workloads.user_message(2)]}, config)
    return [str(m.content) for m in graph.get_state(config).values["messages"]]


def test_only_the_checked_floor_stores_a_field_reassigned_in_place() -> None:
    """What makes the checked floor a floor of correct savers: InMemorySaver keeps the
    edit, the checked floor too, the unchecked C-build floor loses it."""
    from langgraph.checkpoint.memory import InMemorySaver

    expected = _edit_first_in_node(InMemorySaver())
    assert expected[0] == "edited in place"
    assert _edit_first_in_node(long_floor.CheckedTemplateSaver()) == expected
    assert _edit_first_in_node(SharedLeavesSaver()) == expected
    assert _edit_first_in_node(long_floor.TemplateSaver())[0] != "edited in place"


def test_one_run_reports_every_saver_against_each_official(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "floor.json"
    result = long_floor.main(
        [
            "--pg", pg_url, "--redis", redis_url, "--turns", "6",
            "--savers", "ours_sqlite,off_sqlite", "--json", str(out),
        ]
    )  # fmt: skip
    written = json.loads(out.read_text())
    assert (
        written["savers"].keys()
        == result["savers"].keys()
        == {
            long_floor.NO_STORAGE,
            long_floor.FRESH,
            long_floor.FRESH_C,
            long_floor.FRESH_CHECKED,
            long_floor.SHARED_LEAVES,
            "ours_sqlite",
            "off_sqlite",
        }
    )
    for name, ratios in written["ratios"].items():
        r = ratios["/ off_sqlite"]
        assert r["turn p50"] > 0 and r["turn cpu p50"] > 0, name
    assert written["ratios"]["off_sqlite"]["/ off_sqlite"]["turn p50"] == 1.0
    with pytest.raises(SystemExit):
        long_floor.main(["--pg", pg_url, "--redis", redis_url, "--savers", "nope"])
    with pytest.raises(SystemExit, match="unknown floors"):
        long_floor.main(["--pg", pg_url, "--redis", redis_url, "--floors", "no storage;nope"])


def _containers(value: Any, out: dict[int, Any]) -> None:
    """Every mutable container reachable from ``value`` (models' state included)."""
    if isinstance(value, (dict, list, set)):
        out[id(value)] = value
        for inner in value.values() if isinstance(value, dict) else value:
            _containers(inner, out)
    elif hasattr(value, "__pydantic_fields_set__"):
        out[id(value)] = value
        for part in (
            vars(value),
            value.__pydantic_fields_set__,
            value.__pydantic_extra__,
            value.__pydantic_private__,
        ):
            _containers(part, out)


def test_the_shared_leaves_floor_shares_no_container_at_any_depth() -> None:
    """Two reads, and what the floor keeps, hold no mutable container in common; only
    immutable leaves (strings, numbers) are shared."""
    saver = SharedLeavesSaver()
    graph = workloads.chat_graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "deep"}}
    for turn in (1, 2, 3):
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    reads: list[dict[int, Any]] = []
    for _ in range(2):
        found: dict[int, Any] = {}
        _containers(graph.get_state(config).values["messages"], found)
        reads.append(found)
    kept: dict[int, Any] = {}
    for entry in saver._last.values():
        templates = entry[1]
        _containers([t.data for t in templates], kept)
    assert len(reads[0]) > 6 * 10
    assert not reads[0].keys() & reads[1].keys()
    assert not (reads[0].keys() | reads[1].keys()) & kept.keys()


def test_the_paired_runner_reports_each_saver_over_the_first() -> None:
    """``benchmarks.long_floor_paired``: every saver's turn, turn by turn in one process,
    over the first's (the first over itself is 1)."""
    from benchmarks import long_floor_paired

    names = [long_floor.FRESH_C, long_floor.FRESH_CHECKED, long_floor.SHARED_LEAVES]
    out = long_floor_paired.main(["--turns", "4", "--savers", ";".join(names)])
    assert list(out) == names
    wall, cpu, ratio_wall, ratio_cpu, paired_wall, paired_cpu = out[names[0]]
    assert wall > 0 and cpu > 0
    assert ratio_wall == ratio_cpu == paired_wall == paired_cpu == 1.0
    assert all(v > 0 for row in out.values() for v in row)


def test_the_paired_runner_takes_ours_from_source_trees() -> None:
    """``tree:PATH:BACKEND`` runs ours from a source tree beside the others (the
    before/after of a change on a long thread); a malformed one is refused by name."""
    from benchmarks import long_floor_paired

    root = str(Path(__file__).resolve().parents[1])
    names = [f"tree:{root}:sqlite", long_floor.FRESH_C]
    out = long_floor_paired.main(["--turns", "3", "--savers", ";".join(names)])
    assert list(out) == names
    assert all(v > 0 for row in out.values() for v in row)
    with pytest.raises(SystemExit, match="tree:PATH"):
        long_floor_paired.main(["--turns", "1", "--savers", f"tree:{root}:mysql"])
