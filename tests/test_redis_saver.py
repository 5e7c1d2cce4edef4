"""Behaviour, bad-input and fault tests for ``RedisSaver`` / ``AsyncRedisSaver``.

What the real-graph tests (``test_graphs.py``) and the conformance suite do not show: how the
savers use Redis. Clients and URLs, key prefixes, hash tags on Redis Cluster, TTL on every key,
retention and deletion down to the hash fields, which commands the hot paths send, and faults.

Most tests are written once against :class:`Ops`, which drives the sync class through its sync
methods and the async class through its ``a*`` twins (the ``flavour`` parameter), and run on the
machine's single-node Redis and on the session's three-master cluster (the ``where`` parameter),
each test under a key prefix of its own. Tests that need a server to themselves (to restart it,
to read its ``INFO commandstats``, to give it users, a password or TLS) start a private
``redis-server`` on a free loopback port in a temporary directory and shut it down by port.

The tests look at the keys behind the saver's back using the layout documented in
:mod:`langgraph_memory_plus.checkpoint.redis.plans`: every key of a thread is
``{prefix}:{<tag>}:<kind>``, the ``thread`` hash holds the thread id (field ``id``) or, after a
deletion, the tombstone fields ``live_after`` and ``until`` (its expiry). Nothing else of the
implementation is assumed (not how the tag is derived, nor the format of the per-checkpoint
records).

No assertion depends on how fast anything runs: TTL tests compare remaining lifetimes (a refresh
makes a key live longer than it would have) and wait for expiry with bounded polls.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.exceptions
from backends import machine_program
from graphs import delta_graph, human
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, Checkpoint, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.graph import END, START, StateGraph
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

# One async interface over the sync and the async saver, shared with the PostgreSQL tests.
from test_postgres_saver import (
    EDGE_FILTERS,
    Ops,
    compare_with_reference,
    filter_edge_case,
    reference,
    run_workload,
)

from langgraph_memory_plus import AsyncRedisSaver, PostgresSaver, RedisSaver
from langgraph_memory_plus.checkpoint.redis.plans import KINDS, RedisCheckpointPlans
from langgraph_memory_plus.drivers.redis import _AsyncWire, _plain, async_client_from_url
from langgraph_memory_plus.errors import (
    InvalidConfigError,
    MemoryConnectionError,
    ValueTooLargeError,
)
from langgraph_memory_plus.threads.redis import TIX_ADD_SHA

pytestmark = pytest.mark.storage

WAIT_SECONDS = 10.0  # upper bound of every poll; a healthy run never gets near it
# What put() and put_writes() of plain values create; the package may add kinds (its
# ``KINDS``) for other data, e.g. the list channels of a conversation.
CORE_KINDS = {"thread", "idx", "ck", "meta", "blobs", "writes", "widx"}
TOMBSTONE_SECONDS = 24 * 3600  # the documented lifetime of a deletion tombstone
TOMBSTONE_FIELDS = {b"live_after", b"until"}  # the deletion's bound and the expiry it keeps


def tombstone_fields(fields: Any) -> set[bytes]:
    """A tombstone's fields, its refused checkpoint ids (``r<id>``) counted as one."""
    return {b"r" if f.startswith(b"r") else f for f in fields} - {b"r"}


AnyClient = redis.Redis | RedisCluster


# --------------------------------------------------------------------------------------------
# Adapter: one async interface over the sync and the async saver
# --------------------------------------------------------------------------------------------


@asynccontextmanager
async def open_ops(flavour: str, url: str, **options: Any) -> AsyncIterator[Ops]:
    """A saver of ``flavour`` from ``from_conn_string(url)``, set up."""
    if flavour == "sync":
        with RedisSaver.from_conn_string(url, **options) as saver:
            ops = Ops(saver, is_async=False)
            await ops.setup()
            yield ops
    else:
        async with AsyncRedisSaver.from_conn_string(url, **options) as asaver:
            ops = Ops(asaver, is_async=True)
            await ops.setup()
            yield ops


# --------------------------------------------------------------------------------------------
# Looking at the keys behind the saver's back
# --------------------------------------------------------------------------------------------

EXPIRY_SCRIPT = """
local now = redis.call('TIME')
local out = {now[1] * 1000 + math.floor(now[2] / 1000)}
for i, key in ipairs(KEYS) do out[i + 1] = redis.call('PEXPIRETIME', key) end
return out
"""
EXISTS_SCRIPT = """
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('EXISTS', key) end
return out
"""


def glob_literal(text: str) -> str:
    out = []
    for ch in text:
        out.append("\\" + ch if ch in "*?[]\\" else ch)
    return "".join(out)


def admin_client(url: str) -> AnyClient:
    """A plain sync client for ``url`` (``redis+cluster://`` gives a ``RedisCluster``)."""
    scheme, _, rest = url.partition("://")
    if scheme.endswith("+cluster"):
        return RedisCluster.from_url(f"{scheme.removesuffix('+cluster')}://{rest}")
    return redis.Redis.from_url(url)


def split_key(prefix: str, key: bytes) -> tuple[str, str]:
    """``(tag, kind)`` of a key in the documented ``{prefix}:{<tag>}:<kind>`` layout."""
    head = (prefix + ":{").encode()
    assert key.startswith(head), key
    tag, sep, kind = key[len(head) :].partition(b"}:")
    assert sep, key
    return tag.decode(), kind.decode()


@dataclass
class Space:
    """A Redis (single node or cluster) and a key prefix nobody else uses."""

    where: str
    url: str
    prefix: str
    admin: AnyClient
    known_tags: dict[str, str] = field(default_factory=dict)

    def open(self, flavour: str, **options: Any) -> Any:
        options.setdefault("key_prefix", self.prefix)
        return open_ops(flavour, self.url, **options)

    def scan_keys(self, prefix: str | None = None) -> set[bytes]:
        prefix = self.prefix if prefix is None else prefix
        found = set(self.admin.scan_iter(match=f"{glob_literal(prefix)}:*", count=1000))
        # the thread index's sorted sets (``{prefix}:{{prefix}:tix}:...``) are no thread's keys
        return {k for k in found if not k.startswith(f"{prefix}:{{{prefix}:tix}}:".encode())}

    def tags(self) -> dict[str, set[str]]:
        """Every tag under the prefix, with the kinds of key present for it."""
        found: dict[str, set[str]] = {}
        for key in self.scan_keys():
            tag, kind = split_key(self.prefix, key)
            found.setdefault(tag, set()).add(kind)
        return found

    def key(self, tag: str, kind: str) -> bytes:
        return f"{self.prefix}:{{{tag}}}:{kind}".encode()

    def tag_of(self, thread_id: str) -> str:
        """The tag of a live thread (remembered, so it can be checked after deletion)."""
        if thread_id not in self.known_tags:
            wanted = thread_id.encode("utf-8", "surrogatepass")
            for tag in self.tags():
                if self.admin.hget(self.key(tag, "thread"), "id") == wanted:
                    self.known_tags[thread_id] = tag
                    break
            else:
                raise AssertionError(f"no thread hash holds the id {thread_id[:40]!r}")
        return self.known_tags[thread_id]

    def all_keys(self, tag: str) -> list[bytes]:
        return [self.key(tag, kind) for kind in sorted(KINDS)]

    def present(self, tag: str) -> set[str]:
        """The kinds of key of ``tag`` that exist, read in one atomic script."""
        keys = self.all_keys(tag)
        flags = self.admin.eval(EXISTS_SCRIPT, len(keys), *keys)
        return {kind for kind, flag in zip(sorted(KINDS), flags, strict=True) if flag}

    def expiry(self, tag: str) -> tuple[int, dict[str, int]]:
        """The server's time (ms) and when each existing key of ``tag`` expires (Unix ms, -1:
        never), read in one script.

        ``PEXPIRETIME`` (Redis 7) is exact: keys given one TTL in one script show one value,
        where ``PTTL`` read a moment apart could differ by a millisecond.
        """
        keys = self.all_keys(tag)
        now, *values = self.admin.eval(EXPIRY_SCRIPT, len(keys), *keys)
        return now, {k: v for k, v in zip(sorted(KINDS), values, strict=True) if v != -2}

    def hlen(self, tag: str, kind: str) -> int:
        return int(self.admin.hlen(self.key(tag, kind)))

    def zcard(self, tag: str, kind: str) -> int:
        return int(self.admin.zcard(self.key(tag, kind)))

    def drop(self) -> None:
        for key in self.scan_keys():
            self.admin.delete(key)


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["single", "cluster"])
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def space(where: str, request: pytest.FixtureRequest) -> Iterator[Space]:
    """This test's prefix on the single-node Redis or on the cluster; its keys go afterwards."""
    url = request.getfixturevalue("redis_url" if where == "single" else "redis_cluster_url")
    admin = admin_client(url)
    space = Space(where, url, f"lgmp-rt-{uuid.uuid4().hex[:12]}", admin)
    try:
        yield space
    finally:
        with suppress(redis.RedisError):
            for key in admin.scan_iter(match=f"{space.prefix}*", count=1000):
                admin.delete(key)
        admin.close()


# --------------------------------------------------------------------------------------------
# Private redis-server processes (loopback, free port, tmp dir, no persistence)
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port free on 127.0.0.1, away from the ephemeral range and the cluster fixture's."""
    start = 21000 + random.randrange(8000)
    for port in range(start, start + 500):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port for a private redis-server")


