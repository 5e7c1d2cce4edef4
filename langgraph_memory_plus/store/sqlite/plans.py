"""The SQLite store's operations as plans: SQL to send, rows to decode.

Nothing here touches a connection; :mod:`.store` runs these plans, each batch's in one
transaction (its reads in a read snapshot, its writes under ``BEGIN IMMEDIATE``; see
:mod:`langgraph_memory_plus.drivers.sqlite`). Every statement is parameterized; lists of
addresses travel as one JSON array parameter (``json_each``), which is why prefixes and
keys are stored NUL-free (escaped, as on PostgreSQL).

SQLite runs in this process, so the plans decide in Python what needs Python's rules:

- **Filters** run through the store core's evaluator (:func:`..filters.holds`, the
  definition), over the items under the search prefix, newest first, read in chunks that
  grow; reading stops as soon as the page is full, so the cost is the page plus the items
  skipped. A filter with a string equality (``{"kind": "fact"}``) reads only the items
  holding that string, through the ``lgmp_store_fields`` index (see :mod:`..tokens`).
- **Semantic search** is exact: every live item under the prefix that passes the filter is
  scored (best cosine similarity among its vectors, :func:`..vectors.cosine`) and ranked;
  items without vectors come last, as in ``InMemoryStore``.
- **Namespace listings** read the distinct namespaces under the longest literal prefix of
  the conditions and match, truncate and sort them as ``InMemoryStore`` does.
"""

from __future__ import annotations

import json
import math
import sys
import time
from array import array
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ...drivers.plan import Plan
from ...drivers.sqlite import Query, Rows, migrate
from ..base import GetRequest, ListRequest, Namespace, SearchRequest, WriteRequest, conflict_error
from ..columns import INSERTED, READ, replace_existing
from ..filters import AllOf, Compare, CompareTime, Fields, holds
from ..namespaces import namespace_of, prefix_text
from ..tokens import filter_tokens, simple_key, value_tokens
from ..tombstones import ancestor_hashes, tombstone_hash
from ..values import VersionedItem, VersionedSearchItem, decode_value, escape_text, unescape_text
from ..vectors import Vector, cosine, norm
from .schema import FRESH, MIGRATIONS

# SQLite refuses a string over SQLITE_MAX_LENGTH (1e9 bytes); values are JSON text.
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_BATCH_BYTES = 512 * 1024 * 1024
MAX_KEY_BYTES = 4096
MAX_COUNT = 2**62  # SQLite's LIMIT/OFFSET are 64-bit; larger requests mean "all" anyway
SCAN_CHUNK = 1000
SCAN_GROWTH = 4  # each chunk of a filtered scan reads this many times the one before
NARROW_PREFIX = 256  # fewer items under a prefix are scanned as they are, not by the index
MAX_INLINE_HASHES = 32  # tombstone hashes sent as placeholders; more go as one JSON array

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
LIVE = "(s.expires_at IS NULL OR s.expires_at > :now)"
ADDRESSES = (
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:addresses)"
)


Found = tuple[tuple[Any, ...], Any, "float | None"]
"""A row that passed the search, its decoded value, and its score."""


def _address(namespace: Namespace, key: str) -> tuple[str, str]:
    return prefix_text(namespace), escape_text(key)


def _addresses(requests: Sequence[GetRequest | WriteRequest]) -> str:
    return json.dumps([_address(r.namespace, r.key) for r in requests])


