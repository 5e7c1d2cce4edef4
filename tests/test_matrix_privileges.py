"""What a managed service must allow, as docs/servers.md ("Tested servers and managed
services") states it, run as written.

- PostgreSQL (the wheel's 18, which has pgvector): a DBA runs ``setup()`` (and ``CREATE
  EXTENSION vector``) once and grants the tables; the application's role, which may create
  nothing, then works with ``setup=false``, semantic search included.
- Redis (the Valkey node, which has ACLs like Redis 6+ and managed services): a user with
  only the ACL the page gives runs every saver and store operation.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import redis
from conftest import as_url
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from psycopg import sql

from langgraph_memory_plus.url import from_url

pytestmark = [pytest.mark.storage, pytest.mark.matrix]


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(t.count(c)) for c in "abc"] for t in texts]


INDEX: Any = {"dims": 3, "embed": embed, "fields": ["text"]}

# What docs/servers.md tells a DBA to grant the application role (after setup()).
GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {app};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {app};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {app};
"""


def chat() -> Any:
    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}

    return StateGraph(MessagesState).add_node(model).add_edge(START, "model")


async def test_an_app_role_without_create_works_after_a_dba_ran_setup(pg18_url: str) -> None:
    schema, app = f"lgmp_app_{uuid.uuid4().hex[:8]}", f"lgmp_app_{uuid.uuid4().hex[:8]}"
    names = {"schema": sql.Identifier(schema), "app": sql.Identifier(app)}
    with psycopg.connect(pg18_url, autocommit=True) as dba:
        dba.execute(sql.SQL("CREATE ROLE {app} LOGIN").format(**names))
        dba.execute("CREATE EXTENSION IF NOT EXISTS vector")
    try:
        # The DBA, once per release: the migrations.
        async with from_url(as_url(pg18_url, schema=schema), index=INDEX):
            pass
        with psycopg.connect(pg18_url, autocommit=True) as dba:
            for grant in filter(str.strip, GRANTS.split(";")):
                dba.execute(sql.SQL(grant.strip()).format(**names))
        app_conninfo = psycopg.conninfo.make_conninfo(pg18_url, user=app)

        # On a current schema the application role's setup() runs nothing (it reads the
        # recorded versions); with a migration to run it cannot, and says so...
        async with from_url(as_url(app_conninfo, schema=schema), index=INDEX):
            pass
        with psycopg.connect(pg18_url, autocommit=True) as dba:
            dba.execute(
                sql.SQL(
                    "DELETE FROM {schema}.lgmp_checkpoint_migrations WHERE v = "
                    "(SELECT max(v) FROM {schema}.lgmp_checkpoint_migrations)"
                ).format(**names)
            )
        with pytest.raises(Exception, match=r"must be owner|permission denied"):
            async with from_url(as_url(app_conninfo, schema=schema), index=INDEX):
                pass
        async with from_url(as_url(pg18_url, schema=schema), index=INDEX):  # the DBA again
            pass
        # ...and needs not: with setup=false it does everything else.
        url = as_url(app_conninfo, schema=schema, setup="false", vector_backend="pgvector")
        async with from_url(url, index=INDEX) as memory:
            graph = chat().compile(checkpointer=memory.checkpointer, store=memory.store)
            config = {"configurable": {"thread_id": "t1"}}
            out = await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, config)
            assert [m.content for m in out["messages"]] == ["hi", "echo: hi"]
            assert len([c async for c in memory.checkpointer.alist(config)]) == 3
            await memory.store.aput(("u",), "a", {"text": "aaa"})
            await memory.store.aput(("u",), "b", {"text": "bbc"})
            found = await memory.store.asearch(("u",), query="bb")
            assert [i.key for i in found] == ["b", "a"]
            await memory.checkpointer.adelete_thread("t1")
            assert await memory.checkpointer.aget_tuple(config) is None
    finally:
        with psycopg.connect(pg18_url, autocommit=True) as dba:
            dba.execute(sql.SQL("DROP SCHEMA IF EXISTS {schema} CASCADE").format(**names))
            dba.execute(sql.SQL("DROP OWNED BY {app}").format(**names))
            dba.execute(sql.SQL("DROP ROLE {app}").format(**names))


# docs/servers.md's ACL for the application user, on its own keys.
REDIS_ACL = ["+@read", "+@write", "+@scripting", "+ping", "+scan", "+time"]


async def test_a_redis_user_with_the_readme_acl_runs_everything(valkey_url: str) -> None:
    user, password = f"lgmp_app_{uuid.uuid4().hex[:8]}", "p/?#@:%w"
    prefix = user
    with redis.Redis.from_url(valkey_url) as admin:
        admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{password}", f"~{prefix}:*", "resetchannels",
            *REDIS_ACL,
        )  # fmt: skip
    try:
        host = valkey_url.split("://", 1)[1]
        url = f"redis://{user}:{quote(password, safe='')}@{host}/0?key_prefix={prefix}"
        async with from_url(url, index=INDEX) as memory:
            graph = chat().compile(checkpointer=memory.checkpointer, store=memory.store)
            config = {"configurable": {"thread_id": "t1"}}
            out = await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, config)
            assert [m.content for m in out["messages"]] == ["hi", "echo: hi"]
            await memory.store.aput(("u",), "a", {"text": "aaa"})
            assert [i.key for i in await memory.store.asearch(("u",), query="a")] == ["a"]
            assert len([c async for c in memory.checkpointer.alist(None)]) == 3  # SCAN
            await memory.checkpointer.acopy_thread("t1", "t2")
            await memory.checkpointer.aprune(["t2"])
            await memory.checkpointer.adelete_for_runs(["no-such-run"])
            await memory.checkpointer.adelete_thread("t1")
            assert await memory.checkpointer.aget_tuple(config) is None
    finally:
        with redis.Redis.from_url(valkey_url) as admin:
            admin.execute_command("ACL", "DELUSER", user)