class RedisServer:
    """A ``redis-server`` of this test session's own; stopped by port (``SHUTDOWN NOSAVE``)."""

    def __init__(self, workdir: Path, *extra: str, password: str | None = None) -> None:
        self.binary = machine_program("redis-server")
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.extra = list(extra)
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0, auth: str = "") -> str:
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def admin(self, db: int = 0) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            db=db,
            password=self.password,
            socket_timeout=10,
            retry=Retry(NoBackoff(), 0),  # SHUTDOWN closes the connection: that is success
        )

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
             "--logfile", str(self.workdir / "log"), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                with self.admin() as client:
                    client.ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / "log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(
                        f"redis-server on port {self.port} did not start:\n{log}"
                    ) from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None:
            return
        with suppress(redis.RedisError), self.admin() as client:
            client.shutdown(nosave=True)
        try:
            self.process.wait(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:  # our own child: end it by its pid
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """``start_redis(*args, password=...)``: a running private server, stopped at teardown."""
    started: list[RedisServer] = []

    def start(*extra: str, password: str | None = None) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(started)}", *extra, password=password)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def make_checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values=dict(values),
        channel_versions=dict(versions),
        versions_seen={},
        updated_channels=None,
    )


def cid(config: RunnableConfig) -> str:
    return str(config["configurable"]["checkpoint_id"])


def ids(tuples: Sequence[CheckpointTuple]) -> list[str]:
    return [cid(t.config) for t in tuples]


async def put_chain(
    ops: Ops,
    thread_id: str,
    n: int,
    *,
    ns: str = "",
    run_id: str = "run-1",
    parent: str | None = None,
    writes: int = 2,
) -> list[RunnableConfig]:
    """``n`` checkpoints in a parent chain, each with ``writes`` pending writes.

    Channel ``a`` gets a new version (and value) at every step, ``const`` only at the first, so
    the blobs of a namespace are ``n`` versions of ``a`` plus one of ``const``.
    """
    stored: list[RunnableConfig] = []
    for i in range(n):
        values = {"a": f"{thread_id[:30]}/{ns}/a{i}", "const": f"{thread_id[:30]}/const"}
        new_versions: dict[str, Any] = {"a": i + 1}
        if i == 0:
            new_versions["const"] = 1
        config = await ops.put(
            cfg(thread_id, ns, parent),
            make_checkpoint(values, {"a": i + 1, "const": 1}),
            {"source": "loop", "step": i, "parents": {}, "run_id": run_id},
            new_versions,
        )
        if writes:
            await ops.put_writes(
                config, [(f"w{j}", f"{thread_id[:30]}/{ns}/w{i}.{j}") for j in range(writes)], "t"
            )
        parent = cid(config)
        stored.append(config)
    return stored


async def assert_consistent(space: Space, ops: Ops) -> None:
    """Every thread under the prefix is whole: no checkpoint without its parts, no orphans.

    Each checkpoint is in exactly one index (``idx`` or ``replay``) and has its body and meta
    record; every pending write is indexed and belongs to a stored checkpoint; every stored blob
    is a channel version of some stored checkpoint; and each checkpoint reads back through the
    saver with all its values.
    """
    for tag, kinds in space.tags().items():
        thread = space.admin.hgetall(space.key(tag, "thread"))
        if b"id" not in thread and kinds == {"thread"}:  # a deletion tombstone, alone
            assert tombstone_fields(thread) == TOMBSTONE_FIELDS, (tag, kinds)
            continue
        if b"id" not in thread:  # a thread on a deleted id: the tombstone holds no id
            assert tombstone_fields(thread) == TOMBSTONE_FIELDS, (tag, kinds)
            raw = space.admin.hget(space.key(tag, "rec"), "id")
            assert raw is not None, (tag, kinds)
            thread[b"id"] = raw
        thread_id = thread[b"id"].decode("utf-8", "surrogatepass")
        indexed = [
            *space.admin.zrange(space.key(tag, "idx"), 0, -1),
            *space.admin.zrange(space.key(tag, "replay"), 0, -1),
        ]
        assert len(indexed) == len(set(indexed)), "a checkpoint is in both indexes"
        bodies = set(space.admin.hkeys(space.key(tag, "ck")))
        metas = set(space.admin.hkeys(space.key(tag, "meta")))
        assert set(indexed) == bodies == metas, thread_id
        write_fields = set(space.admin.hkeys(space.key(tag, "writes")))
        assert write_fields == set(space.admin.zrange(space.key(tag, "widx"), 0, -1))
        for f in write_fields:
            ns, checkpoint_id, _task = f.split(b"\x00")
            assert ns + b"\x00" + checkpoint_id in bodies, f"write {f!r} of no checkpoint"
        listed = set(space.admin.zrange(space.key(tag, "idx"), 0, -1))
        versions: set[bytes] = set()
        for member in bodies:
            if member not in listed:
                continue  # kept only for DeltaChannel replay; never returned
            ns, checkpoint_id = member.decode().split("\x00")
            tup = await ops.get_tuple(cfg(thread_id, ns, checkpoint_id))
            assert tup is not None, f"checkpoint {member!r} does not read back"
            for ch, ver in tup.checkpoint["channel_versions"].items():
                versions.add(f"{ns}\x00{ch}\x00{ver}".encode())
        if not space.admin.exists(space.key(tag, "replay")):
            orphans = set(space.admin.hkeys(space.key(tag, "blobs"))) - versions
            assert not orphans, f"blobs no checkpoint refers to: {sorted(orphans)[:3]}"


# --------------------------------------------------------------------------------------------
# Clients and URLs
# --------------------------------------------------------------------------------------------


def _make_tls_files(workdir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the client verifies it against itself)."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed to make a certificate for the TLS test"
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def exercise(ops: Ops, thread_id: str = "url-thread") -> None:
    """Every method once: what a user's app would do on this connection."""
    chain = await put_chain(ops, thread_id, 3)
    tup = await ops.get_tuple(cfg(thread_id))
    assert tup is not None and cid(tup.config) == cid(chain[-1])
    assert tup.checkpoint["channel_values"]["a"] == f"{thread_id}//a2"
    assert len(tup.pending_writes or []) == 2
    assert len(await ops.list(cfg(thread_id), limit=2)) == 2
    assert [t.config["configurable"]["thread_id"] for t in await ops.list(None)] == [thread_id] * 3
    await ops.delta_history(cfg(thread_id), ["a"])
    await ops.copy_thread(thread_id, thread_id + "-copy")
    await ops.delete_for_runs(["no-such-run"])
    await ops.prune([thread_id + "-copy"])
    await ops.delete_thread(thread_id + "-copy")
    assert len(await ops.list(cfg(thread_id))) == 3


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
async def test_from_conn_string_with_db_user_password_and_tls(
    start_redis: Callable[..., RedisServer], tmp_path: Path, flavour: str, scheme: str
) -> None:
    """``redis[s]://user:password@host:port/db``: the db number, an ACL user and TLS are used.

    The ACL user may touch only keys under ``app:*``, so every command the saver sends
    (scripts included: Redis checks their declared and touched keys) stays inside its prefix.
    """
    cert, key = _make_tls_files(tmp_path / "tls")
    tls_port = free_port()
    server = start_redis(
        "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
        "--requirepass", "default-pw",
        "--user", "alice", "on", ">s3cret", "~app:*", "&*", "+@all",
        password="default-pw",
    )  # fmt: skip
    if scheme == "rediss":
        url = f"rediss://alice:s3cret@127.0.0.1:{tls_port}/2?ssl_ca_certs={cert}"
    else:
        url = server.url(2, auth="alice:s3cret@")
    async with open_ops(flavour, url, key_prefix="app") as ops:
        await exercise(ops)

    with server.admin(2) as admin:
        keyspace = admin.info("keyspace")
        assert set(keyspace) == {"db2"}, keyspace
        assert all(k.startswith(b"app:{") for k in admin.scan_iter(count=1000))

    # The default user with its password, on another db
    async with open_ops(flavour, server.url(5, auth=":default-pw@"), key_prefix="app") as ops:
        await exercise(ops, "default-user-thread")
    with server.admin(5) as admin:
        assert admin.dbsize() > 0

    # A wrong password fails at open (the PING), with the server's reason, password masked
    with pytest.raises(MemoryConnectionError, match="invalid username-password pair") as info:
        async with open_ops(flavour, server.url(2, auth="alice:wrong@"), key_prefix="app"):
            pass
    assert "wrong" not in str(info.value) and "alice:***@" in str(info.value)

    # A prefix the ACL user may not touch is refused by Redis, not silently written elsewhere
    async with open_ops(flavour, url, key_prefix="other") as ops:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await put_chain(ops, "x", 1)


def _clients(where: str, url: str, **kwargs: Any) -> tuple[Any, Any]:
    """A blocking and an asyncio client for ``url`` of the kind ``where`` needs."""
    rest = url.partition("://")[2]
    if where == "cluster":
        return (
            RedisCluster.from_url(f"redis://{rest}", **kwargs),
            redis.asyncio.cluster.RedisCluster.from_url(f"redis://{rest}", **kwargs),
        )
    return redis.Redis.from_url(url, **kwargs), redis.asyncio.Redis.from_url(url, **kwargs)


async def test_existing_clients_are_used_as_given(space: Space, flavour: str) -> None:
    """``redis.Redis`` / ``RedisCluster`` and their asyncio twins, made by the caller, work;
    the saver does not close a client it did not open."""
    sync_client, async_client = _clients(space.where, space.url)
    try:
        saver: Any = (
            RedisSaver(sync_client, key_prefix=space.prefix)
            if flavour == "sync"
            else AsyncRedisSaver(async_client, key_prefix=space.prefix)
        )
        assert saver.client is (sync_client if flavour == "sync" else async_client)
        ops = Ops(saver, is_async=flavour == "async")
        await ops.setup()
        await exercise(ops)
        del saver, ops
        assert sync_client.ping()
        assert await async_client.ping()
    finally:
        sync_client.close()
        await async_client.aclose()


