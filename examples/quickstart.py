"""Two turns of a chat, a "restart", and a third turn that still sees the history.

Run it against the local PostgreSQL (or set LANGGRAPH_MEMORY_URL):

    python examples/quickstart.py

The "model" is a deterministic function, so the example needs no API key.
"""

from __future__ import annotations

import os
import uuid
from typing import Annotated

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from langgraph_memory_plus import PostgresSaver

URL = os.environ.get("LANGGRAPH_MEMORY_URL", "postgresql://postgres@127.0.0.1:5432/test")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def fake_model(state: State) -> dict[str, list[AnyMessage]]:
    """Answers with what it remembers: the user's earlier messages in this thread."""
    said = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    reply = f"You have told me {len(said)} thing(s) so far: {' / '.join(map(str, said))}"
    return {"messages": [AIMessage(reply)]}


def build_graph(saver: PostgresSaver) -> CompiledStateGraph[State, None, State, State]:
    builder = StateGraph(State)
    builder.add_node("model", fake_model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=saver)


def main() -> None:
    config: RunnableConfig = {"configurable": {"thread_id": f"quickstart-{uuid.uuid4().hex[:8]}"}}

    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        graph = build_graph(saver)
        for text in ("Hi, I'm Ada.", "I prefer window seats."):
            result = graph.invoke({"messages": [HumanMessage(text)]}, config)
            print(f"user: {text}\nbot:  {result['messages'][-1].content}")

    print("\n-- process restart: a new saver on the same database --\n")

    with PostgresSaver.from_conn_string(URL) as saver:
        graph = build_graph(saver)
        result = graph.invoke({"messages": [HumanMessage("What do you remember?")]}, config)
        print(f"user: What do you remember?\nbot:  {result['messages'][-1].content}")
        assert len(result["messages"]) == 6, "the history did not survive the restart"
        saver.delete_thread(config["configurable"]["thread_id"])
    print("\nhistory survived the restart (6 messages); thread deleted again")


if __name__ == "__main__":
    main()
