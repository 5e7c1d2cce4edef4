"""A chat that remembers across processes, with no server to install.

    pip install -e . && python examples/quickstart.py

1. This process chats two turns on thread 1 with a small fake model (deterministic, no API
   key). The model hears "I prefer window seats" and keeps that fact for the user in the
   store (long-term memory, shared by all of the user's threads).
2. It then starts a *new process* (this script again). That process finds thread 1's
   history where the first one left it (the checkpointer), and on a brand-new thread 2 the
   model already knows the user's seat preference (the store).
3. The second process deletes what the demo stored, so the next run starts fresh.

``--once`` stops after step 1; run the script again to play the second process yourself.

Where it is stored: ``from_url()`` with no URL reads ``LANGGRAPH_MEMORY_URL``, and without
it uses a SQLite file in your data directory (``~/.local/share/langgraph-memory-plus/
memory.db``). The same script runs on a server when you point the variable at one:

    LANGGRAPH_MEMORY_URL=postgresql://postgres@127.0.0.1:5432/test python examples/quickstart.py
    LANGGRAPH_MEMORY_URL=redis://127.0.0.1:6379/0 python examples/quickstart.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from langgraph_memory_plus import Memory, from_url

USER = "ada"
THREAD_1 = {"configurable": {"thread_id": "quickstart-thread-1"}}
THREAD_2 = {"configurable": {"thread_id": "quickstart-thread-2"}}
FACTS = ("quickstart", USER, "facts")  # the store namespace of this user's facts


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@dataclass
class Context:
    user_id: str


def fake_model(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Answers from what the checkpointer and the store give it; stores preferences."""
    assert runtime.store is not None
    facts = ("quickstart", runtime.context.user_id, "facts")
    said = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    last = str(said[-1])
    if "prefer" in last:
        preference = last.split("prefer", 1)[1].strip(" .!")
        runtime.store.put(facts, "seat", {"fact": f"prefers {preference}"})
        reply = f"Noted: you prefer {preference}. I'll remember that in every conversation."
    elif last.endswith("?"):
        known = [item.value["fact"] for item in runtime.store.search(facts)]
        reply = (
            f"This conversation has {len(said)} message(s) from you. What I know about "
            f"you: {'; '.join(known) or 'nothing yet'}."
        )
    else:
        reply = f"Hello! That was message {len(said)} of this conversation."
    return {"messages": [AIMessage(reply)]}


def build(memory: Memory) -> Any:
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("model", fake_model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=memory.checkpointer, store=memory.store)


def say(graph: Any, config: Any, text: str) -> str:
    result = graph.invoke({"messages": [HumanMessage(text)]}, config, context=Context(USER))
    answer = str(result["messages"][-1].content)
    print(f"  user: {text}\n  bot:  {answer}")
    return answer


def first_process(graph: Any) -> None:
    print("Thread 1, two turns:")
    say(graph, THREAD_1, "Hi, I'm Ada.")
    say(graph, THREAD_1, "I prefer window seats.")


def second_process(graph: Any, history: list[AnyMessage]) -> bool:
    print(f"Thread 1 survived the restart: {len(history)} messages.")
    for message in history:
        print(f"  {message.type:>5}: {message.content}")
    print("\nThread 2, a new conversation; the store remembers the user:")
    answer = say(graph, THREAD_2, "What do you know about me?")
    return len(history) == 4 and "prefers window seats" in answer


def forget(memory: Memory) -> None:
    """Delete what the demo stored: both threads, and the user's fact."""
    for config in (THREAD_1, THREAD_2):
        memory.checkpointer.delete_thread(config["configurable"]["thread_id"])
    memory.store.delete(FACTS, "seat")


def main() -> None:
    with from_url() as memory:  # LANGGRAPH_MEMORY_URL, else a SQLite file: no server needed
        graph = build(memory)
        history = graph.get_state(THREAD_1).values.get("messages", [])
        second = len(history) == 4 or "--second-process" in sys.argv
        print(f"[{'second' if second else 'first'} process, pid {os.getpid()}] {memory.url}\n")
        if second and not history:
            sys.exit(
                f"FAILED: thread 1 is empty in this new process; {memory.url} does not keep "
                "data between processes (memory:// doesn't; use a file or a server)"
            )
        if second:
            try:
                ok = second_process(graph, history)
            finally:
                forget(memory)  # whatever happened, the next run starts fresh
            if not ok:
                sys.exit("FAILED: thread 2 does not know the fact stored in thread 1")
            print("\nAll good. The demo's threads and fact are deleted again.")
            return
        if history:
            print("(An earlier run stopped half-way; starting over.)\n")
            forget(memory)
        first_process(graph)
    if "--once" in sys.argv:
        print("\nRun the script again: a new process will pick up where this one stopped.")
        return
    print("\nStarting a new process, with nothing in memory but what was stored...\n")
    sys.exit(subprocess.run([sys.executable, __file__, "--second-process"]).returncode)


if __name__ == "__main__":
    main()