async def test_clients_with_decode_responses_are_refused(space: Space) -> None:
    sync_client, async_client = _clients(space.where, space.url, decode_responses=True)
    try:
        for cls, client in ((RedisSaver, sync_client), (AsyncRedisSaver, async_client)):
            with pytest.raises(InvalidConfigError, match="decode_responses=False"):
                cls(client, key_prefix=space.prefix)
    finally:
        sync_client.close()
        await async_client.aclose()
    assert space.scan_keys() == set()


async def test_wrong_client_types_are_refused(redis_url: str) -> None:
    sync_client = redis.Redis.from_url(redis_url)
    async_client = redis.asyncio.Redis.from_url(redis_url)
    try:
        cases: list[tuple[Any, Any, str]] = [
            (RedisSaver, async_client, "Redis"),
            (AsyncRedisSaver, sync_client, "Redis"),
            (RedisSaver, redis_url, "str"),
            (AsyncRedisSaver, redis_url, "str"),
            (RedisSaver, None, "NoneType"),
            (RedisSaver, sync_client.connection_pool, "ConnectionPool"),
        ]
        for cls, client, got in cases:
            with pytest.raises(InvalidConfigError, match=f"{cls.__name__} needs one of") as info:
                cls(client)
            assert f"got {got}" in str(info.value), str(info.value)
    finally:
        sync_client.close()
        await async_client.aclose()


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b", "{app}", "nul\x00"])
def test_key_prefixes_that_would_break_hash_tags_are_refused(redis_url: str, prefix: str) -> None:
    with RedisSaver.from_conn_string(redis_url) as saver, pytest.raises(InvalidConfigError):
        RedisSaver(saver.client, key_prefix=prefix)


# --------------------------------------------------------------------------------------------
# Key prefixes: apps sharing one Redis never see each other
# --------------------------------------------------------------------------------------------


@pytest.fixture
def own_space(
    where: str, start_redis: Callable[..., RedisServer], request: pytest.FixtureRequest
) -> Iterator[Space]:
    """Like ``space``, on a Redis whose whole keyspace is this test's: a private server, or
    the cluster this test session started (tests in a session run one at a time)."""
    if where == "single":
        url = start_redis().url()
        admin = admin_client(url)
        yield Space(where, url, f"lgmp-rt-{uuid.uuid4().hex[:12]}", admin)
        admin.close()
    else:
        yield request.getfixturevalue("space")


async def test_key_prefixes_isolate_apps_sharing_one_redis(own_space: Space, flavour: str) -> None:
    """Three prefixes where a careless SCAN pattern would overlap (one extends another; one
    ends in ``*``, which unescaped would match both others), the same thread ids in each: every
    saver sees its own data only, and nothing is written outside the prefixes (the whole
    keyspace is compared before and after)."""
    space = own_space
    prefixes = [space.prefix, space.prefix + ":x", space.prefix + "*"]
    everything_before = set(space.admin.scan_iter(count=1000))
    async with (
        space.open(flavour, key_prefix=prefixes[0]) as a,
        space.open(flavour, key_prefix=prefixes[1]) as b,
        space.open(flavour, key_prefix=prefixes[2]) as c,
    ):
        apps = {"a": a, "b": b, "c": c}
        for name, ops in apps.items():
            await put_chain(ops, "shared", 2, run_id=f"run-{name}")
            await put_chain(ops, f"only-{name}", 1, run_id=f"run-{name}")
        for name, ops in apps.items():
            tup = await ops.get_tuple(cfg("shared"))
            assert tup is not None and tup.metadata["run_id"] == f"run-{name}"
            everything = await ops.list(None)
            assert {t.config["configurable"]["thread_id"] for t in everything} == {
                "shared",
                f"only-{name}",
            }
            assert {t.metadata["run_id"] for t in everything} == {f"run-{name}"}

        await a.delete_for_runs(["run-b", "run-c"])  # runs of other apps: not a's to delete
        await a.delete_thread("only-b")
        await b.prune(["shared"], strategy="delete")
        assert len(await a.list(cfg("shared"))) == 2
        assert await b.get_tuple(cfg("shared")) is None
        assert len(await c.list(None)) == 3
        assert len(await b.list(None)) == 1

    new = set(space.admin.scan_iter(count=1000)) - everything_before
    for key in new:
        assert any(key.startswith(f"{p}:{{".encode()) for p in prefixes), key
    for p in prefixes:
        assert space.scan_keys(p), f"nothing under {p!r}"


# --------------------------------------------------------------------------------------------
# Hash tags: every key of a thread in one slot, whatever the thread id
# --------------------------------------------------------------------------------------------

AWKWARD_THREAD_IDS = [
    "{",
    "}",
    "{}",
    "}{",
    "{a}",
    "x{y}z",
    "{{}}",
    "\x00",
    "nul\x00{in}side\x00",
    "日本語 🦜 {ключ} \u202e",
    "{" + "x" * 10_000 + "}",
    "".join(chr(0x4E00 + i % 20000) for i in range(10_000)),
]


async def _user_threads(ops: Ops, users: dict[str, str]) -> None:
    """One root checkpoint per thread, with its user in the metadata (the indexed key)."""
    for thread_id, user in users.items():
        await ops.put(
            cfg(thread_id),
            make_checkpoint({"a": thread_id}, {"a": 1}),
            {"source": "input", "step": -1, "parents": {}, "user_id": user},
            {"a": 1},
        )


async def _listed(ops: Ops, user: str) -> set[str]:
    threads = ops.saver.threads
    if ops.is_async:
        found = await threads.asearch(metadata={"user_id": user}, limit=100)
        assert await threads.acount(metadata={"user_id": user}) == len(found)
    else:
        found = threads.search(metadata={"user_id": user}, limit=100)
        assert threads.count(metadata={"user_id": user}) == len(found)
    return {t["thread_id"] for t in found}


def _index_keys(space: Space) -> set[bytes]:
    return set(space.admin.scan_iter(match=f"{glob_literal(space.prefix)}:{{*tix*", count=1000))


async def test_the_thread_index_sets_share_one_hash_slot(space: Space, flavour: str) -> None:
    """Every sorted set of the thread index (all threads, per user, per status, per user
    and status) is in one hash slot, so a write's step 1 is one node's pipeline; the
    thread's own keys stay in their own slots."""
    users = {f"t{i}": f"user-{i % 3}" for i in range(9)}
    async with space.open(flavour) as ops:
        await _user_threads(ops, users)
        keys = _index_keys(space)
        assert len(keys) >= 1 + 3 + 1 + 3, keys  # all, per user, idle, idle per user
        assert all(k.startswith(f"{space.prefix}:{{{space.prefix}:tix}}:".encode()) for k in keys)
        slots = {key_slot(k) for k in keys}
        if space.where == "cluster":
            slots |= {int(space.admin.cluster_keyslot(k)) for k in keys}
        assert len(slots) == 1, slots
        assert await _listed(ops, "user-1") == {"t1", "t4", "t7"}