def _time(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def _item(row: tuple[Any, ...]) -> VersionedItem:
    prefix, key, value, escaped, version, created, updated, _ttl = row
    return VersionedItem(
        value=decode_value(json.loads(value), bool(escaped)),
        key=unescape_text(key),
        namespace=namespace_of(prefix),
        created_at=_time(created),
        updated_at=_time(updated),
        version=version,
    )


def _search_item(row: tuple[Any, ...], value: Any, score: float | None) -> VersionedSearchItem:
    prefix, key, _value, _escaped, version, created, updated, _ttl = row
    return VersionedSearchItem(
        namespace_of(prefix),
        unescape_text(key),
        value,
        _time(created),
        _time(updated),
        score,
        version=version,
    )


def _pack(vector: Vector) -> bytes:
    data = array("d", vector)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tobytes()


def _unpack(blob: bytes) -> Vector:
    data = array("d")
    data.frombytes(blob)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tolist()


def _scope(prefix: Namespace, params: dict[str, Any], column: str = "s.prefix") -> str:
    """Items in ``prefix`` or below it, as a range on the primary key."""
    if not prefix:
        return "1"
    text = prefix_text(prefix)
    params.update(scope=text, low=text + ".", high=text + "/")
    return f"({column} = :scope OR ({column} >= :low AND {column} < :high))"


def _numbers(cond: Fields, params: dict[str, Any]) -> str:
    """SQL false only for rows whose compared numbers rule a match out: a necessary
    condition for the order operators, so ``json_extract`` (in C) drops most rows before
    Python decides the rest. Text is left to Python (``float()`` reads some), and the
    bounds are widened a little, so rounding can only let a row through. A date
    comparison keeps only text (Python reads the dates)."""
    parts: list[str] = []

    def visit(c: object, path: str) -> None:
        if isinstance(c, Compare) and math.isfinite(c.number):
            slack = abs(c.number) * 1e-9 + 1e-300
            bound, op = (
                (c.number - slack, ">=") if c.op in ("$gt", "$gte") else (c.number + slack, "<=")
            )
            at, n = f"number_path{len(params)}", f"number_bound{len(params)}"
            params.update({at: path, n: bound})
            parts.append(
                f"(CASE json_type(s.value, :{at}) WHEN 'integer' THEN "
                f"json_extract(s.value, :{at}) {op} :{n} WHEN 'real' THEN "
                f"json_extract(s.value, :{at}) {op} :{n} "
                "WHEN 'text' THEN 1 WHEN 'true' THEN 1 WHEN 'false' THEN 1 ELSE 0 END)"
            )
        elif isinstance(c, CompareTime):
            at = f"number_path{len(params)}"
            params[at] = path
            parts.append(f"(json_type(s.value, :{at}) = 'text')")
        elif isinstance(c, AllOf):
            for sub in c.conds:
                visit(sub, path)
        elif isinstance(c, Fields):
            for key, sub in c.fields:
                if simple_key(key):
                    visit(sub, f"{path}.{key}")

    visit(cond, "$")
    return "".join(f" AND {part}" for part in parts)


class SqliteStorePlans:
    """SQL and decoding for the store's two tables."""

    max_value_bytes = MAX_VALUE_BYTES
    max_batch_bytes = MAX_BATCH_BYTES
    max_key_bytes = MAX_KEY_BYTES
    escape_strings = True

    # -- setup --------------------------------------------------------------------------

    def setup(self) -> Plan[Query, None]:
        yield from migrate("lgmp_store_migrations", MIGRATIONS, FRESH)

    # -- reads --------------------------------------------------------------------------

    def _refresh(self, rows: Rows, now: float) -> Plan[Query, None]:
        """Move the expiry of the items read that have a TTL (a write of its own)."""
        timed = [(row[0], row[1]) for row in rows if row[7] is not None]
        if timed:
            yield Query(
                f"""UPDATE lgmp_store SET expires_at = :now + ttl_minutes * 60
                WHERE (prefix, key) IN ({ADDRESSES}) AND ttl_minutes IS NOT NULL
                    AND expires_at > :now""",
                {"now": now, "addresses": json.dumps(timed)},
                write=True,
            )

    def get(self, requests: list[GetRequest]) -> Plan[Query, list[VersionedItem | None]]:
        now = time.time()
        rows: Rows = yield Query(
            f"SELECT {READ} FROM lgmp_store s WHERE (s.prefix, s.key) IN ({ADDRESSES}) AND {LIVE}",
            {"addresses": _addresses(requests), "now": now},
            fetch=True,
        )
        found = {(row[0], row[1]): row for row in rows}
        wanted = [_address(r.namespace, r.key) for r in requests]
        refresh = {a for a, r in zip(wanted, requests, strict=True) if r.refresh and a in found}
        yield from self._refresh([found[a] for a in sorted(refresh)], now)
        return [_item(found[a]) if a in found else None for a in wanted]

    def search(self, request: SearchRequest) -> Plan[Query, list[VersionedSearchItem]]:
        if request.limit == 0:
            return []
        now = time.time()
        params: dict[str, Any] = {"now": now}
        where = f"{LIVE} AND {_scope(request.prefix, params)}"
        page: list[Found]
        if request.query is not None:
            page = yield from self._ranked(where, params, request)
        elif request.filter is None:
            params["limit"] = min(request.limit, MAX_COUNT)
            params["offset"] = min(request.offset, MAX_COUNT)
            rows: Rows = yield Query(
                f"SELECT {READ} FROM lgmp_store s WHERE {where} "
                "ORDER BY s.version DESC LIMIT :limit OFFSET :offset",
                params,
                fetch=True,
            )
            page = [(row, decode_value(json.loads(row[2]), bool(row[3])), None) for row in rows]
        else:
            # Only the items holding each of the filter's tokens can match: the index rows
            # of the first, those of the others among them, then the items (CROSS JOIN
            # keeps that order: the items are the widest rows, read last). Under a narrow
            # prefix (one user's namespace) reading its few items is cheaper than the
            # index rows of a common token across every namespace (2.4 ms against 0.2).
            counted: Rows = yield Query(
                f"SELECT count(*) FROM (SELECT 1 FROM lgmp_store s WHERE {where} "
                f"LIMIT {NARROW_PREFIX})",
                params,
                fetch=True,
            )
            tokens = filter_tokens(request.filter, escape_text)[:3]
            joins = []
            for i, (path, atom) in enumerate(tokens if counted[0][0] >= NARROW_PREFIX else []):
                on = f"f{i}.path = :path{i} AND f{i}.atom = :atom{i}"
                if i:
                    on += f" AND f{i}.prefix = f0.prefix AND f{i}.key = f0.key"
                joins.append(f"lgmp_store_fields f{i}" + (f" ON {on}" if i else ""))
                where += "" if i else f" AND {on}"
                params.update({f"path{i}": path, f"atom{i}": atom})
            on_item = " ON s.prefix = f0.prefix AND s.key = f0.key" if joins else ""
            source = " CROSS JOIN ".join([*joins, "lgmp_store s" + on_item])
            where += _numbers(request.filter, params)
            page = yield from self._scan(source, where, params, request)
        if request.refresh:
            yield from self._refresh([row for row, _, _ in page], now)
        return [_search_item(row, value, score) for row, value, score in page]

    def _scan(
        self, source: str, where: str, params: dict[str, Any], request: SearchRequest
    ) -> Plan[Query, list[Found]]:
        """Newest first, a chunk at a time, filtered in Python until the page is full.

        Each chunk is a sorted read of what remains below the last one, so chunks grow:
        a filter that matches rarely costs a few reads, not one per page's worth.
        """
        assert request.filter is not None
        size = min(SCAN_CHUNK, request.offset + request.limit)
        skipped, page = 0, list[Found]()
        below = ""
        while len(page) < request.limit:
            rows: Rows = yield Query(
                f"SELECT {READ} FROM {source} WHERE {where} {below} "
                "ORDER BY s.version DESC LIMIT :chunk",
                {**params, "chunk": size},
                fetch=True,
            )
            for row in rows:
                value = decode_value(json.loads(row[2]), bool(row[3]))
                if not holds(request.filter, value):
                    continue
                if skipped < request.offset:
                    skipped += 1
                    continue
                page.append((row, value, None))
                if len(page) == request.limit:
                    break
            if len(rows) < size:
                break
            below, params["below"] = "AND s.version < :below", rows[-1][4]
            size = min(SCAN_CHUNK, size * SCAN_GROWTH)
        return page

    def _ranked(
        self, where: str, params: dict[str, Any], request: SearchRequest
    ) -> Plan[Query, list[Found]]:
        """Every candidate scored exactly, best first; unscored items after, newest first."""
        assert request.query is not None
        rows: Rows = yield Query(
            f"SELECT {READ} FROM lgmp_store s WHERE {where}", params, fetch=True
        )
        vectors: Rows = yield Query(
            f"""SELECT v.prefix, v.key, v.embedding, v.norm FROM lgmp_store_vectors v
            JOIN lgmp_store s ON s.prefix = v.prefix AND s.key = v.key WHERE {where}""",
            params,
            fetch=True,
        )
        query, query_norm = request.query, norm(request.query)
        scores: dict[tuple[str, str], float] = {}
        for prefix, key, blob, length in vectors:
            score = cosine(query, query_norm, _unpack(blob), length)
            address = (prefix, key)
            scores[address] = max(score, scores.get(address, score))
        ranked = []
        for row in rows:
            value = decode_value(json.loads(row[2]), bool(row[3]))
            if request.filter is None or holds(request.filter, value):
                ranked.append((row, value, scores.get((row[0], row[1]))))
        ranked.sort(key=lambda r: (r[2] is None, -(r[2] or 0.0), -r[0][4]))
        return ranked[request.offset : request.offset + request.limit]

    def list_namespaces(self, request: ListRequest) -> Plan[Query, list[Namespace]]:
        heads = [c.literal_head for c in request.conditions if c.literal_head]
        params: dict[str, Any] = {"now": time.time()}
        narrow = _scope(max(heads, key=len), params) if heads else "1"
        rows: Rows = yield Query(
            f"SELECT DISTINCT s.prefix FROM lgmp_store s WHERE {LIVE} AND {narrow}",
            params,
            fetch=True,
        )
        found = {
            ns[: request.max_depth] if request.max_depth is not None else ns
            for ns in (namespace_of(row[0]) for row in rows)
            if all(c.matches(ns) for c in request.conditions)
        }
        return sorted(found)[request.offset : request.offset + request.limit]

    def count(self, prefix: Namespace) -> Plan[Query, int]:
        params: dict[str, Any] = {"now": time.time()}
        rows: Rows = yield Query(
            f"SELECT count(*) FROM lgmp_store s WHERE {LIVE} AND {_scope(prefix, params)}",
            params,
            fetch=True,
        )
        return int(rows[0][0])

    # -- writes -------------------------------------------------------------------------

    def write(self, requests: list[WriteRequest]) -> Plan[Query, int]:
        now_us = time.time_ns() // 1000
        now = now_us / 1e6
        requests, dropped = yield from self._untombstoned(requests, now)
        conditional = [r for r in requests if r.expected_version is not None]
        if conditional:
            # Under the write lock: nobody can change these items until we commit.
            rows: Rows = yield Query(
                f"""SELECT s.prefix, s.key, CASE WHEN {LIVE} THEN s.version ELSE 0 END
                FROM lgmp_store s WHERE (s.prefix, s.key) IN ({ADDRESSES})""",
                {"addresses": _addresses(conditional), "now": now},
                fetch=True,
                write=True,
            )
            current = {(row[0], row[1]): int(row[2]) for row in rows}
            for request in conditional:
                found = current.get(_address(request.namespace, request.key), 0)
                if found != request.expected_version:
                    raise conflict_error(request, found)
        deletes = [r for r in requests if r.value is None]
        if requests:  # a put replaces the item's tokens, a delete removes them
            yield Query(
                f"DELETE FROM lgmp_store_fields WHERE (prefix, key) IN ({ADDRESSES})",
                {"addresses": _addresses(requests)},
                write=True,
            )
        if deletes:
            addresses = {"addresses": _addresses(deletes)}
            for table in ("lgmp_store_vectors", "lgmp_store"):
                yield Query(
                    f"DELETE FROM {table} WHERE (prefix, key) IN ({ADDRESSES})",
                    addresses,
                    write=True,
                )
        puts = [r for r in requests if r.value is not None]
        if puts:
            yield Query(
                "UPDATE lgmp_store_clock SET version = version + ? WHERE id = 0",
                (len(puts),),
                write=True,
            )
            clock: Rows = yield Query("SELECT version FROM lgmp_store_clock", fetch=True)
            first = int(clock[0][0]) - len(puts) + 1
            yield Query(
                f"""
                INSERT INTO lgmp_store ({INSERTED})
                VALUES (:prefix, :key, :value, :escaped, :version, :now_us, :now_us, :expires,
                    :ttl)
                {replace_existing("lgmp_store", ":now")}""",
                [
                    {
                        "prefix": prefix_text(r.namespace),
                        "key": escape_text(r.key),
                        "value": r.value.text,
                        "escaped": r.value.escaped,
                        "version": first + i,
                        "now_us": now_us,
                        "now": now,
                        "expires": None if r.ttl is None else now + r.ttl * 60,
                        "ttl": r.ttl,
                    }
                    for i, r in enumerate(puts)
                    if r.value is not None
                ],
                many=True,
            )
            tokens = [
                (path, atom, *_address(r.namespace, r.key))
                for r in puts
                if r.value is not None
                for path, atom in value_tokens(json.loads(r.value.text))
            ]
            if tokens:
                yield Query(
                    "INSERT INTO lgmp_store_fields (path, atom, prefix, key) VALUES (?, ?, ?, ?)",
                    tokens,
                    many=True,
                )
        indexed = [r for r in puts if r.vectors is not None]
        if indexed:
            yield Query(
                f"DELETE FROM lgmp_store_vectors WHERE (prefix, key) IN ({ADDRESSES})",
                {"addresses": _addresses(indexed)},
            )
            vectors = [
                (*_address(r.namespace, r.key), name, _pack(vector), norm(vector))
                for r in indexed
                for name, vector in dict(r.vectors or []).items()
            ]
            if vectors:
                yield Query(
                    "INSERT INTO lgmp_store_vectors (prefix, key, field, embedding, norm) "
                    "VALUES (?, ?, ?, ?, ?)",
                    vectors,
                    many=True,
                )
        return dropped

    @staticmethod
    def _untombstoned(
        requests: list[WriteRequest], now: float
    ) -> Plan[Query, tuple[list[WriteRequest], int]]:
        """The writes without the puts a live tombstone drops, and how many those were.

        Read under the write lock (``write=True``), which the rest of the batch keeps: no
        tombstone can be placed between this check and the writes.
        """
        ancestors = [ancestor_hashes(r.namespace) if r.value is not None else () for r in requests]
        wanted = sorted({h for hashes in ancestors for h in hashes})
        if not wanted:  # deletes only
            return requests, 0
        if len(wanted) <= MAX_INLINE_HASHES:  # a put: a few placeholders beat JSON
            among = ", ".join("?" * len(wanted))
            params: tuple[Any, ...] = (now, *wanted)
        else:
            among, params = "SELECT value FROM json_each(?)", (now, json.dumps(wanted))
        rows: Rows = yield Query(
            f"SELECT prefix_hash FROM lgmp_store_tombstones WHERE until > ? "
            f"AND prefix_hash IN ({among})",
            params,
            fetch=True,
            write=True,
        )
        if not rows:
            return requests, 0
        live = {row[0] for row in rows}
        kept = [r for r, hashes in zip(requests, ancestors, strict=True) if not live & set(hashes)]
        return kept, len(requests) - len(kept)

    def tombstone(self, prefix: Namespace, hold_seconds: float) -> Plan[Query, None]:
        now = time.time()
        yield Query("DELETE FROM lgmp_store_tombstones WHERE until <= ?", (now,), write=True)
        yield Query(
            """INSERT INTO lgmp_store_tombstones (prefix_hash, until) VALUES (?, ?)
            ON CONFLICT (prefix_hash) DO UPDATE SET until = excluded.until""",
            (tombstone_hash(prefix), now + hold_seconds),
        )

    def lift(self, prefix: Namespace) -> Plan[Query, bool]:
        params = {"hash": tombstone_hash(prefix), "now": time.time()}
        # No RETURNING: SQLite has it from 3.35 only. The write lock keeps both as one.
        rows: Rows = yield Query(
            "SELECT until > :now FROM lgmp_store_tombstones WHERE prefix_hash = :hash",
            params,
            fetch=True,
            write=True,
        )
        yield Query("DELETE FROM lgmp_store_tombstones WHERE prefix_hash = :hash", params)
        return any(row[0] for row in rows)

    def delete_namespace(self, prefix: Namespace) -> Plan[Query, int]:
        params: dict[str, Any] = {}
        for table in ("lgmp_store_vectors", "lgmp_store_fields"):
            yield Query(
                f"DELETE FROM {table} WHERE {_scope(prefix, params, 'prefix')}",
                params,
                write=True,
            )
        deleted: int = yield Query(
            f"DELETE FROM lgmp_store WHERE {_scope(prefix, params, 'prefix')}", params
        )
        return deleted

    def sweep(self, batch_size: int) -> Plan[Query, tuple[int, bool]]:
        params = {"now": time.time(), "n": batch_size}
        yield Query("DELETE FROM lgmp_store_tombstones WHERE until <= :now", params, write=True)
        victims = """SELECT prefix, key FROM lgmp_store WHERE expires_at <= :now
            ORDER BY expires_at, prefix, key LIMIT :n"""
        # The items go last: until then both statements pick the same victims.
        for table in ("lgmp_store_vectors", "lgmp_store_fields"):
            yield Query(f"DELETE FROM {table} WHERE (prefix, key) IN ({victims})", params)
        deleted: int = yield Query(
            f"DELETE FROM lgmp_store WHERE (prefix, key) IN ({victims})", params
        )
        return deleted, deleted >= batch_size
