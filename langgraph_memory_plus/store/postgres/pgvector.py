"""pgvector for the PostgreSQL store: finding it, installing it, and the SQL that uses it.

Embeddings are always written to ``lgmp_store_vectors.embedding`` (``float8[]``), the
column every server can read: the exact path scores it in SQL arithmetic, and a schema
moves between servers, package versions and ``vector_backend`` settings without a
conversion. Where pgvector is in use, ``setup()`` adds beside it::

    vec vector GENERATED ALWAYS AS (embedding::vector) STORED

PostgreSQL itself fills it for the rows already there (the ``ALTER TABLE`` rewrites the
table once, holding its lock meanwhile) and for every row written later, by any writer (an
older version of this package, a store with ``vector_backend="exact"``), so it is never
missing or stale and no backfill of ours can be interrupted halfway. The price: a vector
is stored twice (single precision beside double: half as much again), and once the column
exists an embedding must fit in single precision (pgvector refuses the write otherwise).

Searches then score with pgvector's ``<=>`` in C, over the same candidates and with the
same ranking rules as the exact path. pgvector computes in single precision, so scores
may differ from the exact path's around the seventh digit. The column's type has no
dimension count (a schema's stores may differ in ``dims``; as on the exact path, a search
must not span vectors of different ``dims``); the optional HNSW index is per dimension
count (see :meth:`PgVector.indexed`).

Everything here is conditional and outside the versioned migrations, which must still
run on servers without pgvector. ``CREATE EXTENSION`` runs inside a PL/pgSQL block that
catches its failure (not allowed to, say: pgvector is not a trusted extension), so a
refusal leaves the ``setup()`` transaction usable, in pipeline mode too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...drivers.migrations import run_locked
from ...drivers.plan import Plan
from ...drivers.postgres import Query, Rows
from ...errors import InvalidConfigError

VectorBackend = Literal["auto", "pgvector", "exact"]
VECTOR_BACKENDS: tuple[VectorBackend, ...] = ("auto", "pgvector", "exact")

# pgvector's HNSW indexes the ``vector`` type up to this many dimensions.
HNSW_MAX_DIMS = 2000
# ``hnsw.ef_search`` bounds: pgvector's default, and the most it accepts.
HNSW_EF_SEARCH = 40
HNSW_MAX_EF_SEARCH = 1000

# Where the PL/pgSQL block leaves the reason CREATE EXTENSION failed (transaction-local).
_ERROR_SETTING = "lgmp.pgvector_error"

_CREATE = f"""
DO $lgmp$
BEGIN
    CREATE EXTENSION IF NOT EXISTS vector;
EXCEPTION WHEN OTHERS THEN
    PERFORM set_config('{_ERROR_SETTING}', SQLERRM, true);
END
$lgmp$"""


def read_vector_backend(value: object) -> VectorBackend:
    """``value`` checked as a ``vector_backend`` option."""
    for backend in VECTOR_BACKENDS:
        if value == backend and isinstance(value, str):
            return backend
    raise InvalidConfigError(
        f"vector_backend must be one of {', '.join(map(repr, VECTOR_BACKENDS))}, got {value!r}"
    )


def _quote(name: str) -> str:
    """An identifier as SQL text (the extension's schema may need quoting)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class PgVector:
    """pgvector as installed in one database.

    Its type, operator and operator class are written with their schema, so the SQL works
    whatever the connection's ``search_path``.
    """

    schema: str
    """The quoted schema holding the extension's objects."""
    version: str

    def type(self, dims: int | None = None) -> str:
        return f"{self.schema}.vector" + ("" if dims is None else f"({int(dims)})")

    def distance(self, a: str, b: str) -> str:
        """Cosine distance (``1 - cosine``; NaN when either vector is zero)."""
        return f"({a} OPERATOR({self.schema}.<=>) {b})"

    def add_column(self, table: str) -> Query:
        """The generated ``vec`` column beside ``embedding`` (a no-op once it exists)."""
        return Query(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS vec {self.type()} "
            f"GENERATED ALWAYS AS (embedding::{self.type()}) STORED"
        )

    def indexed(self, column: str, dims: int) -> str:
        """What the HNSW index for ``dims`` holds: ``column`` as ``vector(dims)``, NULL
        (not indexed) for other dimension counts. A query orders by this very expression
        to use the index.

        Not a partial index (``WHERE vector_dims(vec) = dims``): the planner cannot
        estimate that predicate and then prefers a sequential scan on tables of thousands.
        """
        n = int(dims)
        match = f"{self.schema}.vector_dims({column}) = {n}"
        return f"(CASE WHEN {match} THEN {column} END)::{self.type(n)}"

    def hnsw_index(self, quoted_schema: str, dims: int) -> Plan[Query, None]:
        """An HNSW index (cosine) on the vectors with ``dims`` dimensions, if missing.

        Looked up first: ``CREATE INDEX IF NOT EXISTS`` would still want to own the table.
        """
        name = f"lgmp_store_vectors_hnsw_{int(dims)}"
        rows: Rows = yield Query(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{quoted_schema}.{name}",), fetch=True
        )
        if rows[0][0]:
            return
        yield from run_locked(
            quoted_schema,
            [
                f"CREATE INDEX IF NOT EXISTS {name} ON {quoted_schema}.lgmp_store_vectors "
                f"USING hnsw (({self.indexed('vec', dims)}) {self.schema}.vector_cosine_ops)"
            ],
        )


def find(table: str) -> Plan[Query, tuple[PgVector | None, bool]]:
    """pgvector if this database has it, and whether ``table`` (quoted) has the column."""
    rows: Rows = yield Query(
        """
        SELECT n.nspname, e.extversion, EXISTS (
            SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = to_regclass(%s) AND a.attname = 'vec' AND NOT a.attisdropped)
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'vector'""",
        (table,),
        fetch=True,
    )
    if not rows:
        return None, False
    schema, version, ready = rows[0]
    return PgVector(_quote(schema), version), bool(ready)


def install() -> Plan[Query, str | None]:
    """Try ``CREATE EXTENSION vector``; ``None`` if it is there now, else the reason."""
    rows: Rows = yield Query(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'", fetch=True
    )
    if not rows:
        return "the server has no pgvector to install (pg_available_extensions lists no 'vector')"
    yield Query(_CREATE)
    rows = yield Query("SELECT current_setting(%s, true)", (_ERROR_SETTING,), fetch=True)
    error: str | None = rows[0][0]
    return f"CREATE EXTENSION vector failed: {error}" if error else None