@pytest.mark.parametrize("with_hiredis", [True, False], ids=["hiredis", "python"])
def test_commands_are_packed_as_redis_py_packs_them(
    with_hiredis: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner packs its commands itself (hiredis, or Python where hiredis is absent):
    the bytes are redis-py's own, for every kind of argument plans send; a bool is refused
    as redis-py refuses it."""
    import langgraph_memory_plus.drivers.redis as driver

    if not with_hiredis:
        monkeypatch.setattr(driver, "_hiredis_pack", None)
    args = (b"EVALSHA", "abc", 3, -7, 1.5, 1e20, b"x\x00y", "é \u202e", b"", bytearray(b"ba"))
    expected = b"".join(redis.Connection().pack_command(*args))
    assert driver._pack(args) == expected
    assert driver._pack([*args, memoryview(b"mv")]) == b"".join(
        redis.Connection().pack_command(*args, memoryview(b"mv"))
    )
    with pytest.raises(redis.DataError):
        driver._pack((b"SET", b"k", True))


def _flush_scripts(space: Space) -> None:
    """``SCRIPT FLUSH`` on the Redis, or on every node of the cluster."""
    if isinstance(space.admin, RedisCluster):
        for node in space.admin.get_nodes():
            space.admin.execute_command("SCRIPT FLUSH", target_nodes=node)
            assert space.admin.execute_command("SCRIPT EXISTS", TIX_ADD_SHA, target_nodes=node) == [
                0
            ]
    else:
        space.admin.script_flush()
        assert space.admin.script_exists(TIX_ADD_SHA) == [False]


async def test_scripts_the_server_forgot_are_loaded_again(
    where: str,
    flavour: str,
    start_redis: Callable[..., RedisServer],
    request: pytest.FixtureRequest,
) -> None:
    """Scripts go by their digest (``EVALSHA``), the thread index's step 1 too, batched
    with the put: after ``SCRIPT FLUSH`` (as after a restart) every write and read loads
    what it needs and lands, once: the record counts each checkpoint once, and the
    threads are in their user's set. (A private server, not the machine's: other
    sessions' scripts stay loaded there.)"""
    if where == "single":
        server = start_redis()
        url, admin = server.url(), server.admin()
    else:
        url = request.getfixturevalue("redis_cluster_url")
        admin = admin_client(url)
    space = Space(where, url, f"lgmp-rt-{uuid.uuid4().hex[:12]}", admin)
    try:
        async with space.open(flavour) as ops:
            await _user_threads(ops, {"s0": "user-0"})
            _flush_scripts(space)
            await _user_threads(ops, {"s1": "user-0", "s2": "user-1"})
            _flush_scripts(space)
            latest = await ops.get_tuple(cfg("s1"))
            assert latest is not None
            await ops.put_writes(latest.config, [("a", 2)], "task-1")
            _flush_scripts(space)
            assert await ops.get_tuple(cfg("s2")) is not None
            latest = await ops.get_tuple(cfg("s1"))
            assert latest is not None and latest.pending_writes == [("task-1", "a", 2)]
            assert await _listed(ops, "user-0") == {"s0", "s1"}
            assert await _listed(ops, "user-1") == {"s2"}
            for thread_id in ("s0", "s1", "s2"):
                record = admin.hgetall(space.key(space.tag_of(thread_id), "rec"))
                assert record[b"n"] == b"1", (thread_id, record)
    finally:
        for key in admin.scan_iter(match=f"{space.prefix}*", count=1000):
            admin.delete(key)
        admin.close()


async def test_sets_of_the_former_layout_move_on_the_first_read(space: Space, flavour: str) -> None:
    """Sets written under the former layout (``{prefix}:{tix:<rest>}``, a slot per set)
    are moved by the first search or count: every thread is found, the former keys are
    gone, a set's expiry is kept, and a move cut short (a set half copied, the set of all
    threads still there) is finished by the next saver's first read."""
    users = {f"t{i}": f"user-{i % 2}" for i in range(6)}
    async with space.open(flavour) as ops:
        await _user_threads(ops, users)
    admin = space.admin
    head = f"{space.prefix}:{{{space.prefix}:tix}}:".encode()
    former_of = {
        k: f"{space.prefix}:{{tix:".encode() + k[len(head) :] + b"}" for k in _index_keys(space)
    }
    half = next(k for k in former_of if k != head + b"all")
    for key, former in former_of.items():  # back to the former layout (cross-slot: copied)
        entries = admin.zrange(key, 0, -1, withscores=True)
        admin.zadd(former, dict(entries))
        if key == half:  # a move cut short: this set was half copied when it crashed
            admin.zrem(key, entries[0][0])
        else:
            admin.delete(key)
    admin.pexpire(former_of[head + b"all"], 3_600_000)
    assert not admin.exists(head + b"all")

    async with space.open(flavour) as ops:
        assert await _listed(ops, "user-0") == {"t0", "t2", "t4"}
        assert await _listed(ops, "user-1") == {"t1", "t3", "t5"}
        assert not any(admin.exists(former) for former in former_of.values())
        assert set(former_of) <= _index_keys(space)
        assert 0 < admin.pttl(head + b"all") <= 3_600_000
        # later reads of this saver look no more (one EXISTS per index object)
        admin.zadd(former_of[head + b"all"], {b"ghost": 1})
        await _listed(ops, "user-0")
        assert admin.exists(former_of[head + b"all"])
    admin.delete(former_of[head + b"all"])


def _move_slot(admin: RedisCluster, key: bytes) -> tuple[Any, Any]:
    """Move ``key``'s slot, with its keys, to another primary (a resharding behind every
    client's back); the (source, target) nodes."""
    slot = key_slot(key)
    source = admin.get_node_from_key(key)
    target = next(n for n in admin.get_primaries() if n.name != source.name)
    ids = {
        name: node["node_id"]
        for name, node in admin.cluster_nodes().items()
        if "master" in node["flags"]
    }
    src = redis.Redis(host=source.host, port=source.port)
    dst = redis.Redis(host=target.host, port=target.port)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.name])
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.name])
    keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    assert key in keys
    src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
    for node in admin.get_primaries():
        redis.Redis(host=node.host, port=node.port).execute_command(
            "CLUSTER", "SETSLOT", slot, "NODE", ids[target.name]
        )
    return source, target


def test_a_batch_follows_its_slot_when_the_slot_moves_to_another_node(
    redis_cluster_url: str,
) -> None:
    """A one-slot batch goes to the node the client's slot map names; when the slot has
    moved meanwhile (a resharding), that node answers ``MOVED`` and the batch is sent again
    through redis-py's cluster pipeline, which follows it: the write lands, the thread is
    listed, and the client's map now names the new node."""
    prefix = f"lgmp-mv-{uuid.uuid4().hex[:12]}"
    admin = admin_client(redis_cluster_url)
    assert isinstance(admin, RedisCluster)
    config = {"user_id": "u"}
    with RedisSaver.from_conn_string(redis_cluster_url, key_prefix=prefix) as saver:
        for thread_id in ("t0", "t1"):
            if thread_id == "t1":  # move the index's slot to another primary, behind the saver
                all_key = f"{prefix}:{{{prefix}:tix}}:all".encode()
                source, target = _move_slot(admin, all_key)
                assert saver.client.get_node_from_key(all_key).name == source.name  # stale map
            saver.put(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **config}},
                make_checkpoint({"a": thread_id}, {"a": 1}),
                {"source": "input", "step": -1, "parents": {}, **config},
                {"a": 1},
            )
        listed = {t["thread_id"] for t in saver.threads.search(metadata=config)}
        assert listed == {"t0", "t1"}
        assert saver.client.get_node_from_key(all_key).name == target.name
        for key in admin.scan_iter(match=f"{prefix}*", count=1000):
            admin.delete(key)
    admin.close()


def test_a_script_follows_its_thread_when_the_slot_moves_to_another_node(
    redis_cluster_url: str,
) -> None:
    """A thread's scripts go straight to the node the client's slot map names; when the
    thread's slot has moved meanwhile, that node answers ``MOVED`` and the script is sent
    again through redis-py's cluster client, which follows it: the put lands once, reads
    find it, and the client's map names the new node."""
    prefix = f"lgmp-mvs-{uuid.uuid4().hex[:12]}"
    admin = admin_client(redis_cluster_url)
    assert isinstance(admin, RedisCluster)
    with RedisSaver.from_conn_string(redis_cluster_url, key_prefix=prefix) as saver:
        first = saver.put(
            cfg("moving"),
            make_checkpoint({"a": 1}, {"a": 1}),
            {"source": "input", "step": -1, "parents": {}},
            {"a": 1},
        )
        key = saver._plans.keys("moving")[0]
        source, target = _move_slot(admin, key)
        assert saver.client.get_node_from_key(key).name == source.name  # stale map
        second = saver.put(
            first,
            make_checkpoint({"a": 2}, {"a": 2}),
            {"source": "loop", "step": 0, "parents": {}},
            {"a": 2},
        )
        latest = saver.get_tuple(cfg("moving"))
        assert latest is not None and latest.config == second
        assert latest.checkpoint["channel_values"] == {"a": 2}
        assert len(list(saver.list(cfg("moving")))) == 2
        assert saver.client.get_node_from_key(key).name == target.name
        record = admin.hgetall(saver._plans.keys("moving")[-1])
        assert record[b"n"] == b"2"
        for found in admin.scan_iter(match=f"{prefix}*", count=1000):
            admin.delete(found)
    admin.close()


async def test_every_key_of_a_thread_lands_in_one_hash_slot(space: Space, flavour: str) -> None:
    """Thread ids with braces, NULs, 10k characters or any unicode: all keys one thread
    writes share one cluster slot (by redis-py's ``key_slot`` and, on the cluster, by the
    server's ``CLUSTER KEYSLOT``), each thread stays distinct, and on the cluster every
    operation works (a key in another slot would raise ``CROSSSLOT``)."""
    slots: dict[str, int] = {}
    async with space.open(flavour) as ops:
        for thread_id in AWKWARD_THREAD_IDS:
            label = repr(thread_id[:20])
            before = space.scan_keys()
            await put_chain(ops, thread_id, 2)
            await put_chain(ops, thread_id, 1, ns="child:{1}")
            new = space.scan_keys() - before
            assert {split_key(space.prefix, k)[1] for k in new} >= CORE_KINDS, label
            thread_slots = {key_slot(k) for k in new}
            if space.where == "cluster":
                thread_slots |= {int(space.admin.cluster_keyslot(k)) for k in new}
            assert len(thread_slots) == 1, f"{label}: keys in slots {thread_slots}"
            slots[thread_id] = thread_slots.pop()

            tup = await ops.get_tuple(cfg(thread_id))
            assert tup is not None, label
            assert tup.config["configurable"]["thread_id"] == thread_id
            assert tup.checkpoint["channel_values"]["a"] == f"{thread_id[:30]}//a1", label
            assert tup.parent_config is not None
            history = await ops.list({"configurable": {"thread_id": thread_id}})
            assert len(history) == 3, label
            assert len(await ops.list(cfg(thread_id, "child:{1}"), limit=1)) == 1
            await ops.delta_history(cfg(thread_id), ["a", "w0"])

            before = space.scan_keys()
            await ops.copy_thread(thread_id, thread_id + "}{copy")
            copied = space.scan_keys() - before
            assert len({key_slot(k) for k in copied}) == 1, label
            assert len(await ops.list({"configurable": {"thread_id": thread_id + "}{copy"}})) == 3

        listed = {t.config["configurable"]["thread_id"] for t in await ops.list(None)}
        assert listed == {
            t + suffix for t in AWKWARD_THREAD_IDS for suffix in ("", "}{copy")
        }  # SCAN over every node of the cluster
        assert len(set(slots.values())) > 1, "every thread in one slot: tags are not per thread"

        await ops.delete_for_runs(["run-1"])
        for thread_id in AWKWARD_THREAD_IDS:
            await ops.prune([thread_id])
            await ops.delete_thread(thread_id)
            assert await ops.get_tuple(cfg(thread_id)) is None
        assert await ops.list(None) == []


