"""The ``langgraph-memory`` command against real PostgreSQL, Redis and SQLite.

Each test writes real threads (graphs with interrupts and subgraphs), then runs the
command's ``main()`` with the arguments an operator types (stdin, stdout and stderr are
strings, not terminals) and checks its output, its exit code and the storage after. One
case runs ``python -m langgraph_memory_plus.cli`` (the module behind the console script)
as a program and compares it with the in-process run; the kill test runs it as one too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from backends import machine_program
from conftest import PG_ADMIN_URL, _fresh_database, _redis_server
from graphs import chat_graph, human, team_graph
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command
from test_copy_threads import pg_as_url
from test_first_steps import closed_port as _closed_port
from test_first_steps import password_pg_port  # noqa: F401  (a fixture)

from langgraph_memory_plus import from_url
from langgraph_memory_plus.cli import main
from langgraph_memory_plus.cli.output import EXIT_CODES, USAGE
from langgraph_memory_plus.transfer.migration import verify_threads

pytestmark = pytest.mark.storage

ROOT = Path(__file__).resolve().parent.parent
CLI_BACKENDS = ["postgres", "redis", "sqlite"]


def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI's ``main()`` in this process, with string streams for stdin, stdout and
    stderr (none is a terminal, as in a pipe); ``LANGGRAPH_MEMORY_URL`` unset.

    In-process, because a child process per case spent most of this file's minutes
    importing LangGraph; :func:`test_the_command_runs_as_a_program` and the kill test
    still run it as a program."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("LANGGRAPH_MEMORY_URL", None)
    stdin, sys.stdin = sys.stdin, io.StringIO(input or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: a usage error, or --help / --version
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.stdin = stdin
        if saved is not None:
            os.environ["LANGGRAPH_MEMORY_URL"] = saved
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_the_command_runs_as_a_program() -> None:
    """``python -m langgraph_memory_plus.cli`` (what the console script calls) in a child
    process: its exit codes and streams are the ones the in-process cases check."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LANGGRAPH_MEMORY_URL", None)
    child = [sys.executable, "-m", "langgraph_memory_plus.cli"]
    done = subprocess.run([*child, "--help"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and "usage: langgraph-memory" in done.stdout
    wrong = ["threads", "ls", "-u", "ftp://nowhere/db"]
    refused = subprocess.run([*child, *wrong], capture_output=True, text=True, env=env,
                             timeout=120, cwd=ROOT)  # fmt: skip
    here = run(*wrong)
    assert refused.returncode == here.returncode == USAGE
    assert (refused.stdout, refused.stderr) == (here.stdout, here.stderr)


def ok(*args: str) -> subprocess.CompletedProcess[str]:
    done = run(*args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def as_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json").stdout)


@pytest.fixture(params=CLI_BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of our backend with storage of this test's own (a schema, a prefix, a file)."""
    tag = uuid.uuid4().hex[:10]
    if request.param == "postgres":
        return f"{pg_as_url(request.getfixturevalue('pg_url'))}?schema=cli_{tag}"
    if request.param == "redis":
        prefix = request.getfixturevalue("redis_prefix")
        return f"{request.getfixturevalue('redis_url')}?key_prefix={prefix}-cli-{tag}"
    return f"sqlite:///{tmp_path / 'cli.db'}"


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def populate(saver: Any) -> None:
    """A finished chat and a team thread waiting in a nested subgraph's interrupt."""
    chat = chat_graph().compile(checkpointer=saver)
    for i in range(3):
        chat.invoke({"messages": [human(f"hi {i}", f"c-{i}")]}, cfg("chat"))
    team_graph(nested=True).compile(checkpointer=saver).invoke(
        {"messages": [human("plan", "t-1")]}, cfg("team")
    )


@pytest.fixture
def filled(url: str) -> str:
    with from_url(url) as memory:
        populate(memory.checkpointer)
        memory.store.put(("users", "u1"), "profile", {"name": "Ada"})
    return url


# -- listings --------------------------------------------------------------------------------


def test_info_stats_show(filled: str) -> None:
    info = as_json("info", "-u", filled)
    assert info["backend"] in ("postgres", "redis", "sqlite")
    assert info["threads"] == 2
    assert info["server_version"]
    if info["backend"] != "redis":
        assert info["checkpoints"] == 20 and info["store_items"] == 1
        assert info["schema_version"] == info["package_schema_version"]

    with from_url(filled) as memory:  # a deleted thread is not counted (Redis counted it)
        memory.checkpointer.put(
            {"configurable": {"thread_id": "gone", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
        assert as_json("info", "-u", filled)["threads"] == 3
        memory.checkpointer.delete_thread("gone")
    assert as_json("info", "-u", filled)["threads"] == 2

    with from_url(filled) as memory:  # a deleted id used again is a thread, named as such
        # (Redis: the tombstone in force shares the thread's hash, which then holds no id)
        memory.checkpointer.put(
            {"configurable": {"thread_id": "gone", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
    assert as_json("info", "-u", filled)["threads"] == 3
    again = as_json("stats", "-u", filled, "--top", "5")
    assert {t["thread_id"] for t in again["biggest_threads"]} == {"chat", "team", "gone"}
    with from_url(filled) as memory:
        memory.checkpointer.delete_thread("gone")
    assert as_json("info", "-u", filled)["threads"] == 2

    stats = as_json("stats", "-u", filled, "--top", "5")
    assert {t["thread_id"] for t in stats["biggest_threads"]} == {"chat", "team"}
    # every backend counts each thread's checkpoints (Redis left the column empty)
    assert {t["thread_id"]: t["checkpoints"] for t in stats["biggest_threads"]} == {
        "chat": 12,
        "team": 8,
    }
    [chat_row] = [r for r in ok("stats", "-u", filled).stdout.splitlines() if r.startswith("chat")]
    assert chat_row.split()[1] == "12", chat_row
    sizes = [t["bytes"] for t in stats["biggest_threads"]]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) > 0
    assert sum(k["bytes"] for k in stats["bytes_per_kind"].values()) > 0

    show = as_json("thread", "show", "team", "-u", filled, "--limit", "0")
    with from_url(filled) as memory:
        history = list(memory.checkpointer.list(cfg("team")))
    assert len(show["history"]) == len(history) == 8
    assert {h["checkpoint_ns"].count("|") for h in show["history"]} == {0, 1}  # two levels
    assert show["interrupts"] and "inner" in show["interrupts"][0]["value"]
    assert {c["channel"] for c in show["channels"]} >= {"messages"}
    text = ok("thread", "show", "team", "-u", filled).stdout
    assert "interrupt in task" in text and "history (newest first, first 20)" in text
    missing = run("thread", "show", "nope", "-u", filled)
    assert missing.returncode == 4 and "no thread 'nope'" in missing.stderr


def test_export_import_round_trip(filled: str, tmp_path: Path) -> None:
    dump = tmp_path / "team.jsonl"
    done = ok("thread", "export", "team", "-u", filled, "-o", str(dump))
    assert "exported team: 8 checkpoints" in done.stderr
    lines = dump.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "langgraph-memory-plus/thread"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    ok("setup", "-u", other)
    ok("thread", "import", str(dump), "-u", other)
    with from_url(filled) as a, from_url(other) as b:
        assert verify_threads(a.checkpointer, b.checkpointer, ["team"]) == []
        # and the imported thread resumes exactly as the original
        builder = team_graph(nested=True)
        ga, gb = (
            builder.compile(checkpointer=a.checkpointer),
            builder.compile(checkpointer=b.checkpointer),
        )
        assert ga.invoke(Command(resume="ok"), cfg("team")) == gb.invoke(
            Command(resume="ok"), cfg("team")
        )
    again = run("thread", "import", str(dump), "-u", other)
    assert again.returncode == 1 and "already exists" in again.stderr
    # from stdin, under another id, onto the backend it came from
    done = run("thread", "import", "-", "--thread", "team-copy", "-u", filled,
               input=dump.read_text())  # fmt: skip
    assert done.returncode == 0, done.stderr
    with from_url(filled) as memory:
        graph = team_graph(nested=True).compile(checkpointer=memory.checkpointer)
        copied = graph.get_state(cfg("team-copy"))  # exported before the resume above
        assert copied.values["messages"] and copied.interrupts
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something else"}\n')
    refused = run("thread", "import", str(bad), "-u", other)
    assert refused.returncode == 1 and "not a langgraph-memory-plus/thread" in refused.stderr


def test_destructive_commands_need_yes(filled: str) -> None:
    refused = run("thread", "delete", "chat", "-u", filled)
    assert refused.returncode == 5 and "--yes" in refused.stderr
    refused = run("prune", "--keep-latest", "chat", "-u", filled)
    assert refused.returncode == 5
    with from_url(filled) as memory:
        assert len(list(memory.checkpointer.list(cfg("chat")))) == 12  # nothing touched
    wrong = run("thread", "delete", "chat", "-u", filled, input="no\n")
    assert wrong.returncode == 5
    ok("prune", "--keep-latest", "chat", "-u", filled, "--yes")
    with from_url(filled) as memory:
        assert len(list(memory.checkpointer.list(cfg("chat")))) == 1
    ok("thread", "delete", "chat", "-u", filled, "--yes")
    with from_url(filled) as memory:
        assert memory.checkpointer.get_tuple(cfg("chat")) is None
        assert memory.checkpointer.get_tuple(cfg("team")) is not None
    assert as_json("sweep", "-u", filled) == {"threads_deleted": 0, "items_deleted": 0}


# -- migrate ---------------------------------------------------------------------------------


@pytest.fixture(params=["official-postgres", "official-sqlite"])
def official_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of one of LangGraph's savers, holding the threads of :func:`populate`."""
    if request.param == "official-postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with _fresh_database(PG_ADMIN_URL, "PostgreSQL") as conninfo:
            with PostgresSaver.from_conn_string(conninfo) as saver:
                saver.setup()
                populate(saver)
            yield "langgraph+" + pg_as_url(conninfo)
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver as OfficialSqlite

        path = tmp_path / "official.db"
        with OfficialSqlite.from_conn_string(str(path)) as saver:
            populate(saver)
        yield f"langgraph+sqlite:///{path}"


def test_migrate_from_official_with_verify(official_url: str, url: str) -> None:
    done = run("migrate", "--from", official_url, "--to", url, "--verify", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["differences"] == [] and report["verified"]
    assert (report["threads"], report["checkpoints_copied"]) == (2, 20)
    # plain progress lines (stderr is no terminal): one per thread, with the total
    assert "copied threads: [" in done.stderr and "] 2/2 100%" in done.stderr
    assert "\r" not in done.stderr
    again = as_json("migrate", "--from", official_url, "--to", url)
    assert (again["checkpoints_copied"], again["checkpoints_skipped"]) == (0, 20)
    with from_url(url) as memory:  # the pending interrupt came along
        graph = team_graph(nested=True).compile(checkpointer=memory.checkpointer)
        assert graph.get_state(cfg("team"), subgraphs=True).tasks[0].state.tasks[0].interrupts
        latest = memory.checkpointer.get_tuple(cfg("chat"))
        memory.checkpointer.put_writes(latest.config, [("messages", "tampered")], "task-x")
    found = run("migrate", "--from", official_url, "--to", url, "--verify")
    assert found.returncode == 1 and "pending writes differ" in found.stdout


def test_migrate_between_ours_with_store(filled: str, tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    report = as_json("migrate", "--from", filled, "--to", target, "--verify", "--store")
    assert report["differences"] == [] and report["items_copied"] == 1
    with from_url(target) as memory:
        assert memory.store.get(("users", "u1"), "profile").value == {"name": "Ada"}
        assert {t for t in ("chat", "team") if memory.checkpointer.get_tuple(cfg(t))} == {
            "chat",
            "team",
        }


# -- doctor, schema ---------------------------------------------------------------------------


@pytest.fixture
def lru_redis() -> Iterator[str]:
    """A private redis-server on a free loopback port, with an evicting policy planted."""
    lru = ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    with _redis_server("redis", cluster=False, start_port=7261, extra=lru) as url:
        yield f"{url}/0"


def test_doctor_flags_an_evicting_redis(lru_redis: str) -> None:
    done = run("doctor", "-u", lru_redis)
    assert done.returncode == 1
    assert "PROBLEM" in done.stdout and "allkeys-lru" in done.stdout
    findings = json.loads(run("doctor", "-u", lru_redis, "--json").stdout)
    assert findings[0]["level"] == "problem" and findings[0]["detail"]["policy"] == "allkeys-lru"
    redis_cli = machine_program("redis-cli")
    port = lru_redis.rsplit(":", 1)[1].split("/")[0]
    subprocess.run([redis_cli, "-p", port, "config", "set", "maxmemory-policy", "volatile-lru"],
                   check=True, capture_output=True)  # fmt: skip
    assert run("doctor", "-u", lru_redis).returncode == 0


def test_doctor_and_setup_on_sql(url: str) -> None:
    if url.startswith("redis"):
        assert "noeviction" in ok("doctor", "-u", url).stdout  # the suite's server
        return
    ok("setup", "-u", url)
    assert ok("doctor", "-u", url).stdout.count("[ok]") >= 2
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        import sqlite3

        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM lgmp_checkpoint_migrations")
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f'DELETE FROM "{schema}".lgmp_checkpoint_migrations WHERE v = '
                f'(SELECT max(v) FROM "{schema}".lgmp_checkpoint_migrations)'
            )
    sick = run("doctor", "-u", url)
    assert sick.returncode == 1 and "checkpoint schema" in sick.stdout
    # SQLite's checkpointer has one migration: without it, it is not set up at all
    expected = "not set up" if url.startswith("sqlite") else "older than this package's"
    assert "PROBLEM" in sick.stdout and expected in sick.stdout


def test_setup_sql_prints_and_runs_nothing(pg_url: str) -> None:
    schema = f"cli_dry_{uuid.uuid4().hex[:8]}"
    url = f"{pg_as_url(pg_url)}?schema={schema}"
    done = ok("migrate-schema", "--sql", "-u", url)
    assert f'CREATE TABLE IF NOT EXISTS "{schema}".lgmp_checkpoints' in done.stdout
    assert f'CREATE TABLE IF NOT EXISTS "{schema}".lgmp_store' in done.stdout
    assert "%s" not in done.stdout  # parameters are written in
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found == (0,)
    ok("setup", "-u", url)
    after = ok("migrate-schema", "--sql", "-u", url).stdout
    assert "lgmp_checkpoints (" not in after  # up to date: only the bookkeeping is left


# -- errors, threads ls, the entry point ------------------------------------------------------


def test_exit_codes_for_bad_input(tmp_path: Path) -> None:
    assert run("info", "-u", "nosuch://x").returncode == 2
    unreachable = run("info", "-u", "postgresql://u:s3cr%2Ft@127.0.0.1:1/db")
    assert unreachable.returncode == 3 and "s3cr" not in unreachable.stderr
    assert run("migrate", "--from", "langgraph+sqlite:///nope.db", "--to",
               f"sqlite:///{tmp_path / 'x.db'}").returncode == 2  # fmt: skip
    assert run("bogus").returncode == 2
    assert "exit codes" in ok("--help").stdout


def test_threads_ls(filled: str) -> None:
    done = run("threads", "ls", "-u", filled, "--json")
    assert done.returncode == 0, done.stderr
    listed = {r["thread_id"] for r in json.loads(done.stdout)}
    assert listed == {"chat", "team"}
    waiting = json.loads(
        ok("threads", "ls", "-u", filled, "--status", "interrupted", "--json").stdout
    )
    assert [r["thread_id"] for r in waiting] == ["team"]
    [interrupts] = waiting[0]["interrupts"].values()
    assert interrupts and {"id", "value"} <= set(interrupts[0])


def test_approvals_ls_and_expire(filled: str) -> None:
    """The queue lists the pending interrupt of "team"; expire asks first, and finds
    nothing overdue inside the window."""
    [pending] = as_json("approvals", "ls", "-u", filled)
    assert pending["thread_id"] == "team" and pending["status"] == "pending"
    assert as_json("approvals", "ls", "-u", filled, "--user", "nobody") == []
    refused = run("approvals", "expire", "-u", filled)
    assert refused.returncode == 5 and "--yes" in refused.stderr
    assert as_json("approvals", "expire", "-u", filled, "--yes") == {"expired": 0}
    [still] = as_json("approvals", "ls", "-u", filled)
    assert still["id"] == pending["id"]
    checks = {f["check"]: f for f in json.loads(run("doctor", "-u", filled, "--json").stdout)}
    assert checks["ttl vs approval window"]["level"] == "ok"


def test_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'(?m)^\[project\.scripts\]\nlanggraph-memory = "([^"]+)"', text)
    assert found
    target = found.group(1)
    module, _, name = target.partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), name))
    assert set(EXIT_CODES) == {0, 1, 2, 3, 4, 5, 6}


def test_progress_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal, migrate redraws one counter line; elsewhere it prints plain lines."""
    import pty

    source = f"sqlite:///{tmp_path / 'a.db'}"
    with from_url(source) as memory:
        populate(memory.checkpointer)
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_memory_plus.cli", "migrate", "--from", source,
         "--to", f"sqlite:///{tmp_path / 'b.db'}"],
        stdout=subprocess.PIPE, stderr=secondary, stdin=subprocess.DEVNULL, env=env,
        timeout=120, cwd=ROOT, text=True,
    )  # fmt: skip
    os.close(secondary)
    drawn = b""
    with contextlib.suppress(OSError):  # EIO once everything written was read
        while chunk := os.read(primary, 65536):
            drawn += chunk
    os.close(primary)
    assert done.returncode == 0
    text = drawn.decode()
    assert "\rcopied threads: [" in text and "2/2 100%" in text and "20 checkpoints" in text
    assert "\n" in text.split("\r")[-1]  # the bar's line is ended after the last redraw
    assert "copied 20 checkpoints" in done.stdout
    refused = run("migrate", "--from", f"langgraph+{source}", "--to", source, "--store")
    assert refused.returncode == 6 and "--store" in refused.stderr


# -- a SQLite-only install, start-up cost, URLs with secrets (issues 34 and 35) ----------------

HEAVY = (
    "langgraph",
    "langchain_core",
    "psycopg",
    "psycopg_pool",
    "redis",
    "langgraph_memory_plus.url",
)
NO_DRIVERS = """
import sys
for name in ("psycopg", "psycopg_pool", "redis"):  # as on `pip install langgraph-memory-plus`
    sys.modules[name] = None
from langgraph_memory_plus.cli import main
sys.exit(main(sys.argv[1:]))
"""


def program(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process (``code`` instead of ``-m langgraph_memory_plus.cli``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LANGGRAPH_MEMORY_URL", None)
    head = ["-c", code] if code else ["-m", "langgraph_memory_plus.cli"]
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)  # fmt: skip


def test_help_imports_nothing_heavy() -> None:
    """``--help`` (and a usage error) load argparse and the CLI's own modules: no
    LangGraph, LangChain or driver. Its time is printed (run with -s), never asserted."""
    probe = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "from langgraph_memory_plus.cli import main\n"
        "for argv in (['--help'], ['thread', 'show']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "took = time.perf_counter() - start\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}\n"
        f"    or m in {HEAVY!r})\n"
        "print('HEAVY', heavy, 'TOOK', took, file=sys.stderr)\n"
    )
    done = program(code=probe)
    found = re.search(r"HEAVY (\[.*\]) TOOK (\S+)", done.stderr)
    assert found, done.stderr
    assert found.group(1) == "[]", found.group(1)
    print(f"--help and a usage error, in-process after start-up: {float(found.group(2)):.3f} s")


def test_a_sqlite_only_install_runs_and_names_the_extra(tmp_path: Path) -> None:
    """With psycopg and redis unimportable (the README's default install), the commands
    work on SQLite, and a PostgreSQL or Redis URL is one line naming the extra (6)."""
    url = f"sqlite:///{tmp_path / 'only.db'}"
    with from_url(url) as memory:
        populate(memory.checkpointer)
    assert "usage: langgraph-memory" in program("--help", code=NO_DRIVERS).stdout
    for args in (["info"], ["threads", "ls"], ["stats"], ["setup"], ["doctor"]):
        done = program(*args, "-u", url, code=NO_DRIVERS)
        assert done.returncode == 0, (args, done.stderr)
    listed = program("threads", "ls", "-u", url, "--json", code=NO_DRIVERS)
    assert {r["thread_id"] for r in json.loads(listed.stdout)} == {"chat", "team"}
    for url, extra in [("postgresql://u:s3cr3t@127.0.0.1/db", "postgres"),
                       ("langgraph+postgresql://u:s3cr3t@127.0.0.1/db", "postgres"),
                       ("redis://:s3cr3t@127.0.0.1:6379/0", "redis")]:  # fmt: skip
        done = program("info" if "+" not in url else "migrate", *(
            ["-u", url] if "+" not in url else ["--from", url, "--to", f"sqlite:///{tmp_path}/x.db"]
        ), code=NO_DRIVERS)  # fmt: skip
        assert done.returncode == 6, done.stderr
        assert f"pip install 'langgraph-memory-plus[{extra}]'" in done.stderr
        assert done.stderr.count("\n") == 1 and "s3cr3t" not in done.stderr


SECRET = "p/?#@:%w"  # the characters a URL's password is most often mangled by
QUOTED = quote(SECRET, safe="")


@pytest.mark.parametrize("kind", ["ours", "langgraph"])
def test_urls_with_secrets_are_checked_alike(kind: str, tmp_path: Path) -> None:
    """Every URL the CLI takes (``-u``, ``--from``, ``--to``; ours or LangGraph's) gets the
    same checks: unencoded ``/?#@%`` in a password, a bad port, an unknown parameter are
    usage errors (2), a closed port is 3; the password never shows."""
    prefix = "langgraph+" if kind == "langgraph" else ""
    target = f"sqlite:///{tmp_path / 't.db'}"
    cases = [
        (f"{prefix}postgresql://app:{SECRET}@127.0.0.1:5432/postgres", USAGE),
        (f"{prefix}postgresql://app:{QUOTED}@127.0.0.1:99999/postgres", USAGE),
        (f"{prefix}postgresql://app:{QUOTED}@127.0.0.1:5432/postgres?bogus=1", USAGE),
        (f"{prefix}postgresql://app:{QUOTED}@127.0.0.1:{_closed_port()}/postgres", 3),
    ]
    for url, code in cases:
        for args in (["migrate", "--from", url, "--to", target],
                     ["migrate", "--from", target, "--to", url]):  # fmt: skip
            if kind == "langgraph" and args[2] == target:
                continue  # LangGraph's savers are sources only
            done = run(*args)
            assert done.returncode == code, (url, done.stderr)
            assert done.stderr.count("\n") == 1, done.stderr
            shown = done.stdout + done.stderr
            assert SECRET not in shown and QUOTED not in shown and "%w" not in shown, shown


def test_a_refused_login_is_3(password_pg_port: int, tmp_path: Path) -> None:  # noqa: F811
    """A wrong password, in ``-u`` or in ``migrate --from`` (ours or LangGraph's): exit 3,
    the server's reason, no password."""
    target = f"sqlite:///{tmp_path / 't.db'}"
    url = f"postgresql://app:{QUOTED}@127.0.0.1:{password_pg_port}/postgres"
    for args in (["info", "-u", url], ["migrate", "--from", url, "--to", target],
                 ["migrate", "--from", f"langgraph+{url}", "--to", target]):  # fmt: skip
        done = run(*args)
        assert done.returncode == 3, done.stderr
        assert "password authentication failed" in done.stderr
        assert SECRET not in done.stderr and QUOTED not in done.stderr


# -- rough edges (issue 35) -------------------------------------------------------------------


def test_bad_metadata_json_is_a_usage_error(filled: str) -> None:
    for bad in ("{bad", "[1, 2]", '"text"'):
        done = run("threads", "ls", "-u", filled, "--metadata", bad)
        assert done.returncode == USAGE, done.stderr
        assert done.stderr.count("\n") == 1 and "--metadata" in done.stderr
    found = as_json("threads", "ls", "-u", filled, "--metadata", '{"nope": 1}')
    assert found == []


def test_migrate_an_unknown_thread_fails_and_copies_nothing(filled: str, tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    done = run("migrate", "--from", filled, "--to", target, "--thread", "chat", "--thread", "nope")
    assert done.returncode == 4 and "no thread 'nope'" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    with from_url(target) as memory:
        assert memory.checkpointer.get_tuple(cfg("chat")) is None  # nothing was copied
    report = as_json("migrate", "--from", filled, "--to", target, "--thread", "chat")
    assert (report["threads"], report["checkpoints_copied"]) == (1, 12)


def test_doctor_exits_1_on_a_warning(tmp_path: Path) -> None:
    """A checkpoint TTL of 1 h is shorter than 1.5x the 24 h approval window: a warning,
    and a warning is a finding (exit 1), as a problem is."""
    url = f"sqlite:///{tmp_path / 'ttl.db'}?ttl=60"
    ok("setup", "-u", url)
    done = run("doctor", "-u", url)
    assert done.returncode == 1, done.stdout
    assert "[WARNING] ttl vs approval window" in done.stdout and "PROBLEM" not in done.stdout
    assert run("doctor", "-u", f"sqlite:///{tmp_path / 'ttl.db'}").returncode == 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_with_total_and_eta() -> None:
    from langgraph_memory_plus.cli.output import Progress

    live = _Terminal()
    bar = Progress("copied threads", stream=live)
    bar.update(0, "starting", total=4)
    bar.start -= 2.0  # as if the first thread took two seconds
    bar.update(1, "now t1", total=4)
    bar.drawn_at = 0.0  # redraw at once (redraws are 0.1 s apart)
    bar.update(1, "now t1", total=4)
    bar.close()
    text = live.getvalue()
    assert "\rcopied threads: [######" in text and "1/4 25%" in text
    assert re.search(r"1/4 25%, 0\.\d/s, ETA [5-7]s, now t1", text) and text.endswith("\n")
    plain = io.StringIO()
    bar = Progress("copied threads", stream=plain, every=2)
    for done in range(1, 6):
        bar.update(done, "", total=5)
    bar.close()
    lines = plain.getvalue().splitlines()
    assert [line.split("] ")[1].split(",")[0] for line in lines] == [
        "2/5 40%",
        "4/5 80%",
        "5/5 100%",
    ]
    assert "\r" not in plain.getvalue()


def test_items_ls_lists_items_not_updated_for_n_days(url: str) -> None:
    with from_url(url) as memory:
        memory.store.put(("memories", "u1"), "old", {"content": "张三"})
        memory.store.put(("memories", "u2"), "old", {"content": "x"})
        time.sleep(2.5)  # the store stamps writes itself: age the first ones
        memory.store.put(("memories", "u1"), "new", {"content": "李四"})
        memory.store.put(("other",), "new", {"content": "y"})
    stale = str(1.5 / 86400)  # older than 1.5 s: the first two only
    listed = as_json("items", "ls", "-u", url, "--stale-days", stale)
    assert [(r["namespace"], r["key"]) for r in listed] == [
        (["memories", "u1"], "old"),
        (["memories", "u2"], "old"),
    ]
    assert listed[0]["value"] == {"content": "张三"} and listed[0]["days_since_update"] >= 0
    under = as_json("items", "ls", "-u", url, "--stale-days", stale, "--namespace", "memories/u1")
    assert [r["key"] for r in under] == ["old"]
    everything = as_json("items", "ls", "-u", url, "--namespace", "memories")
    assert [(r["namespace"][1], r["key"]) for r in everything] == [
        ("u1", "old"),
        ("u2", "old"),
        ("u1", "new"),
    ]
    page = ok("items", "ls", "-u", url, "--limit", "1", "--offset", "1")
    assert "memories/u2" in page.stdout and "4 items in all" in page.stderr
    assert run("items", "ls", "-u", url, "--stale-days", "-1").returncode == USAGE


def test_items_ls_with_a_staleness_beyond_the_calendar_lists_nothing(url: str) -> None:
    """h36-attack: --stale-days 1e9, 800000 or inf crashed with an OverflowError (the
    cutoff fell before year 1) instead of listing nothing."""
    with from_url(url) as memory:
        memory.store.put(("memories", "u1"), "k", {"content": "张三"})
    for days in ("1e9", "800000", "inf"):
        assert as_json("items", "ls", "-u", url, "--stale-days", days) == [], days
    assert run("items", "ls", "-u", url, "--stale-days", "nan").returncode == USAGE


@pytest.mark.parametrize(
    "url",
    [
        "langgraph+sqlite://admin:s3cr%2Ft-Zq9@db.example/x.db",
        "langgraph+sqlite://admin:s3cr/t-Zq9@db.example/x.db",
        "langgraph+sqlite:///x.db?password=s3cr%2Ft-Zq9",
    ],
)
@pytest.mark.parametrize("option", ["-u", "--from", "--to"])
def test_cli_never_prints_a_password_from_a_langgraph_sqlite_url(
    url: str, option: str, tmp_path: Path
) -> None:
    """A ``langgraph+sqlite://`` URL with a password (a host where a file belongs, or a
    ``password=`` option) exits with 2 and masks it; the SQLite path's checks echoed the
    URL whole (found by an attack on the CLI)."""
    other = f"sqlite:///{tmp_path}/unused.db"
    if option == "-u":
        result = run("info", "-u", url)
    else:
        ends = {"--from": url, "--to": other} if option == "--from" else {"--from": other}
        result = run("migrate", *(a for k, v in {**ends, option: url}.items() for a in (k, v)))
    assert result.returncode == 2, result
    assert "Zq9" not in result.stdout + result.stderr, result.stderr
