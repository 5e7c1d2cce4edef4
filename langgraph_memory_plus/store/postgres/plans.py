"""The PostgreSQL store's operations as plans: SQL to send, rows to decode.

Nothing here touches a connection; :mod:`.store` runs these plans with a blocking or an
async cursor, each plan inside the batch's one transaction. Every statement is
parameterized; the only text put into SQL is the schema name (checked by
:func:`.schema.quote_schema`), pgvector's schema as the catalog names it (quoted), constants
of this module and of :mod:`.pgvector`, and integers we computed.

Filters are compiled to SQL that answers, per row, TRUE (matches), FALSE (does not) or
NULL (SQL cannot tell: a numeric comparison with a string like ``"1_000"`` that only
Python's ``float()`` reads). When a filter can never answer NULL, ``LIMIT``/``OFFSET`` run
in SQL. Otherwise the rows that are not FALSE stream through a server-side cursor, Python
decides the NULL ones with :func:`..filters.holds`, and reading stops as soon as the page
is full, so the cost is the page plus the rows skipped, never the whole table.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from ...drivers.migrations import (
    SchemaVersion,
    advisory_lock_id,
    migrate,
    recorded_version,
    run_locked,
)
from ...drivers.plan import Plan
from ...drivers.postgres import Query, Rows
from ...errors import InvalidConfigError
from ..base import (
    GetRequest,
    ListRequest,
    Namespace,
    SearchRequest,
    WriteRequest,
    conflict_error,
)
from ..columns import INSERTED, READ, replace_existing
from ..filters import Compare, CompareTime, Cond, Elements, Equals, Fields, NotEquals, holds
from ..namespaces import namespace_of, prefix_text
from ..tokens import filter_tokens
from ..tombstones import ancestor_hashes, tombstone_hash
from ..values import (
    VersionedItem,
    VersionedSearchItem,
    decode_value,
    encode_json,
    escape_text,
    unescape_text,
)
from ..vectors import Vector, norm
from .pgvector import (
    HNSW_EF_SEARCH,
    HNSW_MAX_DIMS,
    HNSW_MAX_EF_SEARCH,
    PgVector,
    VectorBackend,
    find,
    install,
    read_vector_backend,
)
from .schema import FRESH, MIGRATIONS, VECTORS, quote_schema

# jsonb refuses containers over 256 MiB in its binary form, which can be larger than the
# JSON text; a statement must stay under 1 GiB.
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_BATCH_BYTES = 512 * 1024 * 1024
# A btree entry (the primary key) must fit in a third of a page; escaping can double NULs.
MAX_KEY_BYTES = 1200

CURSOR = "lgmp_store_search"
# SQL's LIMIT/OFFSET are bigint and array bounds int: larger requests mean "all" anyway.
MAX_COUNT = 2**62
MAX_DEPTH = 2**31 - 1
MAX_PAGE = 1000
# Seconds before a store that found no pgvector (vector_backend="auto") looks again.
RECHECK_SECONDS = 60.0

logger = logging.getLogger(__name__)

LIVE = "(s.expires_at IS NULL OR s.expires_at > now())"
# The one order in which writes lock rows (byte order: Python's order of the same text),
# so that two batches over the same keys never wait for each other in a cycle.
LOCK_ORDER = "s.prefix, s.key"  # the columns are COLLATE "C"

_SQL_OPS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_WS = r"[ \t\n\v\f\r]*"
_MANTISSA = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)"
# A decimal literal SQL converts exactly as Python's float() does (bounded so the numeric
# cast cannot overflow), and the looser forms that Python may accept but SQL leaves to it.
_PLAIN = f"^{_WS}{_MANTISSA}([eE][+-]?[0-9]{{1,4}})?{_WS}$"
_LOOSE = f"^{_WS}{_MANTISSA}([eE][+-]?[0-9]+)?{_WS}$"


def _item(row: tuple[Any, ...]) -> VersionedItem:
    prefix, key, value, escaped, version, created, updated, _ttl = row[:8]
    return VersionedItem(
        value=decode_value(value, escaped),
        key=unescape_text(key),
        namespace=namespace_of(prefix),
        created_at=created,
        updated_at=updated,
        version=version,
    )


def _search_item(row: tuple[Any, ...], value: Any) -> VersionedSearchItem:
    prefix, key, _value, _escaped, version, created, updated, _ttl, score = row[:9]
    return VersionedSearchItem(
        namespace_of(prefix),
        unescape_text(key),
        value,
        created,
        updated,
        None if score is None else float(score),
        version=version,
    )


def _at(request: WriteRequest) -> tuple[str, str]:
    """A write's row address, as the table keeps it."""
    return prefix_text(request.namespace), escape_text(request.key)