# --------------------------------------------------------------------------------------------
# Bad input: the same errors as PostgreSQL
# --------------------------------------------------------------------------------------------

NO_THREAD_CONFIGS: dict[str, Any] = {
    "empty-configurable": {"configurable": {}},
    "ns-only": {"configurable": {"checkpoint_ns": ""}},
    "thread-none": {"configurable": {"thread_id": None}},
    "thread-empty": {"configurable": {"thread_id": ""}},
    "no-configurable": {},
}


async def test_missing_thread_id_gives_the_same_error_as_postgres(
    space: Space, flavour: str, pg_url: str
) -> None:
    """Each call that needs a thread, given a config without one, raises the very error
    (type and message) ``PostgresSaver`` raises, and writes nothing."""

    def calls(ops: Ops, bad: Any) -> dict[str, Callable[[], Any]]:
        checkpoint = make_checkpoint({"a": 1}, {"a": 1})
        return {
            "get_tuple": lambda: ops.get_tuple(bad),
            "put": lambda: ops.put(bad, checkpoint, {"step": 0}, {"a": 1}),
            "put_writes": lambda: ops.put_writes(bad, [("a", 1)], "task"),
            "delta": lambda: ops.delta_history(bad, ["a"]),
        }

    expected: dict[tuple[str, str], str] = {}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        postgres = Ops(PostgresSaver(conn), is_async=False)
        for label, bad in NO_THREAD_CONFIGS.items():
            for name, call in calls(postgres, bad).items():
                with pytest.raises(InvalidConfigError) as info:
                    await call()
                expected[label, name] = str(info.value)
    async with space.open(flavour) as ops:
        for label, bad in NO_THREAD_CONFIGS.items():
            for name, call in calls(ops, bad).items():
                with pytest.raises(InvalidConfigError, match="thread_id") as info:
                    await call()
                assert isinstance(info.value, ValueError)
                assert str(info.value) == expected[label, name], (label, name)
    assert space.scan_keys() == set(), "a refused call wrote keys"


async def test_put_writes_without_checkpoint_id_gives_the_postgres_error(
    space: Space, pg_url: str
) -> None:
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        pytest.raises(InvalidConfigError) as pg_info,
    ):
        PostgresSaver(conn).put_writes(cfg("t"), [("a", 1)], "task")
    async with space.open("sync") as ops:
        await put_chain(ops, "t", 1, writes=0)
        keys = space.scan_keys()
        with pytest.raises(InvalidConfigError, match="checkpoint_id") as info:
            await ops.put_writes(cfg("t"), [("a", 1)], "task")
        assert str(info.value) == str(pg_info.value)
        assert space.scan_keys() == keys


# --------------------------------------------------------------------------------------------
# TTL: Redis's own expiry, on every key of a thread at once
# --------------------------------------------------------------------------------------------


SPREAD_MS = 10  # how far apart keys set by one script may expire, outside the exact test


def assert_one_expiry(space: Space, tag: str, what: str) -> tuple[int, int]:
    """Every existing key of the thread expires, all within ``SPREAD_MS`` of each other (the
    exact test is :func:`test_keys_of_a_thread_get_the_very_same_expiry_time`); returns the
    first and last expiry time."""
    now, expiry = space.expiry(tag)
    assert expiry, f"{what}: the thread has no keys"
    assert min(expiry.values()) > now, f"{what}: keys that never expire: {expiry}"
    first, last = min(expiry.values()), max(expiry.values())
    assert last - first <= SPREAD_MS, f"{what}: keys expire at different times: {expiry}"
    return first, last


def remaining_ms(space: Space, tag: str, what: str) -> int:
    first, _ = assert_one_expiry(space, tag, what)
    return first - space.expiry(tag)[0]


async def test_a_thread_expires_whole_and_is_readable_until_then(
    space: Space, flavour: str
) -> None:
    """``default_ttl`` 0.01 min (600 ms): right after the last write every part of the thread
    (checkpoints, blobs, pending writes, other namespaces) reads back; the keys expire at one
    instant (sampled atomically until they are gone: never some without the others); then
    nothing of the thread is left under the prefix."""
    async with space.open(flavour, ttl={"default_ttl": 0.01}) as ops:
        chain = await put_chain(ops, "short-lived", 3)
        await put_chain(ops, "short-lived", 2, ns="child:1")
        tag = space.tag_of("short-lived")
        whole = space.present(tag)
        assert whole >= CORE_KINDS
        assert 0 < remaining_ms(space, tag, "after the writes") <= 600

        tup = await ops.get_tuple(cfg("short-lived"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {
            "a": "short-lived//a2",
            "const": "short-lived/const",
        }
        assert sorted(tup.pending_writes or []) == [
            ("t", "w0", "short-lived//w2.0"),
            ("t", "w1", "short-lived//w2.1"),
        ]
        first = await ops.get_tuple(chain[0])
        assert first is not None and first.pending_writes
        assert len(await ops.list({"configurable": {"thread_id": "short-lived"}})) == 5
        assert (await ops.delta_history(cfg("short-lived"), ["w0"]))["w0"]["writes"]

        seen = []
        deadline = time.monotonic() + WAIT_SECONDS
        while (kinds := space.present(tag)) and time.monotonic() < deadline:
            seen.append(frozenset(kinds))
            await asyncio.sleep(0.05)
        assert not kinds, "the thread never expired"
        assert set(seen) == {frozenset(whole)}, "keys of the thread expired apart"
        assert space.scan_keys() == set(), "something of the thread outlived its TTL"
        assert await ops.get_tuple(cfg("short-lived")) is None
        assert await ops.list(None) == []


async def test_keys_of_a_thread_get_the_very_same_expiry_time(space: Space) -> None:
    """A thread never half-expires, not even for a millisecond: every write gives all keys of
    the thread one expiry instant (``PEXPIRETIME`` equal to the millisecond).

    A script that sets ``PEXPIRE`` key after key reads the live clock for each on Redis 7.0,
    so about one write in a hundred straddles a millisecond; 800 writes make that near certain
    to show. (The scripts are the same for both classes: the sync one is enough.)
    """
    writes = 800
    async with space.open("sync", ttl={"default_ttl": 1}) as ops:
        [stored] = await put_chain(ops, "t", 1)
        tag = space.tag_of("t")
        spread = Counter[int]()
        for i in range(writes):
            await ops.put_writes(stored, [("x", i)], f"task-{i}")
            _, expiry = space.expiry(tag)
            spread[max(expiry.values()) - min(expiry.values())] += 1
        assert spread == {0: writes}, f"expiry spread (ms) -> number of writes: {dict(spread)}"


async def test_every_write_refreshes_the_ttl_of_every_key(space: Space, flavour: str) -> None:
    """A write to one part of a thread (a pending write, a checkpoint in another namespace)
    extends the life of all its keys, to the same instant. The TTL is a minute so the
    comparison ("lives longer than before the write") has no race."""
    async with space.open(flavour, ttl={"default_ttl": 1}) as ops:
        [first] = await put_chain(ops, "t", 1, writes=0)
        tag = space.tag_of("t")
        for label, write in (
            ("put_writes", lambda: ops.put_writes(first, [("x", 1)], "later-task")),
            ("put in another namespace", lambda: put_chain(ops, "t", 1, ns="child", writes=0)),
            ("put", lambda: put_chain(ops, "t", 1, parent=cid(first), writes=0)),
        ):
            await asyncio.sleep(0.05)
            before = assert_one_expiry(space, tag, f"before {label}")
            await write()
            after = assert_one_expiry(space, tag, f"after {label}")
            assert after[0] > before[1], f"{label} did not refresh the thread's TTL"

        await ops.copy_thread("t", "t-copy")
        assert 0 < remaining_ms(space, space.tag_of("t-copy"), "copy") <= 60_000


@pytest.mark.parametrize("refresh_on_read", [True, False])
async def test_reads_refresh_the_ttl_only_with_refresh_on_read(
    space: Space, flavour: str, refresh_on_read: bool
) -> None:
    ttl = {"default_ttl": 1, "refresh_on_read": refresh_on_read}
    async with space.open(flavour, ttl=ttl) as ops:
        chain = await put_chain(ops, "t", 3)
        tag = space.tag_of("t")
        reads = {
            "get_tuple latest": lambda: ops.get_tuple(cfg("t")),
            "get_tuple by id": lambda: ops.get_tuple(chain[0]),
            "list(limit)": lambda: ops.list(cfg("t"), limit=1),
            "list(thread)": lambda: ops.list({"configurable": {"thread_id": "t"}}),
        }
        for label, read in reads.items():
            await asyncio.sleep(0.05)
            before = assert_one_expiry(space, tag, f"before {label}")
            await read()
            after = assert_one_expiry(space, tag, f"after {label}")
            if refresh_on_read:
                assert after[0] > before[1], f"{label} did not refresh the TTL"
            else:
                assert after == before, f"{label} refreshed the TTL without refresh_on_read"


async def test_every_key_keeps_one_expiry_through_every_operation(
    space: Space, flavour: str
) -> None:
    """Retention, pruning and run deletion rewrite a thread's keys and may create one (the
    ``replay`` index that ``DeltaChannel`` replay reads): after each of them, every key of the
    thread still expires at one instant, so the thread can never half-expire."""

    async def turns(ops: Ops, thread_id: str, first: int, end: int, check: bool) -> None:
        graph = delta_graph().compile(checkpointer=ops.saver)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        for i in range(first, end):
            turn = {"messages": [human(f"q{i}", f"h-{i}")], "items": [f"in-{i}"]}
            await ops.invoke(graph, turn, config)
            if check:
                assert_one_expiry(space, space.tag_of(thread_id), f"{thread_id} turn {i}")
        assert len((await ops.state(graph, config)).values["items"]) == 2 * end

    async with space.open(flavour, ttl={"default_ttl": 1}, keep_last=2) as ops:
        await turns(ops, "with-keep-last", 0, 4, check=True)

    async with space.open(flavour, ttl={"default_ttl": 1}) as ops:
        await turns(ops, "pruned", 0, 4, check=False)
        tag = space.tag_of("pruned")
        assert "replay" not in space.present(tag)
        assert_one_expiry(space, tag, "before prune")
        await ops.prune(["pruned"])
        assert "replay" in space.present(tag)  # DeltaChannel replay still needs older ones
        assert_one_expiry(space, tag, "after prune keep_latest")
        await turns(ops, "pruned", 4, 5, check=True)

        await put_chain(ops, "runs", 3, run_id="doomed")
        await put_chain(ops, "runs", 1, run_id="kept", ns="child")
        await ops.delete_for_runs(["doomed"])
        assert_one_expiry(space, space.tag_of("runs"), "delete_for_runs")


# --------------------------------------------------------------------------------------------
# Pending writes: one hash field per task
# --------------------------------------------------------------------------------------------


async def test_a_tasks_writes_take_one_field_and_one_index_member(
    space: Space, flavour: str
) -> None:
    """All writes of one task at one checkpoint are one ``writes`` field and one ``widx`` member
    (``ns NUL checkpoint_id NUL task_id``), read back in order; other tasks and checkpoints get
    fields of their own, and deleting the thread leaves only the tombstone."""
    async with space.open(flavour) as ops:
        first, second = await put_chain(ops, "t", 2, ns="child:1", writes=0)
        await ops.put_writes(first, [("a", 1), ("b", [2, "two"]), ("c", {"three": 3})], "task-1")
        tag = space.tag_of("t")
        expected_field = f"child:1\x00{cid(first)}\x00task-1".encode()
        assert set(space.admin.hkeys(space.key(tag, "writes"))) == {expected_field}
        assert space.admin.zrange(space.key(tag, "widx"), 0, -1) == [expected_field]
        tup = await ops.get_tuple(first)
        assert tup is not None and tup.pending_writes == [
            ("task-1", "a", 1),
            ("task-1", "b", [2, "two"]),
            ("task-1", "c", {"three": 3}),
        ]

        await ops.put_writes(first, [("a", 4)], "task-2", "~__pregel_pull, n")
        await ops.put_writes(second, [("a", 5), ("b", 6)], "task-1")
        assert space.hlen(tag, "writes") == space.zcard(tag, "widx") == 3
        tup = await ops.get_tuple(first)
        assert tup is not None and [w[0] for w in tup.pending_writes or []] == [
            "task-1", "task-1", "task-1", "task-2"
        ]  # fmt: skip
        await assert_consistent(space, ops)

        await ops.delete_thread("t")
        assert space.present(tag) == {"thread"}
        assert tombstone_fields(space.admin.hgetall(space.key(tag, "thread"))) == TOMBSTONE_FIELDS


async def test_a_tasks_later_writes_merge_like_inmemory_saver(space: Space, flavour: str) -> None:
    """A second ``put_writes`` of a task at the same checkpoint (a retried task) merges into its
    one field as ``InMemorySaver`` does: a regular write already stored keeps its first value,
    a special one (``__interrupt__``, ``__error__``; negative index) takes the latest, an index
    not stored yet is added; within one call, the last of a special channel wins."""
    assert WRITES_IDX_MAP[INTERRUPT] < 0 and WRITES_IDX_MAP[ERROR] < 0
    ref = reference()
    calls: list[tuple[list[tuple[str, Any]], str]] = [
        ([("a", "a-1"), ("b", "b-1"), (INTERRUPT, "interrupt-1")], "task"),
        ([("a", "a-2"), (INTERRUPT, "interrupt-2"), ("b", "b-2"), ("c", "c-2")], "task"),
        ([(ERROR, "error-3"), ("a", "a-3"), (ERROR, "error-3b")], "task"),
        ([("a", "other-1")], "other-task"),
    ]
    async with space.open(flavour) as ours:
        configs = []
        for saver in (ours, ref):
            [stored] = await put_chain(saver, "t", 1, writes=0)
            for writes, task_id in calls:
                await saver.put_writes(stored, writes, task_id, "~__pregel_pull, n")
            configs.append(stored)
        mine, theirs = await ours.get_tuple(configs[0]), await ref.get_tuple(configs[1])
        assert mine is not None and theirs is not None
        assert mine.pending_writes == theirs.pending_writes
        # index 0 and 1 kept from the first call, 2 and 3 new in the second, specials last
        assert sorted(mine.pending_writes or []) == [
            ("other-task", "a", "other-1"),
            ("task", ERROR, "error-3b"),
            ("task", INTERRUPT, "interrupt-2"),
            ("task", "a", "a-1"),
            ("task", "b", "b-1"),
            ("task", "b", "b-2"),
            ("task", "c", "c-2"),
        ]
        assert space.hlen(space.tag_of("t"), "writes") == 2
        await assert_consistent(space, ours)


# --------------------------------------------------------------------------------------------
# Retention, pruning, deletion: down to the hash fields
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 3])
async def test_keep_last_keeps_n_per_namespace_and_frees_the_rest(
    space: Space, flavour: str, keep: int
) -> None:
    """``keep_last=N``: ``list`` gives the newest N of each namespace, their pending writes
    stay, and the older checkpoints go with their meta records, writes and the blobs no kept
    checkpoint uses (counted in the hash fields)."""
    async with space.open(flavour, keep_last=keep) as ops:
        root = await put_chain(ops, "t", 6)
        child = await put_chain(ops, "t", 4, ns="child:1")
        tag = space.tag_of("t")
        for ns, chain in (("", root), ("child:1", child)):
            listed = await ops.list(cfg("t", ns))
            assert ids(listed) == [cid(c) for c in reversed(chain[-keep:])], ns
            for config in chain[-keep:]:
                tup = await ops.get_tuple(config)
                assert tup is not None and len(tup.pending_writes or []) == 2, ns
            for config in chain[:-keep]:
                assert await ops.get_tuple(config) is None, ns
        assert len(await ops.list({"configurable": {"thread_id": "t"}})) == 2 * keep

        # 2 namespaces x keep checkpoints, each with one task's writes; blobs: keep versions
        # of "a" and the one version of "const" per namespace. Nothing kept for replay.
        assert space.hlen(tag, "ck") == space.hlen(tag, "meta") == 2 * keep
        assert space.hlen(tag, "writes") == space.zcard(tag, "widx") == 2 * keep
        assert space.hlen(tag, "blobs") == 2 * (keep + 1)
        assert not space.admin.hexists(space.key(tag, "blobs"), "\x00a\x001")
        assert space.admin.hexists(space.key(tag, "blobs"), "\x00const\x001")
        assert "replay" not in space.present(tag)
        await assert_consistent(space, ops)


async def test_prune_and_delete_leave_only_the_tombstone(space: Space, flavour: str) -> None:
    async with space.open(flavour) as ops:
        for thread_id in ("kept", "pruned", "deleted-by-prune", "deleted"):
            await put_chain(ops, thread_id, 4)
            await put_chain(ops, thread_id, 3, ns="child:1")
            space.tag_of(thread_id)
        kept_fields = {
            kind: space.hlen(space.tag_of("kept"), kind) for kind in ("ck", "blobs", "writes")
        }

        await ops.prune(["pruned"], strategy="keep_latest")
        tag = space.tag_of("pruned")
        assert len(await ops.list({"configurable": {"thread_id": "pruned"}})) == 2
        assert space.hlen(tag, "ck") == space.hlen(tag, "meta") == 2
        assert space.hlen(tag, "writes") == space.zcard(tag, "widx") == 2  # a task each
        assert space.hlen(tag, "blobs") == 4  # per namespace: the latest "a" and "const"

        await ops.prune(["deleted-by-prune"], strategy="delete")
        await ops.delete_thread("deleted")
        for thread_id in ("deleted-by-prune", "deleted"):
            tag = space.tag_of(thread_id)
            assert space.present(tag) == {"thread"}, thread_id
            tombstone = space.key(tag, "thread")
            assert tombstone_fields(space.admin.hgetall(tombstone)) == TOMBSTONE_FIELDS, thread_id
            assert 0 < space.admin.ttl(tombstone) <= TOMBSTONE_SECONDS, thread_id
            assert await ops.list({"configurable": {"thread_id": thread_id}}) == []
        assert {t.config["configurable"]["thread_id"] for t in await ops.list(None)} == {
            "kept",
            "pruned",
        }
        assert {
            kind: space.hlen(space.tag_of("kept"), kind) for kind in ("ck", "blobs", "writes")
        } == kept_fields
        await assert_consistent(space, ops)