def _ambiguous(operand: Any) -> bool:
    """Whether jsonb ``=`` could disagree with Python ``==`` (``True == 1`` inside)."""
    if isinstance(operand, bool):
        return True
    if isinstance(operand, (int, float)):
        return operand in (0, 1)
    if isinstance(operand, list):
        return any(_ambiguous(x) for x in operand)
    if isinstance(operand, dict):
        return any(_ambiguous(x) for x in operand.values())
    return False


class _Sql:
    """Builds one statement's SQL text and its named parameters together."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def add(self, value: Any, cast: str) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"%({name})s::{cast}"

    def json(self, operand: Any) -> str:
        return self.add(encode_json(operand, escape=True), "jsonb")

    def scope(self, prefix: Namespace) -> str:
        """Items in ``prefix`` or below it, as a range on the primary key."""
        if not prefix:
            return "true"
        text = prefix_text(prefix)
        exact, low, high = (
            self.add(text, "text"),
            self.add(text + ".", "text"),
            self.add(text + "/", "text"),
        )
        return f"(s.prefix = {exact} OR (s.prefix >= {low} AND s.prefix < {high}))"

    def contains(self, cond: Fields | None) -> str:
        """``AND value @> {...}`` of the filter's string equalities, which the value index
        answers (a necessary condition: the verdict still decides); '' for none."""
        nested: dict[str, Any] = {}
        for path, text in filter_tokens(cond, str):
            *parents, last = path.split(".")
            at = nested
            for key in parents:
                at = at.setdefault(key, {})
                if not isinstance(at, dict):
                    return ""  # a string and a dict at one path: the verdict says no
            if at.setdefault(last, text) != text:
                return ""
        return f"AND s.value @> {self.json(nested)}" if nested else ""

    # -- filters ------------------------------------------------------------------------

    def cond(self, cond: Cond, v: str) -> tuple[str, bool]:
        """SQL for ``cond`` on the jsonb expression ``v`` (NULL when the field is missing),
        and whether it is exact (never NULL)."""
        if isinstance(cond, Equals):
            return self.equals(cond.operand, v), True
        if isinstance(cond, NotEquals):
            return f"(NOT {self.equals(cond.operand, v)})", True
        if isinstance(cond, Compare):
            return self.compare(cond, v), False
        if isinstance(cond, CompareTime):
            # Only strings that start like a date can match; Python reads those (SQL's
            # timestamp parser differs: session time zone, other formats).
            s = f"({v} #>> '{{}}')"
            return (
                f"(CASE WHEN jsonb_typeof({v}) = 'string' AND {s} ~ '^[0-9]{{4}}-[0-9]{{2}}-' "
                "THEN NULL ELSE false END)"
            ), False
        if isinstance(cond, Fields):
            parts = [
                self.cond(sub, f"({v} -> {self.add(escape_text(k), 'text')})")
                for k, sub in cond.fields
            ]
            body, exact = _all(parts)
            if cond.nested:
                body = f"CASE WHEN jsonb_typeof({v}) = 'object' THEN {body} ELSE false END"
            return f"({body})", exact
        if isinstance(cond, Elements):
            body, exact = _all(self.cond(sub, f"({v} -> {i})") for i, sub in enumerate(cond.items))
            return self.array(v, len(cond.items), body), exact
        body, exact = _all(self.cond(sub, v) for sub in cond.conds)
        return f"({body})", exact

    @staticmethod
    def array(v: str, length: int, body: str) -> str:
        return (
            f"(CASE WHEN jsonb_typeof({v}) = 'array' THEN CASE WHEN jsonb_array_length({v}) "
            f"= {int(length)} THEN {body} ELSE false END ELSE false END)"
        )

    def equals(self, operand: Any, v: str) -> str:
        """Python ``==``, exactly: ``None`` also matches a missing field, ``True == 1``."""
        if operand is None:
            return f"({v} IS NULL OR {v} = 'null'::jsonb)"
        if isinstance(operand, bool):
            alike = "'true'::jsonb, '1'::jsonb" if operand else "'false'::jsonb, '0'::jsonb"
            return f"coalesce({v} IN ({alike}), false)"
        if isinstance(operand, (int, float)) and operand in (0, 1):
            alike = "'true'::jsonb" if operand == 1 else "'false'::jsonb"
            return f"coalesce({v} IN ({self.json(operand)}, {alike}), false)"
        if not _ambiguous(operand):
            return f"coalesce({v} = {self.json(operand)}, false)"
        if isinstance(operand, list):
            body, _ = _all((self.equals(x, f"({v} -> {i})"), True) for i, x in enumerate(operand))
            return self.array(v, len(operand), body)
        keys = [escape_text(k) for k in operand]
        body, _ = _all(
            (self.equals(x, f"({v} -> {self.add(k, 'text')})"), True)
            for k, x in zip(keys, operand.values(), strict=True)
        )
        return (
            f"(CASE WHEN jsonb_typeof({v}) = 'object' THEN CASE WHEN (SELECT count(*) FROM "
            f"jsonb_object_keys({v})) = {len(keys)} THEN {body} ELSE false END ELSE false END)"
        )

    def compare(self, cond: Compare, v: str) -> str:
        """Numbers as numbers, in double precision like ``float()``; NULL when SQL can't
        read a string the way Python would."""
        if math.isnan(cond.number):
            return "false"
        op, x = _SQL_OPS[cond.op], self.add(cond.number, "float8")
        s = f"({v} #>> '{{}}')"
        n = f"({s})::numeric"
        string = (
            f"CASE WHEN length({s}) <= 400 AND {s} ~ '{_PLAIN}' THEN "
            f"CASE WHEN {n} = 0 OR abs({n}) BETWEEN 1e-307 AND 1e308 THEN {n}::float8 {op} {x} END "
            f"WHEN {s} ~ '{_LOOSE}' OR {s} ~* '_|inf|nan' OR octet_length({s}) <> length({s}) "
            "THEN NULL ELSE false END"
        )
        return (
            f"(CASE jsonb_typeof({v}) "
            f"WHEN 'number' THEN CASE WHEN abs(({v})::numeric) <= 1e308 "
            f"THEN ({v})::float8 {op} {x} END "
            f"WHEN 'boolean' THEN (CASE WHEN {v} = 'true'::jsonb THEN 1.0 ELSE 0.0 END)::float8 "
            f"{op} {x} "
            f"WHEN 'string' THEN {string} "
            "ELSE false END)"
        )


def _all(parts: Iterable[tuple[str, bool]]) -> tuple[str, bool]:
    items = list(parts)
    if not items:
        return "true", True
    return " AND ".join(sql for sql, _ in items), all(exact for _, exact in items)


class PostgresStorePlans:
    """SQL and decoding for one schema.

    ``vector_backend`` says how a search with a query is scored: ``"exact"`` in SQL
    arithmetic over ``float8[]``; ``"pgvector"`` with pgvector (an error where it cannot
    be); ``"auto"`` with pgvector where this schema is set up for it, else exactly. Either
    way the candidates and the ranking rules are the same (see :mod:`.pgvector`).
    ``hnsw`` (pgvector only) adds an approximate path for searches with a query and
    neither a namespace prefix nor a filter: see :meth:`_nearest`.
    """

    max_value_bytes = MAX_VALUE_BYTES
    max_batch_bytes = MAX_BATCH_BYTES
    max_key_bytes = MAX_KEY_BYTES
    escape_strings = True

    def __init__(
        self,
        schema: str,
        *,
        dims: int | None = None,
        vector_backend: VectorBackend = "auto",
        hnsw: bool = False,
    ) -> None:
        self._s = quote_schema(schema)
        self.schema = schema
        self.version = SchemaVersion(self._s, "lgmp_store_migrations", MIGRATIONS)
        self._t = f"{self._s}.lgmp_store"
        self._v = f"{self._s}.lgmp_store_vectors"
        self._tombs = f"{self._s}.lgmp_store_tombstones"
        self._next_version = f"nextval('{self._s}.lgmp_store_version_seq')"
        self.vector_backend = read_vector_backend(vector_backend)
        if not isinstance(hnsw, bool):
            raise InvalidConfigError(f"hnsw must be True or False, got {hnsw!r}")
        if hnsw and (dims is None or self.vector_backend == "exact" or dims > HNSW_MAX_DIMS):
            raise InvalidConfigError(
                "hnsw=True needs index={'dims': ...} of at most "
                f"{HNSW_MAX_DIMS} dimensions and pgvector (vector_backend 'auto' or "
                f"'pgvector'); got dims={dims!r}, vector_backend={self.vector_backend!r}"
            )
        self.dims = dims
        self.hnsw = hnsw
        # What the database offers, found on first use and again after every setup():
        # the catalog is read once per store, not once per search. "Not there" is read
        # again after a while, so a process notices another one's setup() for pgvector.
        self._pgvector: PgVector | None = None
        self._known = False
        self._checked_at = 0.0

    # -- setup --------------------------------------------------------------------------

    def setup(self) -> Plan[Query, None]:
        return self.version.migrating(self._setup())

    def _setup(self) -> Plan[Query, None]:
        # Up to date: reads only, no DDL and no lock beyond ACCESS SHARE (see .._migrations).
        recorded = yield from recorded_version(self._s, "lgmp_store_migrations")
        behind = recorded is None or recorded < self.version.latest  # newer: a newer release's
        if behind or (yield from self._missing_vectors()):
            lock = advisory_lock_id("store", self.schema)
            vectors = [VECTORS.format(s=self._s)] if self.dims is not None else []
            fresh = [*(statement.format(s=self._s) for statement in FRESH), *vectors]
            yield from migrate(
                self._s, "lgmp_store_migrations", lock, MIGRATIONS, fresh, self._missing_vectors
            )
        self._known = False
        # A store with no index embeds nothing: pgvector is set up by one that has one
        # (probing for it reads the server's extension files, a third of a fresh setup).
        if self.vector_backend == "exact" or (self.dims is None and self.vector_backend == "auto"):
            return
        found, ready = yield from find(self._v)
        if found is None:
            why = yield from install()
            if why is None:
                found, ready = yield from find(self._v)
            if found is None:
                if self.vector_backend == "pgvector":
                    raise InvalidConfigError(
                        f"vector_backend='pgvector', but pgvector cannot be used: {why}. "
                        "Install pgvector on the server (as a superuser: CREATE EXTENSION "
                        "vector), or use vector_backend='auto' to score exactly without it"
                    )
                logger.info("store schema %r scores searches exactly: %s", self.schema, why)
                return
        if not ready:  # checked first: ALTER TABLE wants to own the table even for a no-op
            yield from run_locked(self._s, [found.add_column(self._v).sql])
        if self.hnsw:
            assert self.dims is not None
            yield from found.hnsw_index(self._s, self.dims)
        self._known = False  # a search that ran meanwhile may have seen the old state

    def _missing_vectors(self) -> Plan[Query, list[str]]:
        """The vectors table, if this store has an index and the database was set up by
        stores without one (the table is created only when needed, see ``FRESH``)."""
        if self.dims is None:
            return []
        rows: Rows = yield Query("SELECT to_regclass(%s) IS NOT NULL", (self._v,), fetch=True)
        return [] if rows[0][0] else [VECTORS.format(s=self._s)]

    def _vectors(self) -> Plan[Query, PgVector | None]:
        """pgvector, if searches use it (see the class docstring); ``None`` for exact."""
        if self.vector_backend == "exact":
            return None
        if self._known and (
            self._pgvector is not None or time.monotonic() - self._checked_at < RECHECK_SECONDS
        ):
            return self._pgvector
        found, ready = yield from find(self._v)
        if found is None or not ready:
            if self.vector_backend == "pgvector":
                raise InvalidConfigError(
                    "vector_backend='pgvector', but "
                    + (
                        "this database has no pgvector extension"
                        if found is None
                        else f"schema {self.schema!r} is not set up for pgvector"
                    )
                    + ": run setup() (it installs pgvector where the server has it)"
                )
            found = None
        self._pgvector, self._known, self._checked_at = found, True, time.monotonic()
        return found

    # -- reads --------------------------------------------------------------------------

    def get(self, requests: list[GetRequest]) -> Plan[Query, list[VersionedItem | None]]:
        prefixes = [prefix_text(r.namespace) for r in requests]
        keys = [escape_text(r.key) for r in requests]
        rows: Rows = yield Query(
            f"""
            WITH req AS (
                SELECT * FROM unnest(%(p)s::text[], %(k)s::text[], %(r)s::boolean[])
                    AS r(prefix, key, refresh)
            ), refreshed AS ({self._touch("(SELECT prefix, key FROM req WHERE refresh) r")})
            SELECT {READ} FROM {self._t} s
            WHERE (s.prefix, s.key) IN (SELECT prefix, key FROM req) AND {LIVE}""",
            {"p": prefixes, "k": keys, "r": [r.refresh for r in requests]},
            fetch=True,
            standalone=True,
        )
        found = {(row[0], row[1]): _item(row) for row in rows}
        return [found.get(address) for address in zip(prefixes, keys, strict=True)]

    def _touch(self, found: str) -> str:
        """An UPDATE moving the expiry of the live rows at the addresses ``found`` (a FROM
        item ``r(prefix, key)``), as reads with ``refresh_on_read`` do.

        It takes the row locks in key order and skips rows another transaction holds:
        concurrent reads (a search, a batch get) then never wait for each other, so they
        cannot deadlock, and the holder is writing or deleting the row anyway, which sets
        its expiry or makes it moot. A refresh is best effort, never worth a wait.
        """
        return f"""
            UPDATE {self._t} s SET expires_at = now() + s.ttl_minutes * interval '1 minute'
            FROM (
                SELECT s.prefix, s.key FROM {self._t} s
                JOIN {found} ON s.prefix = r.prefix AND s.key = r.key
                WHERE s.ttl_minutes IS NOT NULL AND {LIVE}
                ORDER BY s.prefix, s.key FOR UPDATE OF s SKIP LOCKED
            ) k
            WHERE s.prefix = k.prefix AND s.key = k.key"""

    def _refresh(self, rows: list[tuple[Any, ...]]) -> Query:
        return Query(
            self._touch("unnest(%s::text[], %s::text[]) AS r(prefix, key)"),
            ([row[0] for row in rows], [row[1] for row in rows]),
        )

    def search(self, request: SearchRequest) -> Plan[Query, list[VersionedSearchItem]]:
        if request.limit == 0:
            return []
        pgvector = None
        if request.query is not None:
            pgvector = yield from self._vectors()
            if pgvector is not None and self.hnsw and request.filter is None and not request.prefix:
                nearest = yield from self._nearest(request, request.query, pgvector)
                if nearest is not None:
                    return nearest
        sql = _Sql()
        verdict, exact = ("true", True)
        if request.filter is not None:
            verdict, exact = sql.cond(request.filter, "s.value")
        if request.query is None:
            score, order = "NULL::float8", "s.version DESC"
        else:
            score = (
                self._score(sql, request.query)
                if pgvector is None
                else self._pgvector_score(sql, request.query, pgvector)
            )
            order = "score DESC NULLS LAST, s.version DESC"
        select = f"""
            SELECT {READ}, {score} AS score, {verdict} AS verdict FROM {self._t} s
            WHERE {LIVE} AND {sql.scope(request.prefix)} AND ({verdict}) IS NOT FALSE
            {sql.contains(request.filter)} ORDER BY {order}"""
        if exact:
            page: Rows = yield Query(
                f"{select} LIMIT {min(request.limit, MAX_COUNT)} "
                f"OFFSET {min(request.offset, MAX_COUNT)}",
                sql.params,
                fetch=True,
            )
            items = [_search_item(row, decode_value(row[2], row[3])) for row in page]
        else:
            assert request.filter is not None
            page, items = yield from self._scan(select, sql.params, request)
        if request.refresh and any(row[7] is not None for row in page):
            yield self._refresh(page)
        return items

    def _scan(
        self, select: str, params: dict[str, Any], request: SearchRequest
    ) -> Plan[Query, tuple[Rows, list[VersionedSearchItem]]]:
        """Stream candidates through a cursor, deciding undecided rows in Python."""
        assert request.filter is not None
        yield Query(f"DECLARE {CURSOR} NO SCROLL CURSOR FOR {select}", params)
        size = min(MAX_PAGE, request.offset + request.limit)
        skipped, page, items = 0, [], list[VersionedSearchItem]()
        while len(items) < request.limit:
            rows: Rows = yield Query(f"FETCH {int(size)} FROM {CURSOR}", fetch=True)
            for row in rows:
                value = decode_value(row[2], row[3])
                if row[9] is None and not holds(request.filter, value):
                    continue
                if skipped < request.offset:
                    skipped += 1
                    continue
                page.append(row)
                items.append(_search_item(row, value))
                if len(items) == request.limit:
                    break
            if len(rows) < size:
                break
        yield Query(f"CLOSE {CURSOR}")
        return page, items

    def _score(self, sql: _Sql, query: list[float]) -> str:
        """Best cosine similarity among the item's vectors; NULL for an item without any."""
        q, qn = sql.add(query, "float8[]"), sql.add(norm(query), "float8")
        return f"""(SELECT max(CASE WHEN v.norm > 0 AND {qn} > 0 THEN
                (SELECT sum(e * f) FROM unnest(v.embedding, {q}) AS t(e, f)) / (v.norm * {qn})
                ELSE 0 END)
            FROM {self._v} v WHERE v.prefix = s.prefix AND v.key = s.key)"""

    @staticmethod
    def _query_vector(sql: _Sql, query: Vector, pgvector: PgVector) -> str:
        """The query as a pgvector value, converted once per statement (a sub-select)."""
        return f"(SELECT {sql.add(query, 'float8[]')}::{pgvector.type()})"

    def _pgvector_score(self, sql: _Sql, query: Vector, pgvector: PgVector) -> str:
        """:meth:`_score` with pgvector: the best ``1 - <=>`` among the item's vectors.

        ``<=>`` is NaN when either vector is zero, which scores 0 as in the exact path.
        """
        distance = pgvector.distance("v.vec", self._query_vector(sql, query, pgvector))
        return f"""(SELECT max(coalesce(nullif(1 - {distance}, 'NaN'::float8), 0))
            FROM {self._v} v WHERE v.prefix = s.prefix AND v.key = s.key)"""

    def _nearest(
        self, request: SearchRequest, query: Vector, pgvector: PgVector
    ) -> Plan[Query, list[VersionedSearchItem] | None]:
        """The page from the HNSW index, or ``None`` when only an exact search can tell.

        The index yields the vectors nearest the query (approximately: it may miss some);
        the page is answered from them only if they hold ``offset + limit`` live items,
        all scoring above zero. Otherwise (few items, a deep page, items whose vectors are
        all zero, or without vectors, which rank by other rules) the caller scores
        exactly, in the same transaction.
        """
        wanted = request.offset + request.limit
        fetch = max(HNSW_EF_SEARCH, 2 * wanted)  # vectors: an item may have several
        if fetch > HNSW_MAX_EF_SEARCH:
            return None
        dims = len(query)
        sql = _Sql()
        q = self._query_vector(sql, query, pgvector)
        yield Query("SELECT set_config('hnsw.ef_search', %s, true)", (str(fetch),))
        rows: Rows = yield Query(
            f"""
            SELECT {READ}, 1 - nn.d AS score, true AS verdict FROM (
                SELECT v.prefix, v.key, {pgvector.distance(pgvector.indexed("v.vec", dims), q)} AS d
                FROM {self._v} v ORDER BY d LIMIT {fetch}
            ) nn JOIN {self._t} s ON s.prefix = nn.prefix AND s.key = nn.key
            WHERE {LIVE}
            ORDER BY nn.d, s.version DESC""",
            sql.params,
            fetch=True,
        )
        seen: set[tuple[str, str]] = set()
        found: Rows = []
        for row in rows:
            if (row[0], row[1]) in seen:
                continue  # the item's best vector came first
            if row[8] is None or not row[8] > 0:  # other dims, zero, NaN or not positive:
                break  # the exact ranking rules apply from here
            seen.add((row[0], row[1]))
            found.append(row)
        if len(found) < wanted:
            return None
        page = found[request.offset : wanted]
        if request.refresh and any(row[7] is not None for row in page):
            yield self._refresh(page)
        return [_search_item(row, decode_value(row[2], row[3])) for row in page]

    def list_namespaces(self, request: ListRequest) -> Plan[Query, list[Namespace]]:
        sql = _Sql()
        # The longest literal head of a prefix condition is a range on the primary key, which
        # guarantees those labels: the label tests below leave them out.
        head = max((c.literal_head for c in request.conditions), key=len, default=())
        wheres = ["true"]
        for condition in request.conditions:
            k = len(condition.labels)
            if k > len(head):
                wheres.append(f"cardinality(a) >= {k}")
            for i, label in enumerate(condition.labels):
                if label is None or (not condition.suffix and i < len(head) and head[i] == label):
                    continue
                at = f"cardinality(a) - {k - 1 - i}" if condition.suffix else str(i + 1)
                wheres.append(f"a[{at}] = {sql.add(escape_text(label), 'text')}")
        depth = request.max_depth
        # Distinct prefixes split into distinct label arrays; only cutting them short repeats.
        ns = "a" if depth is None else f"DISTINCT (a[1:{min(depth, MAX_DEPTH)}])"
        rows: Rows = yield Query(
            f"""
            SELECT {ns} COLLATE "C" AS ns FROM (
                -- split each distinct namespace once, not each item's copy of it: OFFSET 0
                -- keeps the planner from moving the label tests into the scan of items
                SELECT string_to_array(p.prefix, '.') AS a FROM (
                    SELECT DISTINCT s.prefix FROM {self._t} s
                    WHERE {LIVE} AND {sql.scope(head)} OFFSET 0
                ) p
            ) n
            WHERE {" AND ".join(wheres)}
            ORDER BY ns
            LIMIT {min(request.limit, MAX_COUNT)} OFFSET {min(request.offset, MAX_COUNT)}""",
            sql.params,
            fetch=True,
        )
        return [tuple(unescape_text(label) for label in row[0]) for row in rows]

    def count(self, prefix: Namespace) -> Plan[Query, int]:
        sql = _Sql()
        rows: Rows = yield Query(
            f"SELECT count(*) FROM {self._t} s WHERE {LIVE} AND {sql.scope(prefix)}",
            sql.params,
            fetch=True,
        )
        return int(rows[0][0])

    # -- writes -------------------------------------------------------------------------

    def _insert(
        self, requests: list[WriteRequest], on_conflict: str, *, fetch: bool, standalone: bool
    ) -> Query:
        """Insert the items, settling each that exists by ``on_conflict``, except those a
        live tombstone covers: the check is part of the statement, and a tombstone placed
        meanwhile waits for this transaction (:meth:`tombstone`), so none slips through.

        One item (every ``put``) goes as scalar parameters: psycopg sends a list as an array
        literal, quoting the JSON value in it with a regex, and the server parses the
        literal back, which made a put about 45 µs (a fifth) slower. Several items go as
        arrays, so the statement's text, and so its prepared statement, is the same for
        any number of items; they are inserted in the order given (sorted by the caller),
        each locking its row, or the row's new index entry, as it goes.
        """
        columns: dict[str, tuple[str, list[Any]]] = {
            "p": ("text", [prefix_text(r.namespace) for r in requests]),
            "k": ("text", [escape_text(r.key) for r in requests]),
            "v": ("text", [r.value.text for r in requests if r.value is not None]),
            "e": ("boolean", [r.value.escaped for r in requests if r.value is not None]),
            "t": ("float8", [r.ttl for r in requests]),
        }
        one = len(requests) == 1
        if one:
            # The tombstones that would drop the put (its namespace and its prefixes) as
            # scalars too: a list, or text split in SQL, cost a put 30 to 80 µs more.
            hashes = ancestor_hashes(requests[0].namespace)
            tombs = ", ".join(f"%(h{i})s::text" for i in range(len(hashes)))
            covers = f"t.prefix_hash IN ({tombs})"
            extra = {f"h{i}": h for i, h in enumerate(hashes)}
        else:
            joined = [",".join(ancestor_hashes(r.namespace)) for r in requests]
            columns["a"] = ("text", joined)
            covers = "t.prefix_hash = ANY(string_to_array(w.tombs, ','))"
            extra = {}
        slots = ", ".join(f"%({n})s::{t}{'' if one else '[]'}" for n, (t, _) in columns.items())
        source = f"(VALUES ({slots}))" if one else f"unnest({slots}) WITH ORDINALITY"
        params = {n: values[0] if one else values for n, (_, values) in columns.items()}
        names = "prefix, key, value, escaped, ttl" + ("" if one else ", tombs, n")
        return Query(
            f"""
            INSERT INTO {self._t} AS s ({INSERTED})
            SELECT w.prefix, w.key, w.value::jsonb, w.escaped, {self._next_version}, now(), now(),
                now() + w.ttl * interval '1 minute', w.ttl
            FROM {source} AS w({names})
            WHERE NOT EXISTS (SELECT FROM {self._tombs} t WHERE {covers} AND t.until > now())
            {"" if one else "ORDER BY w.n"}
            {on_conflict}""",
            {**params, **extra},
            fetch=fetch,
            standalone=standalone,
        )

    def _claim(self, requests: list[WriteRequest]) -> Plan[Query, set[tuple[str, str]]]:
        """Lock every address of a batch that writes in several statements, in one sorted
        pass, and check the versions conditional writes expect (a mismatch raises).

        An existing row is locked; an absent one is claimed with a placeholder row (expired,
        version 0, seen by nobody else), whose index entry holds racing writers of that
        address until this transaction ends. Locking existing rows first and creating new
        ones later took locks out of order, and two such batches deadlocked. Returns the
        addresses that got a placeholder: the batch overwrites or deletes each.
        """
        rows: Rows = yield Query(
            f"""
            INSERT INTO {self._t} AS s ({INSERTED})
            SELECT w.prefix, w.key, 'null'::jsonb, false, 0, now(), now(), '-infinity', NULL
            FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS w(prefix, key, n)
            ORDER BY w.n
            ON CONFLICT (prefix, key) DO UPDATE SET version = s.version
            RETURNING s.prefix, s.key, s.xmax = 0, CASE WHEN {LIVE} THEN s.version ELSE 0 END""",
            ([prefix_text(r.namespace) for r in requests], [escape_text(r.key) for r in requests]),
            fetch=True,
        )
        current = {(row[0], row[1]): int(row[3]) for row in rows}
        for request in requests:
            if request.expected_version is None:
                continue
            found = current.get(_at(request), 0)
            if found != request.expected_version:
                raise conflict_error(request, found)
        return {(row[0], row[1]) for row in rows if row[2]}

    def _delete(self, addresses: list[tuple[str, str]], standalone: bool) -> Query:
        """Delete the rows at ``addresses``, locking them in :data:`LOCK_ORDER`."""
        return Query(
            f"""DELETE FROM {self._t} s USING (
                SELECT s.prefix, s.key FROM {self._t} s
                JOIN unnest(%s::text[], %s::text[]) AS r(prefix, key)
                    ON s.prefix = r.prefix AND s.key = r.key
                ORDER BY {LOCK_ORDER} FOR UPDATE OF s
            ) k
            WHERE s.prefix = k.prefix AND s.key = k.key""",
            ([a[0] for a in addresses], [a[1] for a in addresses]),
            standalone=standalone,
        )

    def write(self, requests: list[WriteRequest]) -> Plan[Query, int]:
        """Write a batch's puts and deletes (one per address), locking rows in one order.

        Concurrent batches over the same keys deadlocked when each locked rows in the order
        it named them. Every statement here takes rows, and new index entries, in
        :data:`LOCK_ORDER`; a batch of several statements first claims all its addresses
        in one statement (:meth:`_claim`), so no later statement takes a new lock.
        """
        requests = sorted(requests, key=_at)
        deletes = [_at(r) for r in requests if r.value is None]
        puts = [r for r in requests if r.value is not None]
        several = bool(deletes and puts) or any(r.expected_version is not None for r in requests)
        claimed = (yield from self._claim(requests)) if several else set()
        # A write that is one statement is atomic by itself: without BEGIN and COMMIT it
        # costs one round trip instead of three.
        alone = not several and all(r.vectors is None for r in puts)
        if deletes:
            yield self._delete(deletes, standalone=alone)
        written: set[tuple[str, str]] = set()
        if puts:
            rows: Rows = yield self._insert(
                puts,
                replace_existing("s", "now()") + " RETURNING s.prefix, s.key",
                fetch=True,
                standalone=alone,
            )
            written.update((row[0], row[1]) for row in rows)
        # Only a tombstone drops a put (no racing creator: the batch claimed its addresses
        # first if it has to know); a dropped put's placeholder goes.
        missing = [r for r in puts if _at(r) not in written]
        leftover = [_at(r) for r in missing if _at(r) in claimed]
        if leftover:
            yield self._delete(leftover, standalone=False)
        indexed = [r for r in puts if r.vectors is not None and _at(r) in written]
        if indexed:
            yield from self._write_vectors(indexed)
        return len(missing)

    def tombstone(self, prefix: Namespace, hold_seconds: float) -> Plan[Query, None]:
        # SHARE mode waits for every write in progress on the items and holds new ones
        # until this commits: a put that checked before the tombstone existed has
        # committed (and erasure, which reads after this, sees its item), and every put
        # after it sees the tombstone, whatever its snapshot.
        yield Query(f"LOCK TABLE {self._t} IN SHARE MODE")
        yield self._drop_expired_tombstones(standalone=False)
        yield Query(
            f"""INSERT INTO {self._tombs} AS t (prefix_hash, until)
            VALUES (%s, now() + %s * interval '1 second')
            ON CONFLICT (prefix_hash) DO UPDATE SET until = excluded.until""",
            (tombstone_hash(prefix), hold_seconds),
        )

    def lift(self, prefix: Namespace) -> Plan[Query, bool]:
        rows: Rows = yield Query(
            f"DELETE FROM {self._tombs} WHERE prefix_hash = %s RETURNING until > now()",
            (tombstone_hash(prefix),),
            fetch=True,
            standalone=True,
        )
        return any(row[0] for row in rows)

    def _write_vectors(self, requests: list[WriteRequest]) -> Plan[Query, None]:
        yield Query(
            f"""DELETE FROM {self._v} v USING unnest(%s::text[], %s::text[]) AS r(prefix, key)
            WHERE v.prefix = r.prefix AND v.key = r.key""",
            ([prefix_text(r.namespace) for r in requests], [escape_text(r.key) for r in requests]),
        )
        rows: list[tuple[str, str, str, list[float]]] = []
        for r in requests:
            named = dict(r.vectors or [])
            prefix, key = prefix_text(r.namespace), escape_text(r.key)
            rows.extend((prefix, key, name, vector) for name, vector in named.items())
        if not rows:
            return
        dims = len(rows[0][3])
        yield Query(
            f"""
            INSERT INTO {self._v} (prefix, key, field, embedding, norm)
            SELECT w.prefix, w.key, w.field,
                (%(flat)s::float8[])[(w.n - 1) * {dims} + 1 : w.n * {dims}], w.norm
            FROM unnest(%(p)s::text[], %(k)s::text[], %(f)s::text[], %(norms)s::float8[])
                WITH ORDINALITY AS w(prefix, key, field, norm, n)""",
            {
                "p": [row[0] for row in rows],
                "k": [row[1] for row in rows],
                "f": [row[2] for row in rows],
                "norms": [norm(row[3]) for row in rows],
                "flat": [x for row in rows for x in row[3]],
            },
        )

    def delete_namespace(self, prefix: Namespace) -> Plan[Query, int]:
        sql = _Sql()
        rows: Rows = yield Query(  # in LOCK_ORDER, as writes lock (see write)
            f"""WITH gone AS (
                DELETE FROM {self._t} s USING (
                    SELECT s.prefix, s.key FROM {self._t} s WHERE {sql.scope(prefix)}
                    ORDER BY {LOCK_ORDER} FOR UPDATE OF s
                ) k
                WHERE s.prefix = k.prefix AND s.key = k.key RETURNING 1
            )
            SELECT count(*) FROM gone""",
            sql.params,
            fetch=True,
        )
        return int(rows[0][0])

    def _drop_expired_tombstones(self, *, standalone: bool) -> Query:
        """Delete expired tombstones, skipping any another transaction holds.

        Waiting for them deadlocked: a new tombstone holds the items table (SHARE) and
        then deletes expired tombstones, while a sweep held expired tombstones' rows and
        then waited for the items table. Locked rows are left for the next call.
        """
        return Query(
            f"""DELETE FROM {self._tombs} WHERE prefix_hash IN (
                SELECT prefix_hash FROM {self._tombs} WHERE until <= now()
                ORDER BY prefix_hash FOR UPDATE SKIP LOCKED)""",
            standalone=standalone,
        )

    def sweep(self, batch_size: int) -> Plan[Query, tuple[int, bool]]:
        # A statement of its own: the sweep then holds no tombstone while it waits for
        # the items table (see _drop_expired_tombstones).
        yield self._drop_expired_tombstones(standalone=True)
        rows: Rows = yield Query(
            f"""
            WITH victims AS (
                SELECT prefix, key FROM {self._t} WHERE expires_at <= now()
                ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED
            ), gone AS (
                DELETE FROM {self._t} s USING victims v
                WHERE s.prefix = v.prefix AND s.key = v.key RETURNING 1
            )
            SELECT count(*) FROM gone""",
            (batch_size,),
            fetch=True,
        )
        deleted = int(rows[0][0])
        return deleted, deleted >= batch_size