async def test_deletion_is_final_and_a_fresh_run_starts_clean(space: Space, flavour: str) -> None:
    """A run still going after its thread was deleted (puts chained on the deleted history,
    pending writes to deleted or refused checkpoints) does not bring the thread back; a new
    run on the same thread id (no parent) starts an empty history."""
    async with space.open(flavour) as ops:
        chain = await put_chain(ops, "victim", 3)
        tag = space.tag_of("victim")
        await ops.delete_thread("victim")

        late = await ops.put(
            cfg("victim", "", cid(chain[-1])),
            make_checkpoint({"a": "late-1"}, {"a": 9}),
            {"source": "loop", "step": 9, "parents": {}, "run_id": "run-1"},
            {"a": 9},
        )
        later = await ops.put(
            late,
            make_checkpoint({"a": "late-2"}, {"a": 10}),
            {"source": "loop", "step": 10, "parents": {}, "run_id": "run-1"},
            {"a": 10},
        )
        await ops.put_writes(chain[-1], [("a", "late-write")], "late-task")
        await ops.put_writes(later, [("a", "later-write")], "late-task")
        assert await ops.get_tuple(cfg("victim")) is None
        assert await ops.get_tuple(later) is None
        assert await ops.list(None) == []
        assert space.present(tag) == {"thread"}
        assert tombstone_fields(space.admin.hgetall(space.key(tag, "thread"))) == TOMBSTONE_FIELDS

        fresh = await put_chain(ops, "victim", 2)
        history = await ops.list({"configurable": {"thread_id": "victim"}})
        assert ids(history) == [cid(c) for c in reversed(fresh)]
        tup = await ops.get_tuple(cfg("victim"))
        assert tup is not None
        assert tup.pending_writes == [("t", "w0", "victim//w1.0"), ("t", "w1", "victim//w1.1")]
        assert tup.checkpoint["channel_values"] == {"a": "victim//a1", "const": "victim/const"}
        assert space.hlen(tag, "ck") == 2 and space.hlen(tag, "writes") == 2
        await assert_consistent(space, ops)


# --------------------------------------------------------------------------------------------
# Commands: no KEYS, SCAN only in admin paths, reads that do not grow with the thread
# --------------------------------------------------------------------------------------------

BIG_THREAD = 500
SMALL_THREAD = 10


@dataclass
class StatsServer:
    server: RedisServer
    admin: redis.Redis
    chains: dict[str, list[RunnableConfig]]

    def reset(self) -> None:
        self.admin.config_resetstat()

    def calls(self) -> Counter[str]:
        """Commands run since the last reset (Lua's ``redis.call`` counts too), minus INFO."""
        stats = self.admin.info("commandstats")
        counts = Counter({name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()})
        del counts["info"]
        return counts


@pytest.fixture(scope="module")
def stats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatsServer]:
    """A private server (its ``INFO commandstats`` are ours alone) holding one thread of
    ``BIG_THREAD`` checkpoints and one of ``SMALL_THREAD``, each checkpoint with two writes."""
    server = RedisServer(tmp_path_factory.mktemp("stats-redis"))
    server.start()
    try:
        chains: dict[str, list[RunnableConfig]] = {}
        with RedisSaver.from_conn_string(server.url(), key_prefix="stats") as saver:
            ops = Ops(saver, is_async=False)
            for name, n in (("big", BIG_THREAD), ("small", SMALL_THREAD)):
                chains[name] = asyncio.run(put_chain(ops, name, n))
        with server.admin() as admin:
            yield StatsServer(server, admin, chains)
    finally:
        server.stop()


async def test_no_keys_ever_and_scan_only_in_admin_paths(
    stats_server: StatsServer, flavour: str
) -> None:
    """``INFO commandstats`` of a private server over a user's workload: no ``KEYS`` and no
    ``SCAN``, neither from the client nor inside the scripts. Only the admin paths that must
    find every thread, ``list(None)`` and ``delete_for_runs``, ``SCAN`` (and never ``KEYS``)."""
    prefix = f"workload-{flavour}"
    async with open_ops(flavour, stats_server.server.url(), key_prefix=prefix) as ops:
        stats_server.reset()
        chain = await put_chain(ops, "w", 5)
        await put_chain(ops, "w", 2, ns="child:1")
        await ops.get_tuple(cfg("w"))
        await ops.get_tuple(chain[1])
        await ops.list(cfg("w"), limit=2)
        await ops.list(cfg("w"), before=chain[3])
        await ops.list({"configurable": {"thread_id": "w"}}, limit=3)
        await ops.delta_history(chain[-1], ["w0"])
        await ops.copy_thread("w", "w2")
        await ops.prune(["w2"])
        await ops.delete_thread("w2")
        user_paths = stats_server.calls()
        assert user_paths["evalsha"] > 0
        assert "keys" not in user_paths and "scan" not in user_paths, user_paths

        stats_server.reset()
        assert len(await ops.list(None)) == 7
        await ops.delete_for_runs(["run-1"])
        admin_paths = stats_server.calls()
        assert admin_paths["scan"] > 0 and "keys" not in admin_paths, admin_paths


ReadPath = Callable[[Ops, str, list[RunnableConfig]], Any]
READ_PATHS: dict[str, ReadPath] = {
    "get_tuple-latest": lambda ops, t, chain: ops.get_tuple(cfg(t)),
    "get_tuple-latest-no-ns": lambda ops, t, chain: ops.get_tuple(
        {"configurable": {"thread_id": t}}
    ),
    "get_tuple-by-id": lambda ops, t, chain: ops.get_tuple(chain[-3]),
    "list-ns-limit-5": lambda ops, t, chain: ops.list(cfg(t), limit=5),
    "list-ns-before-limit-5": lambda ops, t, chain: ops.list(cfg(t), before=chain[-2], limit=5),
    "list-thread-limit-5": lambda ops, t, chain: ops.list(
        {"configurable": {"thread_id": t}}, limit=5
    ),
}
WHOLE_COLLECTION_COMMANDS = {"zrange", "hgetall", "hkeys", "hvals", "keys", "scan", "zcard"}


@pytest.mark.parametrize("path", list(READ_PATHS))
async def test_latest_and_limited_reads_do_not_grow_with_the_thread(
    stats_server: StatsServer, flavour: str, path: str
) -> None:
    """The same read on a thread of 10 and one of 500 checkpoints runs exactly the same
    commands (by ``INFO commandstats``, which counts the commands scripts run), none of them a
    whole-collection read: the cost is O(log n + k), not a read of the thread."""
    read = READ_PATHS[path]
    async with open_ops(flavour, stats_server.server.url(), key_prefix="stats") as ops:
        await read(ops, "small", stats_server.chains["small"])  # scripts loaded, connected
        per_thread = {}
        for name in ("small", "big"):
            stats_server.reset()
            result = await read(ops, name, stats_server.chains[name])
            per_thread[name] = stats_server.calls()
            if isinstance(result, list):
                assert len(result) == 5
            else:
                assert result is not None
        small, big = per_thread["small"], per_thread["big"]
        assert not WHOLE_COLLECTION_COMMANDS & set(big), f"whole-collection reads: {big}"
        assert big == small, f"{SMALL_THREAD} checkpoints: {small}\n{BIG_THREAD}: {big}"


# --------------------------------------------------------------------------------------------
# Faults: a restarted server, very large values
# --------------------------------------------------------------------------------------------


class StepState(TypedDict, total=False):
    steps: list[str]


def three_step_graph(on_second: Callable[[], None]) -> StateGraph[Any]:
    def step(name: str, hook: Callable[[], None] | None = None) -> Any:
        def run(state: StepState) -> dict[str, Any]:
            if hook is not None:
                hook()
            return {"steps": [*state.get("steps", []), name]}

        return run

    builder = StateGraph(StepState)
    builder.add_node("one", step("one"))
    builder.add_node("two", step("two", on_second))
    builder.add_node("three", step("three"))
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", "three")
    builder.add_edge("three", END)
    return builder


async def test_redis_restarted_mid_run(
    start_redis: Callable[..., RedisServer], flavour: str
) -> None:
    """The server dies (``SHUTDOWN NOSAVE``) inside a graph run: the run fails with redis-py's
    ``ConnectionError``, so do calls while it is down; once it is back on the same port (empty,
    and without the saver's scripts loaded) the same saver works again, and every thread in
    it is whole."""
    server = start_redis()
    kill = {"armed": False}

    def maybe_kill() -> None:
        if kill["armed"]:
            kill["armed"] = False
            with server.admin() as admin, suppress(redis.ConnectionError):
                admin.shutdown(nosave=True)

    graph_builder = three_step_graph(maybe_kill)
    async with open_ops(flavour, server.url(3)) as ops:
        graph = graph_builder.compile(checkpointer=ops.saver)
        config: RunnableConfig = {"configurable": {"thread_id": "restart"}}
        assert (await ops.invoke(graph, {"steps": []}, config))["steps"] == ["one", "two", "three"]

        kill["armed"] = True
        with pytest.raises(redis.ConnectionError):
            await ops.invoke(graph, {"steps": []}, {"configurable": {"thread_id": "mid-run"}})
        assert server.process is not None
        server.process.wait(timeout=WAIT_SECONDS)
        with pytest.raises(redis.ConnectionError):
            await ops.get_tuple(cfg("restart"))

        server.start()
        assert await ops.get_tuple(cfg("restart")) is None  # NOSAVE: the data is gone
        out = await ops.invoke(graph, {"steps": []}, {"configurable": {"thread_id": "mid-run"}})
        assert out["steps"] == ["one", "two", "three"]
        await ops.invoke(graph, {"steps": []}, config)
        state = await ops.state(graph, config)
        assert state.values["steps"] == ["one", "two", "three"]
        assert len(await ops.list(None)) == 10  # 2 threads x (input, start, 3 steps)

        space = Space("single", server.url(3), "lgmp", server.admin(3))
        try:
            assert {space.tag_of("restart"), space.tag_of("mid-run")} == set(space.tags())
            await assert_consistent(space, ops)
        finally:
            space.admin.close()


async def test_a_30_mb_value_round_trips(space: Space, flavour: str) -> None:
    big_text = os.urandom(15_000_000).hex()  # 30 MB, incompressible
    big_bytes = os.urandom(2_000_000)
    async with space.open(flavour) as ops:
        stored = await ops.put(
            cfg("big"),
            make_checkpoint({"text": big_text, "small": "s"}, {"text": 1, "small": 1}),
            {"source": "loop", "step": 0, "parents": {}},
            {"text": 1, "small": 1},
        )
        await ops.put_writes(stored, [("bytes", big_bytes)], "task")
        tup = await ops.get_tuple(cfg("big"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["text"] == big_text
        assert tup.pending_writes == [("task", "bytes", big_bytes)]


async def test_a_value_over_the_limit_is_refused_naming_it_before_anything_is_written(
    space: Space, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values over ``RedisCheckpointPlans.max_value_bytes`` (500 MiB: Redis refuses bulk
    strings over 512 MiB) fail with ``ValueTooLargeError`` naming the limit, and nothing of the
    call is stored. The test lowers the class attribute to 64 KiB instead of allocating
    500 MiB; the check is the same."""
    limit = 64 * 1024
    monkeypatch.setattr(RedisCheckpointPlans, "max_value_bytes", limit)
    too_big = "x" * (limit + 1)
    async with space.open(flavour) as ops:
        with pytest.raises(ValueTooLargeError, match=f"at most {limit} bytes") as info:
            await ops.put(
                cfg("t"),
                make_checkpoint({"ok": "small", "huge": too_big}, {"ok": 1, "huge": 1}),
                {"source": "loop", "step": 0, "parents": {}},
                {"ok": 1, "huge": 1},
            )
        assert "channel 'huge'" in str(info.value) and info.value.limit == limit
        assert space.scan_keys() == set(), "a refused put wrote keys"

        [stored] = await put_chain(ops, "t", 1, writes=0)
        keys = {k: space.admin.type(k) for k in space.scan_keys()}
        fields = space.hlen(space.tag_of("t"), "ck")
        with pytest.raises(ValueTooLargeError, match=f"at most {limit} bytes"):
            await ops.put_writes(stored, [("fine", 1), ("huge", too_big)], "task")
        with pytest.raises(ValueTooLargeError, match=f"at most {limit} bytes"):
            await ops.put(
                stored,
                make_checkpoint({"a": "x"}, {"a": 2}),
                {"source": "loop", "step": 1, "parents": {}, "note": too_big},
                {"a": 2},
            )
        assert {k: space.admin.type(k) for k in space.scan_keys()} == keys
        assert space.hlen(space.tag_of("t"), "ck") == fields
        tup = await ops.get_tuple(cfg("t"))
        assert tup is not None and tup.pending_writes == []


async def test_writes_merged_over_the_limit_are_refused_and_the_stored_ones_kept(
    space: Space, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's second ``put_writes`` merges into its record inside the script (a write at
    an index the record already holds keeps its first value; one at a new index is
    added). A merged record over the limit is refused there, although each call alone
    fits, and the stored record stays as it was. The limit is lowered to 64 KiB, as
    above."""
    limit = 64 * 1024
    monkeypatch.setattr(RedisCheckpointPlans, "max_value_bytes", limit)
    # incompressible, each alone under the limit, together over it
    first, second = os.urandom(limit * 3 // 5), os.urandom(limit * 3 // 5)
    async with space.open(flavour) as ops:
        [stored] = await put_chain(ops, "t", 1, writes=0)
        await ops.put_writes(stored, [("first", first)], "task")
        with pytest.raises(ValueTooLargeError, match=f"at most {limit} bytes") as info:
            await ops.put_writes(stored, [("first", b"retried"), ("second", second)], "task")
        assert "task 'task'" in str(info.value) and info.value.size > limit
        await ops.put_writes(stored, [("first", b"retried"), ("third", 3)], "task")
        tup = await ops.get_tuple(stored)
        assert tup is not None
        assert tup.pending_writes == [("task", "first", first), ("task", "third", 3)]


# --------------------------------------------------------------------------------------------
# Drop-in behaviour: the same calls on InMemorySaver and on ours give the same answers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flt", EDGE_FILTERS)
async def test_list_filter_edge_cases_match_inmemory(
    space: Space, flavour: str, flt: dict[str, Any]
) -> None:
    """The FILTER script compares as InMemorySaver does (``True == 1 == 1.0``)."""
    async with space.open(flavour) as ours:
        mine, theirs = await filter_edge_case(ours, flt)
    assert mine == theirs and theirs, (mine, theirs)


async def test_same_answers_as_inmemory_saver_across_a_restart(space: Space, flavour: str) -> None:
    """The PostgreSQL saver's differential workload (puts, writes, forks, namespaces, NULs,
    int and str versions; get_tuple, list with filter/before/limit, delta history) agrees
    with InMemorySaver, also when a new saver instance reads what the first one wrote."""
    ref = reference()
    async with space.open(flavour) as ours:
        stored = await run_workload([ours, ref])
        mismatches = await compare_with_reference(ours, ref, stored)
    assert not mismatches, f"{len(mismatches)} differences:\n" + "\n".join(mismatches[:15])
    async with space.open(flavour) as reopened:
        mismatches = await compare_with_reference(reopened, ref, stored)
    assert not mismatches, "\n".join(mismatches[:10])


# --------------------------------------------------------------------------------------------
# list(filter=...) is evaluated in Redis
# --------------------------------------------------------------------------------------------

FILTER_THREAD = 2600  # past two FILTER calls' budget (1000 per namespace)


def _filter_metadata(i: int) -> dict[str, Any]:
    return {
        "source": "loop",
        "step": i,
        "parents": {},
        "tag": "hit" if i % 700 == 9 else "miss",
        "flag": i % 2 == 0,
        "nested": {"i": i % 3},
    }


async def test_filtered_list_reads_only_what_matches(
    start_redis: Callable[..., RedisServer],
) -> None:
    """``list(filter=...)`` of a long thread gives InMemorySaver's answers while Redis sends
    back little more than the matches (it read every checkpoint before: ~1 ms each)."""
    server = start_redis()
    ref = InMemorySaver()
    body = "x" * 1000
    async with open_ops("sync", server.url(), key_prefix="flt") as ops:  # one plan for both
        for ns, n in (("", FILTER_THREAD), ("child:1", 300)):
            parent: str | None = None
            for i in range(n):
                checkpoint = make_checkpoint({"a": f"{ns}{i}{body}"}, {"a": i + 1})
                for saver in (ops, Ops(ref, is_async=False)):
                    await saver.put(
                        cfg("f", ns, parent), checkpoint, _filter_metadata(i), {"a": i + 1}
                    )
                parent = checkpoint["id"]
        filters: list[dict[str, Any]] = [
            {"tag": "hit"},
            {"tag": "hit", "step": 709},
            {"step": 1409.0},
            {"step": True},
            {"flag": 1, "tag": "hit"},
            {"tag": "none-such"},
            {"tag": "hit", "other": None},
            {"nested": {"i": 0}, "tag": "hit"},
        ]
        configs: list[RunnableConfig] = [
            {"configurable": {"thread_id": "f"}},
            cfg("f"),
            cfg("f", "child:1"),
        ]
        with server.admin() as admin:
            for flt in filters:
                for config in configs:
                    # across namespaces newest first, as the unfiltered list (InMemorySaver
                    # goes namespace by namespace)
                    every = sorted(
                        (t.config for t in ref.list(config, filter=flt)),
                        key=lambda c: c["configurable"]["checkpoint_id"],
                        reverse=True,
                    )
                    for limit in (None, 1, 2):
                        got = [t.config for t in await ops.list(config, filter=flt, limit=limit)]
                        assert got == every[:limit], (flt, config, limit)
            hits = ref.list(cfg("f"), filter={"tag": "hit"})
            before = [t.config for t in hits][1]
            expected = [t.config for t in ref.list(cfg("f"), filter={"tag": "hit"}, before=before)]
            got = await ops.list(cfg("f"), filter={"tag": "hit"}, before=before)
            assert [t.config for t in got] == expected
            sent = admin.info("stats")["total_net_output_bytes"]
            found = await ops.list({"configurable": {"thread_id": "f"}}, filter={"tag": "hit"})
            sent = admin.info("stats")["total_net_output_bytes"] - sent
        assert len(found) == 5
        # the matches' bodies and a few replies' worth, not the whole thread's
        assert sent < 20 * len(body) * len(found), sent


@pytest.mark.parametrize("protocol", [2, 3])
async def test_async_exchange_drops_a_connection_whose_reply_came_late(
    redis_url: str, protocol: int
) -> None:
    """The async runner's exchange runs under one socket timeout, not redis-py's per
    write and per reply, on RESP2 and RESP3 alike: a reply that does not come in time
    ends the call as redis-py's path does (``TimeoutError``, after the client's retries)
    and drops the connection, so the late reply is never read as the next call's."""
    client = async_client_from_url(
        redis_url, protocol=protocol, socket_timeout=0.3, pool_max_size=1
    )
    key = f"lgmp-test-late-{uuid.uuid4().hex}".encode()
    try:
        wire = _AsyncWire(client)
        conn = await client.connection_pool.get_connection()
        assert _plain(conn)  # the path under test
        await client.connection_pool.release(conn)
        with pytest.raises(redis.TimeoutError):
            await wire.send([("BLPOP", key, 1)])
        # on a connection kept, this would read the BLPOP's late empty reply
        assert await wire.send([("ECHO", b"next"), ("EXISTS", key)]) == [b"next", 0]
    finally:
        await client.aclose()
