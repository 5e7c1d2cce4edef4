"""The SQLite checkpointer's operations as plans: SQL to send, rows to decode.

The rules are PostgreSQL's (:mod:`..postgres.plans`), rule for rule: TTL as data with
per-thread expiry and ``sweep_expired``, retention that keeps ``DeltaChannel`` replay
intact with ``replay_only`` checkpoints, deletion tombstones that refuse late writes,
O(T) list storage with garbage collection of unreachable items. Two things differ, both
because SQLite runs inside this process:

- A statement is a function call, not a network round trip. Plans use several plain
  statements where PostgreSQL needed one clever one (SQLite has no ``LATERAL`` and no
  arrays), walk a delta history's parent chain one checkpoint at a time, and decide in
  Python what PostgreSQL decided in SQL (which checkpoints retention keeps, delta seeds).
- Writers take turns on the whole database (``BEGIN IMMEDIATE``; see :mod:`...drivers.sqlite`).
  A write plan reads its thread row (tombstone, expiry), decides, then writes, and no
  other writer can come in between; PostgreSQL's fast-path/locked-path split and its TTL
  slack (which avoid row-lock queues) have nothing to do here.

Every statement is parameterized. Lists of values travel as one JSON array parameter
(``json_each``) or as ``VALUES`` rows; text that cannot travel as JSON (NUL in a
namespace or channel name, which JSON decoding in SQLite truncates) is refused on write.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory

from ...drivers.plan import Plan
from ...drivers.sqlite import Query, Rows, migrate
from ...errors import InvalidConfigError
from ...threads.core import RecordInput, owner_digest, writes_of_interest
from ...threads.sqlite import MIGRATION as THREAD_INDEX_MIGRATION
from ...threads.sqlite import PENDING, STATUS_MIGRATION, SqliteThreadIndex
from ...threads.sqlite import TABLE as THREAD_INDEX_TABLE
from ..codec import (
    EMPTY,
    ChainLink,
    CheckpointCodec,
    EncodedCheckpoint,
    EncodedWrite,
    StoredCheckpoint,
    json_safe,
    metadata_matches,
    plain_versions,
    version_text,
)
from ..config import ListQuery, SaverSettings, Target, deletion_id, thread_key
from ..fence import Claim, FenceState, check, may_take, next_token, now_us
from ..lists import ID_SIZE, LIST_TYPE, PAGE_SIZE, ListRequest
from .schema import (
    ERASED_MIGRATION,
    FENCE_MIGRATION,
    MIGRATIONS,
    OWNER_MIGRATION,
    REFUSED_MIGRATION,
)

logger = logging.getLogger("langgraph_memory_plus.checkpoint.sqlite")

CHECKPOINT_MIGRATIONS = (
    *MIGRATIONS,
    THREAD_INDEX_MIGRATION,
    STATUS_MIGRATION,
    REFUSED_MIGRATION,
    FENCE_MIGRATION,
    ERASED_MIGRATION,
    OWNER_MIGRATION,
)
"""Every migration of the checkpoint tables, the thread index's included: the version
``setup()`` brings a schema to is ``len(CHECKPOINT_MIGRATIONS) - 1``."""

# SQLite refuses a string or blob over SQLITE_MAX_LENGTH (1e9 bytes by default).
MAX_VALUE_BYTES = 500 * 1024 * 1024
TOMBSTONE_SECONDS = 24 * 3600
MAX_CHAIN_DEPTH = 1_000_000
CHUNK = 500  # values per IN (...) list: far below SQLite's limit of bound parameters
MAX_PARAMS = 999  # bound parameters per statement before SQLite 3.32

# A write's first read (it opens the write transaction): its thread's row, or NULLs. A
# put reads in the same statement whether its checkpoint is known, its parent's delta
# seeds ('' for none, NULL when its parent is not stored) and whether interrupt or error
# writes of it came first (see ``put``).
ADMIT = """SELECT t.thread_key IS NOT NULL, t.expires_at, t.live_after, t.thread_id IS NOT NULL,
    t.refused{} FROM (SELECT 1) LEFT JOIN lgmp_threads t ON t.thread_key = :tk"""
ADMIT_WRITES = ADMIT.format("")
ADMIT_PUT = ADMIT.format(
    f""",
    EXISTS (SELECT 1 FROM lgmp_checkpoints WHERE thread_key = :tk AND checkpoint_ns = :ns
        AND checkpoint_id = :id),
    (SELECT coalesce(delta_seeds, '') FROM lgmp_checkpoints WHERE thread_key = :tk
        AND checkpoint_ns = :ns AND checkpoint_id = :parent),
    {PENDING}"""
)

# Pending writes in: a rewrite of a special write (negative idx) replaces it, others stay.
WRITES_INSERT = (
    """INSERT INTO lgmp_writes (thread_key, checkpoint_ns, checkpoint_id, task_id, idx,
        task_path, channel, type, blob)""",
    """ON CONFLICT (thread_key, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
        task_path = excluded.task_path, channel = excluded.channel,
        type = excluded.type, blob = excluded.blob
    WHERE excluded.idx < 0""",
)
# What ADMIT_WRITES reads, as the condition of an INSERT ... SELECT (the thread key is its
# last parameter): the thread is there, named, without expiry and never deleted, so
# :meth:`SqliteCheckpointPlans._admit` would neither refuse nor write.
WRITES_ADMITTED = (
    f"{WRITES_INSERT[0]} SELECT * FROM (",
    f""") WHERE EXISTS (SELECT 1 FROM lgmp_threads WHERE thread_key = ?
    AND thread_id IS NOT NULL AND expires_at IS NULL AND live_after IS NULL)
    {WRITES_INSERT[1]}""",
)

VISIBLE = "t.thread_id IS NOT NULL AND (t.expires_at IS NULL OR t.expires_at > :now)"
THREAD_TABLES = (
    "lgmp_checkpoints",
    "lgmp_blobs",
    "lgmp_writes",
    "lgmp_items",
    "lgmp_nodes",
    THREAD_INDEX_TABLE,
)

# Ordinals 0 .. PAGE_SIZE - 1: a page holds PAGE_SIZE item ids, a list's tail fewer.
SLOTS = f"slots(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM slots WHERE g < {PAGE_SIZE - 1})"
# The page ids of the spines of a thread namespace's list versions (``lb``: their blobs).
SPINE_PAGES = f"""
    lb(blob) AS (
        SELECT blob FROM lgmp_blobs
        WHERE thread_key = :tk AND checkpoint_ns = :ns AND type = '{LIST_TYPE}'
    ), spines(id) AS (
        SELECT DISTINCT substr(blob, 1, {ID_SIZE}) FROM lb
    ), walk(children, pos) AS (
        SELECT n.children, 0 FROM lgmp_nodes n JOIN spines s ON n.node_id = s.id
        WHERE n.thread_key = :tk AND n.checkpoint_ns = :ns AND length(n.children) >= {ID_SIZE}
        UNION ALL
        SELECT children, pos + 1 FROM walk WHERE (pos + 2) * {ID_SIZE} <= length(children)
    ), pages(id) AS (
        SELECT DISTINCT substr(children, pos * {ID_SIZE} + 1, {ID_SIZE}) FROM walk
    )"""


def _id_bytes(thread_id: str) -> bytes:
    """Thread ids are kept as bytes: any string, lone surrogates included, round-trips."""
    return thread_id.encode("utf-8", "surrogatepass")


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _chunks(values: Sequence[Any]) -> list[Sequence[Any]]:
    return [values[i : i + CHUNK] for i in range(0, len(values), CHUNK)]


@lru_cache(maxsize=256)
def _values_sql(head: str, width: int, n: int, tail: str) -> str:
    """``head VALUES (?, ...), ... tail`` for ``n`` rows of ``width`` values (cached: the
    text is what ``sqlite3``'s statement cache is keyed by)."""
    row = f"({_marks(width)})"
    return f"{head} VALUES {', '.join([row] * n)} {tail}"


def _insert_rows(head: str, tail: str, rows: Sequence[tuple[Any, ...]]) -> Plan[Query, None]:
    """``rows`` in as few ``INSERT`` statements as SQLite's parameter limit allows (one, for
    a turn's blobs, items or writes): a statement per row cost a step of the driver each."""
    if not rows:
        return
    width = len(rows[0])
    step = MAX_PARAMS // width
    for i in range(0, len(rows), step):
        part = rows[i : i + step]
        yield Query(_values_sql(head, width, len(part), tail), [x for r in part for x in r])


def _no_nul(text: str, what: str) -> None:
    if "\x00" in text:
        raise InvalidConfigError(f"{what} must not contain NUL characters: {text[:80]!r}")


Key = tuple[bytes, str, str]  # thread key, namespace, checkpoint id


_NUMBERS = "'integer', 'real', 'true', 'false'"
_INT64 = range(-(2**63), 2**63)


def _narrowing_types(value: Any) -> str | None:
    """The JSON types (``json_each``'s names) a metadata value equal to ``value`` can have
    in ``metadata_json``, or ``None`` when SQL cannot narrow on it.

    A number equals the JSON numbers and booleans of its value (``json_each`` gives
    ``true`` as 1): ``{"step": -1}`` reads the checkpoints of step -1, not each row's
    metadata. Not narrowed: ``None`` (a missing key matches it), containers, integers
    beyond SQLite's 64 bits and non-finite floats (``json_safe`` stores those as text).
    """
    if isinstance(value, str):
        return "'text'"
    if isinstance(value, bool) or (isinstance(value, int) and value in _INT64):
        return _NUMBERS
    if isinstance(value, float) and math.isfinite(value):
        return _NUMBERS
    return None


def _nameless_if_empty(tk: bytes) -> Query:
    """The thread ``tk``, left with no checkpoints and no writes, becomes a tombstone
    again: no id, no expiry."""
    return Query(
        """UPDATE lgmp_threads SET thread_id = NULL, expires_at = NULL, owner = NULL
        WHERE thread_key = :tk
            AND NOT EXISTS (SELECT 1 FROM lgmp_checkpoints WHERE thread_key = :tk)
            AND NOT EXISTS (SELECT 1 FROM lgmp_writes WHERE thread_key = :tk)""",
        {"tk": tk},
    )


class SqliteCheckpointPlans:
    """SQL and decoding for one set of saver settings."""

    max_value_bytes = MAX_VALUE_BYTES
    inline_scalars = False
    metadata_as_json = False

    def __init__(self, settings: SaverSettings) -> None:
        self.settings = settings
        self.threads = SqliteThreadIndex(settings.index_keys, settings.transcript_ttl_seconds)

    # -- setup ------------------------------------------------------------------------

    def setup(self) -> Plan[Query, None]:
        created = yield from migrate(
            "lgmp_checkpoint_migrations",
            CHECKPOINT_MIGRATIONS,
            # the checkpoint tables gained the refused ids; then the fences, erased users
            [
                *MIGRATIONS[0],
                *REFUSED_MIGRATION,
                *self.threads.fresh(),
                *FENCE_MIGRATION,
                *ERASED_MIGRATION,
                *OWNER_MIGRATION,
            ],
        )
        if not created:
            yield from self.threads.setup()

    # -- erased users -----------------------------------------------------------------

    def unless_erased(
        self, owner: str | None, write: Plan[Query, None], target: Target, checkpoint_id: str
    ) -> Plan[Query, bool | None]:
        """``write``, unless ``owner`` (a user key's indexed form) is held by an erasure
        (then ``False``: nothing was written, and :meth:`drop_orphan_writes` of the
        checkpoint the write was for, ``checkpoint_id`` in ``target``'s namespace).

        The check opens the write's transaction (``BEGIN IMMEDIATE``): an erasure's hold
        commits before or after it, never in between, so a write either sees the hold or
        is stored before the erasure looks for the user's threads.
        """
        if owner is None:
            yield from write
            return None
        rows: Rows = yield Query(
            "SELECT 1 FROM lgmp_erased WHERE owner = ? AND until > ?",
            (owner_digest(owner), time.time()),
            fetch=True,
            write=True,
        )
        if rows:
            logger.warning("dropped a write of a run whose user was erased")
            yield from self.drop_orphan_writes(target, checkpoint_id, owner)
            return False
        yield from write
        return None

    def drop_orphan_writes(
        self, target: Target, checkpoint_id: str, owner: str
    ) -> Plan[Query, None]:
        """:meth:`CheckpointPlans.drop_orphan_writes`, in the dropped write's transaction."""
        params = {"tk": target.thread_key, "ns": target.checkpoint_ns, "id": checkpoint_id}
        gone: int = yield Query(  # the driver's reply without fetch: rows changed
            """
            DELETE FROM lgmp_writes AS w WHERE w.thread_key = :tk AND w.checkpoint_ns = :ns
                AND w.checkpoint_id = :id
                AND NOT EXISTS (SELECT 1 FROM lgmp_checkpoints c WHERE c.thread_key = :tk
                    AND c.checkpoint_ns = :ns AND c.checkpoint_id = :id)""",
            params,
        )
        if not gone:
            return
        yield _nameless_if_empty(target.thread_key)
        yield from self.threads.refresh([target.thread_key])

    def pending_threads(
        self, owner: str, cursor: Any, limit: int, forget: bool
    ) -> Plan[Query, tuple[list[str], Any]]:
        """:meth:`CheckpointPlans.pending_threads`: rows whose writes named ``owner``
        and that have no root checkpoint (no put filed them: interrupt and error writes
        alone make an index row, with no user in it), by thread key after ``cursor``.
        ``forget`` (first page): ``owner``'s marks on threads a put filed since (under
        another user: the index's; the owner's own were deleted by the index's pages)
        are cleared, so that no row keeps the erased user's id."""
        if forget and cursor is None:
            yield Query(
                """UPDATE lgmp_threads SET owner = NULL
                WHERE owner = ? AND EXISTS (SELECT 1 FROM lgmp_checkpoints c
                    WHERE c.thread_key = lgmp_threads.thread_key AND c.checkpoint_ns = '')""",
                (owner,),
            )
        rows: Rows = yield Query(
            """SELECT t.thread_key, t.thread_id FROM lgmp_threads t
            WHERE t.owner = ? AND t.thread_key > ? AND t.thread_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM lgmp_checkpoints c
                    WHERE c.thread_key = t.thread_key AND c.checkpoint_ns = '')
            ORDER BY t.owner, t.thread_key LIMIT ?""",
            (owner, b"" if cursor is None else cursor, limit),
            fetch=True,
        )
        ids = [bytes(tid).decode("utf-8", "surrogatepass") for _, tid in rows]
        return ids, (bytes(rows[-1][0]) if len(rows) == limit else None)

    def forget_pending(self, owner: str, thread_ids: Sequence[str]) -> Plan[Query, None]:
        """Nothing: the mark is the thread row's, cleared by its deletion."""
        return
        yield

    def hold_erased(self, owner: str, seconds: float) -> Plan[Query, None]:
        """Refuse ``owner``'s writes for ``seconds`` (longer holds win)."""
        yield Query(
            "INSERT INTO lgmp_erased (owner, until) VALUES (?, ?) ON CONFLICT (owner) "
            "DO UPDATE SET until = max(until, excluded.until)",
            (owner_digest(owner), time.time() + seconds),
            write=True,
        )
        yield Query("DELETE FROM lgmp_erased WHERE until <= ?", (time.time(),))

    def lift_erased(self, owner: str) -> Plan[Query, bool]:
        """End ``owner``'s hold; whether there was one."""
        n = yield Query(
            "DELETE FROM lgmp_erased WHERE owner = ? AND until > ?",
            (owner_digest(owner), time.time()),
            write=True,
        )
        return bool(n)

    # -- reads ------------------------------------------------------------------------

    @staticmethod
    def _page(where: str, limit: int) -> str:
        """Visible checkpoints, newest first; their blobs and writes come from :meth:`_load`."""
        return f"""
            SELECT t.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
                   c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata, c.thread_key,
                   c.channel_versions, c.versions_json
            FROM lgmp_checkpoints c JOIN lgmp_threads t ON t.thread_key = c.thread_key
            WHERE {VISIBLE} AND NOT c.replay_only AND {where}
            ORDER BY c.checkpoint_id DESC, c.thread_key DESC, c.checkpoint_ns DESC
            LIMIT {int(limit)}"""

    @staticmethod
    def _stored(
        row: tuple[Any, ...],
        blobs: Sequence[tuple[str, str, bytes | None]] = (),
        writes: Sequence[tuple[str, str, str, bytes, str, int]] = (),
    ) -> StoredCheckpoint:
        """A :meth:`_page` row as a stored checkpoint; without blobs and writes it is
        enough to decode the metadata."""
        tid, ns, cid, parent, ctype, cblob, mtype, mblob, _, versions, native = row
        return StoredCheckpoint(
            thread_id=bytes(tid).decode("utf-8", "surrogatepass"),
            checkpoint_ns=ns,
            checkpoint_id=cid,
            parent_id=parent,
            checkpoint=(ctype, cblob),
            metadata=(mtype, mblob),
            blobs=blobs,
            writes=writes,
            channel_versions=json.loads(native or versions),
        )

    def _load(self, rows: Rows) -> Plan[Query, list[StoredCheckpoint]]:
        """The page's checkpoints with their blobs and pending writes (two statements).

        ``CROSS JOIN`` fixes SQLite's join order: each version is then one primary-key
        lookup. Left to itself the planner walked every blob of the thread per version
        (2.6 ms a read at 1,000 checkpoints, growing with the thread).
        """
        if not rows:
            return []
        keys: list[Key] = [(bytes(r[8]), r[1], r[2]) for r in rows]
        values = ", ".join(["(?, ?, ?)"] * len(keys))
        params = [x for key in keys for x in key]
        blob_rows: Rows = yield Query(
            f"""
            WITH k(tk, ns, id) AS (VALUES {values})
            SELECT k.tk, k.ns, k.id, b.channel, b.type, b.blob
            FROM k JOIN lgmp_checkpoints c ON c.thread_key = k.tk AND c.checkpoint_ns = k.ns
                AND c.checkpoint_id = k.id
            CROSS JOIN json_each(c.channel_versions) v
            CROSS JOIN lgmp_blobs b ON b.thread_key = k.tk AND b.checkpoint_ns = k.ns
                AND b.channel = v.key AND b.version = v.value""",
            params,
            fetch=True,
        )
        write_rows: Rows = yield Query(
            f"""
            WITH k(tk, ns, id) AS (VALUES {values})
            SELECT w.thread_key, w.checkpoint_ns, w.checkpoint_id,
                   w.task_id, w.channel, w.type, w.blob, w.task_path, w.idx
            FROM k JOIN lgmp_writes w ON w.thread_key = k.tk AND w.checkpoint_ns = k.ns
                AND w.checkpoint_id = k.id""",
            params,
            fetch=True,
        )
        blobs: dict[Key, list[tuple[str, str, bytes | None]]] = defaultdict(list)
        for tk, ns, cid, channel, typ, data in blob_rows:
            blobs[(bytes(tk), ns, cid)].append((channel, typ, data))
        writes: dict[Key, list[tuple[str, str, str, bytes, str, int]]] = defaultdict(list)
        for tk, ns, cid, *write in write_rows:
            writes[(bytes(tk), ns, cid)].append(tuple(write))
        return [
            self._stored(row, blobs[key], writes[key]) for key, row in zip(keys, rows, strict=True)
        ]

    def _refresh(self, keys: list[bytes], now: float) -> Query:
        """Move live threads' expiry on read (``refresh_on_read``); its own transaction."""
        return Query(
            f"UPDATE lgmp_threads SET expires_at = ? WHERE thread_key IN ({_marks(len(keys))}) "
            "AND expires_at IS NOT NULL AND expires_at > ?",
            [now + (self.settings.ttl_seconds or 0.0), *keys, now],
            write=True,
        )

    @property
    def _refreshes(self) -> bool:
        return self.settings.refresh_on_read and self.settings.ttl_seconds is not None

    @classmethod
    @lru_cache(maxsize=2)
    def _latest(cls, by_id: bool) -> str:
        """A thread namespace's latest (or ``:id``) checkpoint, its blobs and its writes in
        one statement: rows of kind 0 (the :meth:`_page` row), 1 (channel, type, blob) and
        2 (task id, channel, type, blob, task path, idx). Blobs are found as :meth:`_load`
        finds them, each by its primary key."""
        where = "c.thread_key = :tk AND c.checkpoint_ns = :ns"
        if by_id:
            where += " AND c.checkpoint_id = :id"
        pad = ", NULL" * 5
        return f"""
            WITH p AS ({cls._page(where, 1)})
            SELECT 0, p.* FROM p
            UNION ALL
            SELECT 1, b.channel, b.type, b.blob{pad}, NULL, NULL, NULL
            FROM p CROSS JOIN json_each(p.channel_versions) v
            CROSS JOIN lgmp_blobs b ON b.thread_key = p.thread_key
                AND b.checkpoint_ns = p.checkpoint_ns AND b.channel = v.key AND b.version = v.value
            UNION ALL
            SELECT 2, w.task_id, w.channel, w.type, w.blob, w.task_path, w.idx{pad}
            FROM p JOIN lgmp_writes w ON w.thread_key = p.thread_key
                AND w.checkpoint_ns = p.checkpoint_ns AND w.checkpoint_id = p.checkpoint_id"""

    def get_tuple(
        self, codec: CheckpointCodec, target: Target
    ) -> Plan[Query, CheckpointTuple | None]:
        now = time.time()
        params: dict[str, Any] = {"tk": target.thread_key, "ns": target.checkpoint_ns, "now": now}
        if target.checkpoint_id is not None:
            params["id"] = target.checkpoint_id
        # One statement is its own snapshot: no transaction around it. A list's items are
        # read after it (when not remembered); a deletion in between makes that read fail
        # and run again (``_whole``), as on PostgreSQL.
        rows: Rows = yield Query(
            self._latest(target.checkpoint_id is not None), params, fetch=True, alone=True
        )
        page = [row[1:] for row in rows if row[0] == 0]
        if not page:
            return None
        stored = self._stored(
            page[0],
            [(row[1], row[2], row[3]) for row in rows if row[0] == 1],
            [tuple(row[1:7]) for row in rows if row[0] == 2],
        )
        found = yield from codec.decode_stored(stored, None, self._fetch_list)
        if self._refreshes:
            yield self._refresh([target.thread_key], now)
        return found

    def list_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Query, tuple[list[CheckpointTuple], ListQuery | None]]:
        if query.limit is not None and query.limit <= 0:
            return [], None
        now = time.time()
        wheres = ["1"]
        params: dict[str, Any] = {"now": now}
        if query.thread_id is not None:
            wheres.append("c.thread_key = :tk")
            params["tk"] = thread_key(query.thread_id)
        if query.checkpoint_ns is not None:
            wheres.append("c.checkpoint_ns = :ns")
            params["ns"] = query.checkpoint_ns
        if query.checkpoint_id is not None:
            wheres.append("c.checkpoint_id = :id")
            params["id"] = query.checkpoint_id
        if query.before is not None:
            wheres.append("c.checkpoint_id < :before")
            params["before"] = query.before
        # SQLite narrows by the filter's strings and numbers (source, run_id, user_id,
        # step); every row is then checked exactly on its decoded metadata, as
        # InMemorySaver compares (where 1 == 1.0 == True, and None matches a missing key).
        for i, (key, value) in enumerate((codec.narrowing(query.filter) or {}).items()):
            types = _narrowing_types(value)
            if types:
                wheres.append(
                    f"EXISTS (SELECT 1 FROM json_each(c.metadata_json) j WHERE j.key = :fk{i} "
                    f"AND j.type IN ({types}) AND j.value = :fv{i})"
                )
                params[f"fk{i}"] = json_safe(str(key))
                params[f"fv{i}"] = json_safe(value)
        if query.after is not None:
            wheres.append(
                "(c.checkpoint_id, c.thread_key, c.checkpoint_ns) < (:a_id, :a_tk, :a_ns)"
            )
            params.update(a_id=query.after[0], a_tk=query.after[1], a_ns=query.after[2])
        # With a filter a page is full size whatever the limit: rows are checked here
        # (values other than strings are not narrowed in SQL), and pages of one row made
        # list(filter={"step": -1}, limit=1) a statement per checkpoint of the thread.
        size = page_size if query.limit is None or query.filter else min(page_size, query.limit)
        rows: Rows = yield Query(self._page(" AND ".join(wheres), size), params, fetch=True)
        # The metadata decides first: blobs and writes are read only for the checkpoints
        # it keeps, up to the limit.
        matching = rows if not query.filter else []
        for row in rows if query.filter else ():
            if metadata_matches(codec.decode_metadata(self._stored(row)), query.filter):
                matching.append(row)
                if len(matching) == query.limit:
                    break
        page: list[CheckpointTuple] = []
        for stored in (yield from self._load(matching)):
            page.append((yield from codec.decode_stored(stored, None, self._fetch_list)))
        if page and self._refreshes:
            yield self._refresh(sorted({bytes(row[8]) for row in rows}), now)
        limit = None if query.limit is None else query.limit - len(page)
        if len(rows) < size or limit == 0:
            return page, None
        last = rows[-1]  # the keyset cursor: (checkpoint_id, thread_key, checkpoint_ns)
        return page, replace(query, limit=limit, after=(last[2], bytes(last[8]), last[1]))

    def _fetch_list(self, request: ListRequest) -> Query:
        """The items of a stored list in order; bytes only for those not known here.

        Spine and pages are split into ids in SQL (``substr`` on blobs), so a list of any
        length costs one statement; known ids travel as one JSON array of hex strings. A
        missing spine or page comes first as a row without a type (the read fails, and
        runs again), never as a shorter list.
        """
        tk, ns, _ = request.key
        return Query(
            f"""
            WITH RECURSIVE {SLOTS}, spine(children) AS (
                SELECT children FROM lgmp_nodes
                WHERE thread_key = :tk AND checkpoint_ns = :ns AND node_id = :spine
            ), pages(pord, id) AS (
                SELECT 0, substr(children, 1, {ID_SIZE}) FROM spine
                WHERE length(children) >= {ID_SIZE}
                UNION ALL
                SELECT pages.pord + 1,
                       substr(spine.children, (pages.pord + 1) * {ID_SIZE} + 1, {ID_SIZE})
                FROM pages, spine WHERE (pages.pord + 2) * {ID_SIZE} <= length(spine.children)
            ), ids(pord, iord, id) AS (
                SELECT p.pord, s.g, substr(n.children, s.g * {ID_SIZE} + 1, {ID_SIZE})
                FROM pages p JOIN lgmp_nodes n ON n.thread_key = :tk AND n.checkpoint_ns = :ns
                    AND n.node_id = p.id
                JOIN slots s ON s.g * {ID_SIZE} < length(n.children)
                UNION ALL
                SELECT 9223372036854775807, s.g, substr(:tail, s.g * {ID_SIZE} + 1, {ID_SIZE})
                FROM slots s WHERE s.g * {ID_SIZE} < length(:tail)
                UNION ALL  -- a missing spine or page: a row without a type
                SELECT -1, 0, :spine WHERE :spine IS NOT NULL AND NOT EXISTS (SELECT 1 FROM spine)
                UNION ALL
                SELECT -1, p.pord, p.id FROM pages p WHERE NOT EXISTS (
                    SELECT 1 FROM lgmp_nodes n WHERE n.thread_key = :tk
                        AND n.checkpoint_ns = :ns AND n.node_id = p.id
                )
            )
            SELECT ids.id, i.type,
                   CASE WHEN hex(ids.id) IN (SELECT value FROM json_each(:known)) THEN NULL
                        ELSE i.data END
            FROM ids
            LEFT JOIN lgmp_items i ON i.thread_key = :tk AND i.checkpoint_ns = :ns
                AND i.item_id = ids.id
            ORDER BY ids.pord, ids.iord""",
            {
                "tk": tk,
                "ns": ns,
                "spine": request.ref.spine,
                "tail": b"".join(request.ref.tail),
                "known": json.dumps([iid.hex().upper() for iid in request.known]),
            },
            fetch=True,
        )

    def delta_history(
        self, codec: CheckpointCodec, target: Target, channels: Sequence[str]
    ) -> Plan[Query, dict[str, DeltaChannelHistory]]:
        """Walk the parent chain one checkpoint at a time, stopping per channel at its seed."""
        tk, ns = target.thread_key, target.checkpoint_ns
        params: dict[str, Any] = {"tk": tk, "ns": ns, "now": time.time()}
        pick = ""
        if target.checkpoint_id is not None:
            pick, params["id"] = "AND c.checkpoint_id = :id", target.checkpoint_id
        start: Rows = yield Query(
            f"""SELECT c.parent_checkpoint_id
            FROM lgmp_checkpoints c JOIN lgmp_threads t ON t.thread_key = c.thread_key
            WHERE {VISIBLE} AND NOT c.replay_only AND c.thread_key = :tk
                AND c.checkpoint_ns = :ns {pick}
            ORDER BY c.checkpoint_id DESC LIMIT 1""",
            params,
            fetch=True,
        )
        chain: list[ChainLink] = []
        remaining = list(dict.fromkeys(channels))
        cursor: str | None = start[0][0] if start else None
        while cursor is not None and remaining and len(chain) < MAX_CHAIN_DEPTH:
            found: Rows = yield Query(
                "SELECT parent_checkpoint_id, channel_versions FROM lgmp_checkpoints "
                "WHERE thread_key = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                (tk, ns, cursor),
                fetch=True,
            )
            if not found:
                break
            parent, versions = found[0][0], json.loads(found[0][1])
            wanted = [(ch, versions[ch]) for ch in remaining if ch in versions]
            seeds: dict[str, tuple[str, bytes | None]] = {}
            if wanted:
                seed_rows: Rows = yield Query(
                    f"""SELECT channel, type, blob FROM lgmp_blobs
                    WHERE thread_key = ? AND checkpoint_ns = ? AND type <> '{EMPTY}'
                        AND (channel, version) IN (VALUES {", ".join(["(?, ?)"] * len(wanted))})""",
                    [tk, ns, *(x for pair in wanted for x in pair)],
                    fetch=True,
                )
                seeds = {ch: (typ, data) for ch, typ, data in seed_rows}
            writes: Rows = yield Query(
                f"""SELECT task_id, channel, type, blob, task_path, idx FROM lgmp_writes
                WHERE thread_key = ? AND checkpoint_ns = ? AND checkpoint_id = ?
                    AND channel IN ({_marks(len(remaining))})""",
                [tk, ns, cursor, *remaining],
                fetch=True,
            )
            seen = {ch: version_text(v) for ch, v in plain_versions(versions).items()}
            chain.append(ChainLink(cursor, seeds, writes, seen))
            remaining = [ch for ch in remaining if ch not in seeds]
            cursor = parent
        found_seeds = [(ch, typ, data) for link in chain for ch, (typ, data) in link.seeds.items()]
        lists = yield from codec.resolve_lists(
            target.thread_id, target.checkpoint_ns, found_seeds, self._fetch_list
        )
        return codec.delta_history(channels, chain, lists, target.thread_id, target.checkpoint_ns)

    # -- writes -----------------------------------------------------------------------

    def _admit(
        self,
        target: Target,
        now: float,
        written_id: str,
        must_exist: Callable[[str], str | None],
        row: tuple[Any, ...],
        owner: str | None = None,
    ) -> Plan[Query, bool | None]:
        """Admit a write whose first read (:data:`ADMIT`, which took the write lock) gave
        ``row``: create or refresh the thread row.

        Returns ``None`` when the write is refused (see :meth:`_refuse`), else whether the
        thread had expired (what it held must then go). ``must_exist(live_after)`` names the
        checkpoint a write to a deleted thread needs in order to be kept, or ``None``.
        ``owner``: pending writes' user, kept on a row they create or name (a thread of
        writes only is found by it: see :meth:`pending_threads`).
        """
        tk = target.thread_key
        expires = None if self.settings.ttl_seconds is None else now + self.settings.ttl_seconds
        found, expires_at, live_after, named, refused = row[:5]
        if not found:
            yield Query(
                "INSERT INTO lgmp_threads (thread_key, thread_id, expires_at, owner) "
                "VALUES (?, ?, ?, ?)",
                (tk, _id_bytes(target.thread_id), expires, owner),
            )
            return False
        if live_after is not None:
            if refused is not None and not {written_id, target.root_id}.isdisjoint(
                json.loads(refused)
            ):
                yield from self._refuse(target, written_id)
                return None
            needed = [
                (target.checkpoint_ns, must_exist(live_after)),
                ("", target.root_needed(live_after)),
            ]
            for ns, check in needed:
                if check is None:
                    continue
                exists: Rows = yield Query(
                    "SELECT EXISTS (SELECT 1 FROM lgmp_checkpoints WHERE thread_key = ? "
                    "AND checkpoint_ns = ? AND checkpoint_id = ?)",
                    (tk, ns, check),
                    fetch=True,
                )
                if not exists[0][0]:
                    yield from self._refuse(target, written_id)
                    return None
        expired = expires_at is not None and expires_at <= now
        # writes reviving a deleted (nameless) id, or an expired thread (which starts
        # over: its owner in waiting, if any, was the old thread's)
        if expired or (not named and owner is not None):
            yield Query(
                "UPDATE lgmp_threads SET thread_id = ?, expires_at = ?, owner = ? "
                "WHERE thread_key = ?",
                (_id_bytes(target.thread_id), expires, owner, tk),
            )
        elif not (named and expires is None and expires_at is None):  # else no change
            yield Query(
                "UPDATE lgmp_threads SET thread_id = ?, expires_at = ? WHERE thread_key = ?",
                (_id_bytes(target.thread_id), expires, tk),
            )
        return expired

    def _refuse(self, target: Target, written_id: str) -> Plan[Query, None]:
        """Drop a write from a run that outlived its deleted thread.

        Once a thread was deleted, a checkpoint is kept only if its parent still exists (a
        fresh run has none), and writes only if their checkpoint exists or is newer than
        the deletion; a subgraph's, in any namespace, also only if its root checkpoint
        does (see :meth:`Target.root_needed`). So a run that keeps going cannot bring the
        thread back. The refused checkpoint id joins the tombstone's ``refused`` ids, so
        what follows it is refused too; what hangs from a refused id now goes, as if it
        came now: the refused checkpoint's writes that came first, and subgraphs stored
        under a root checkpoint refused after them. A thread left empty is a tombstone
        again. The deletion's bound (``live_after``) never moves: a new run's checkpoints
        older than a refusal, whatever retention kept of them, are not the deleted run's.
        """
        logger.warning("dropped a write of a run whose thread was deleted")
        tk = target.thread_key
        yield Query(
            """UPDATE lgmp_threads SET refused = json_insert(coalesce(refused, '[]'), '$[#]', :id)
            WHERE thread_key = :tk AND NOT EXISTS (
                SELECT 1 FROM json_each(coalesce(refused, '[]')) WHERE value = :id)""",
            {"id": written_id, "tk": tk},
        )
        refused = """(SELECT r.value FROM lgmp_threads t, json_each(t.refused) r
                     WHERE t.thread_key = :tk)"""
        dead: Rows = yield Query(
            f"""
            WITH sub(ns, root) AS (
                SELECT DISTINCT checkpoint_ns, json_extract(metadata_json, '$.parents.""')
                FROM lgmp_checkpoints WHERE thread_key = :tk AND checkpoint_ns <> ''
            )
            SELECT DISTINCT ns FROM sub WHERE sub.root IN {refused}""",
            {"tk": tk},
            fetch=True,
        )
        for (ns,) in dead:
            for table in THREAD_TABLES[:-1]:
                yield Query(
                    f"DELETE FROM {table} WHERE thread_key = ? AND checkpoint_ns = ?", (tk, ns)
                )
        yield Query(
            f"""
            DELETE FROM lgmp_writes AS w WHERE w.thread_key = :tk
                AND w.checkpoint_id IN {refused}
                AND NOT EXISTS (SELECT 1 FROM lgmp_checkpoints c
                    WHERE c.thread_key = :tk AND c.checkpoint_ns = w.checkpoint_ns
                        AND c.checkpoint_id = w.checkpoint_id)""",
            {"tk": tk},
        )
        yield _nameless_if_empty(tk)
        yield from self.threads.refresh([tk])

    @staticmethod
    def _delta_seeds(encoded: EncodedCheckpoint, parent_seeds: str | None) -> str | None:
        """Per ``DeltaChannel``, the checkpoint holding its last snapshot (see :meth:`_trim`),
        from the parent's (``parent_seeds``, as stored)."""
        if not parent_seeds and not encoded.delta_channels:
            return None  # most puts: nothing to inherit, nothing to seed
        inherited: dict[str, str] = json.loads(parent_seeds) if parent_seeds else {}
        channels = set(encoded.delta_channels) | {
            ch for ch in inherited if ch in encoded.versions_json
        }
        if not channels:
            return None
        valued = set(encoded.valued_channels)
        return json.dumps(
            {
                ch: encoded.checkpoint_id if ch in valued else inherited.get(ch, "")
                for ch in sorted(channels)
            }
        )

    def put(
        self,
        target: Target,
        encoded: EncodedCheckpoint,
        record: RecordInput,
        fence: Claim | None = None,
    ) -> Plan[Query, bool]:
        tk, ns = target.thread_key, target.checkpoint_ns
        _no_nul(ns, "checkpoint_ns")
        if any("\x00" in channel for channel in encoded.channel_versions):
            for channel in encoded.channel_versions:
                _no_nul(channel, "channel name")
        if fence is not None:
            yield from self._fence_check(target, fence)
        now = time.time()
        first: Rows = yield Query(
            ADMIT_PUT,
            {"tk": tk, "ns": ns, "id": encoded.checkpoint_id, "parent": encoded.parent_id},
            fetch=True,
            write=True,
        )
        expired = yield from self._admit(
            target, now, encoded.checkpoint_id, lambda _: encoded.parent_id, first[0]
        )
        if expired is None:
            return True
        known, parent_seeds, pending = first[0][5:]
        if encoded.refers and parent_seeds is None:
            # Its parent is gone (a write that revived the expired thread purged it,
            # with rows this checkpoint names): nothing of it is written. What expired
            # goes all the same.
            if expired:
                yield from self._purge_expired(tk, ns, encoded.checkpoint_id)
                yield from self.threads.revived(tk, record)
            return False
        yield from _insert_rows(
            "INSERT INTO lgmp_blobs (thread_key, checkpoint_ns, channel, version, type, blob)",
            """ON CONFLICT (thread_key, checkpoint_ns, channel, version) DO UPDATE SET
                type = excluded.type, blob = excluded.blob""",
            [
                (tk, ns, b.channel, b.version, b.type, b.data)
                for b in encoded.blobs
                if b.type != EMPTY
            ],
        )
        yield from _insert_rows(
            "INSERT INTO lgmp_items (thread_key, checkpoint_ns, item_id, type, data)",
            "ON CONFLICT DO NOTHING",
            [(tk, ns, iid, typ, data) for iid, (typ, data) in encoded.items.items()],
        )
        yield from _insert_rows(
            "INSERT INTO lgmp_nodes (thread_key, checkpoint_ns, node_id, children)",
            "ON CONFLICT DO NOTHING",
            [(tk, ns, nid, b"".join(children)) for nid, children in encoded.nodes.items()],
        )
        seeds = self._delta_seeds(encoded, parent_seeds)
        versions = json.dumps(encoded.channel_versions)
        metadata_text = json.dumps(encoded.metadata_json)
        # equal maps (built in the same order) dump to the same text: store no second copy
        same = encoded.versions_json == encoded.channel_versions
        native = None if same else json.dumps(encoded.versions_json)
        yield Query(
            """
            INSERT INTO lgmp_checkpoints (thread_key, checkpoint_ns, checkpoint_id,
                parent_checkpoint_id, run_id, checkpoint_type, checkpoint, metadata_type,
                metadata, metadata_json, channel_versions, versions_json, delta_seeds)
            VALUES (:tk, :ns, :id, :parent, :run_id, :c_type, :c_blob, :m_type, :m_blob,
                :m_json, :versions, :native, :seeds)
            ON CONFLICT (thread_key, checkpoint_ns, checkpoint_id) DO UPDATE SET
                parent_checkpoint_id = excluded.parent_checkpoint_id,
                run_id = excluded.run_id,
                checkpoint_type = excluded.checkpoint_type,
                checkpoint = excluded.checkpoint,
                metadata_type = excluded.metadata_type,
                metadata = excluded.metadata,
                metadata_json = excluded.metadata_json,
                channel_versions = excluded.channel_versions,
                versions_json = excluded.versions_json,
                delta_seeds = excluded.delta_seeds""",
            {
                "tk": tk,
                "ns": ns,
                "id": encoded.checkpoint_id,
                "parent": encoded.parent_id,
                "run_id": encoded.run_id,
                "c_type": encoded.checkpoint[0],
                "c_blob": encoded.checkpoint[1],
                "m_type": encoded.metadata[0],
                "m_blob": encoded.metadata[1],
                "m_json": metadata_text,
                "versions": versions,
                "native": native,
                "seeds": seeds,
            },
        )
        tid = _id_bytes(target.thread_id)
        yield from self.threads.put(
            tk,
            tid,
            encoded.checkpoint_id,
            record,
            fresh=not known,
            pending=bool(pending),
            # the checkpoint row's, unless the record's is another (sealed) one
            metadata_text=metadata_text if record.metadata is encoded.metadata_json else None,
        )
        if expired:
            yield from self._purge_expired(tk, ns, encoded.checkpoint_id)
            yield from self.threads.revived(tk, record)
        if self.settings.keep_last is not None:
            yield from self._trim(tk, ns, self.settings.keep_last)
            yield from self.threads.refresh([tk])
        return True

    def put_writes(
        self,
        target: Target,
        writes: list[EncodedWrite],
        fence: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Query, None]:
        if not writes:
            return
        cid = target.checkpoint_id
        assert cid is not None
        tk, ns = target.thread_key, target.checkpoint_ns
        _no_nul(ns, "checkpoint_ns")
        if fence is not None:
            yield from self._fence_check(target, fence)
        task_id, path = writes[0].task_id, writes[0].task_path
        rows = [(tk, ns, cid, task_id, w.idx, path, w.channel, w.type, w.data) for w in writes]
        if (
            self.settings.ttl_seconds is None
            and len(rows) * len(rows[0]) < MAX_PARAMS
            and not writes_of_interest(writes)
        ):
            # The common case in one statement, atomic by itself: a named thread without
            # expiry or tombstone needs no decision and no write to its row. Nothing
            # stored (not admitted, or every row already there): the full path decides.
            head, tail = WRITES_ADMITTED
            stored = yield Query(
                _values_sql(head, len(rows[0]), len(rows), tail),
                [*(x for r in rows for x in r), tk],
                write=True,
                alone=True,
            )
            if stored:
                return
        first: Rows = yield Query(ADMIT_WRITES, {"tk": tk}, fetch=True, write=True)
        expired = yield from self._admit(
            target,
            time.time(),
            cid,
            lambda live_after: None if cid > live_after else cid,
            first[0],
            owner,
        )
        if expired is None:
            return
        yield from _insert_rows(*WRITES_INSERT, rows)
        if writes_of_interest(writes):
            yield from self.threads.writes(tk, _id_bytes(target.thread_id), ns, cid)
        if expired:
            yield from self._purge_expired(tk, ns, cid)
            yield from self.threads.refresh([tk])

    # -- the fence (see ..fence) ------------------------------------------------------

    @staticmethod
    def _fence_row(tk: bytes, write: bool) -> Plan[Query, FenceState | None]:
        """The thread's fence; with ``write`` it opens the write transaction (``BEGIN
        IMMEDIATE``), so no other writer comes in before this plan commits."""
        rows: Rows = yield Query(
            "SELECT owner, token, expires_at FROM lgmp_fences WHERE thread_key = ?",
            (tk,),
            fetch=True,
            write=write,
        )
        return FenceState(*rows[0]) if rows else None

    def _fence_check(self, target: Target, claim: Claim) -> Plan[Query, None]:
        """The write's first statement: the rest of it runs in the same transaction."""
        check(target.thread_id, claim, (yield from self._fence_row(target.thread_key, True)))

    def fence_take(
        self, thread_id: str, owner: str, lease_s: float, force: bool, run: bool = False
    ) -> Plan[Query, tuple[FenceState | None, FenceState]]:
        tk, now = thread_key(thread_id), time.time()
        before = yield from self._fence_row(tk, True)
        if not may_take(before, owner, now, force):
            assert before is not None
            return before, before
        after = FenceState(owner, next_token(before, owner, now_us()), now + lease_s)
        yield Query(
            """INSERT INTO lgmp_fences (thread_key, owner, token, expires_at) VALUES (?, ?, ?, ?)
            ON CONFLICT (thread_key) DO UPDATE SET owner = excluded.owner,
                token = excluded.token, expires_at = excluded.expires_at""",
            (tk, owner, after.token, after.expires_at),
        )
        return before, after

    def fence_renew(
        self, thread_id: str, owner: str, token: int, lease_s: float
    ) -> Plan[Query, FenceState | None]:
        tk = thread_key(thread_id)
        current = yield from self._fence_row(tk, True)
        if current is None or current.owner != owner or current.token != token:
            return current
        yield Query(
            "UPDATE lgmp_fences SET expires_at = ? WHERE thread_key = ?",
            (time.time() + lease_s, tk),
        )
        return (yield from self._fence_row(tk, True))

    def fence_release(self, thread_id: str, owner: str, token: int) -> Plan[Query, bool]:
        count = yield Query(
            "UPDATE lgmp_fences SET owner = NULL, expires_at = NULL "
            "WHERE thread_key = ? AND owner = ? AND token = ?",
            (thread_key(thread_id), owner, token),
            write=True,
        )
        return bool(count)

    def fence_state(self, thread_id: str) -> Plan[Query, FenceState | None]:
        return (yield from self._fence_row(thread_key(thread_id), False))

    def _purge_expired(
        self, tk: bytes, checkpoint_ns: str, checkpoint_id: str
    ) -> Plan[Query, None]:
        """Drop what an expired thread held when a write revived it: all but the rows of
        the written checkpoint. Not only what sorts before it: a late write (LangGraph
        stores a task's writes in the background) names a checkpoint older than those
        the thread held, which would otherwise be returned again, expired as they are."""
        for table in ("lgmp_writes", "lgmp_checkpoints"):
            yield Query(
                f"DELETE FROM {table} WHERE thread_key = ? "
                "AND NOT (checkpoint_ns = ? AND checkpoint_id = ?)",
                (tk, checkpoint_ns, checkpoint_id),
            )
        unused = """thread_key = :tk AND (checkpoint_ns, channel, version) NOT IN (
            SELECT c.checkpoint_ns, v.key, v.value
            FROM lgmp_checkpoints c, json_each(c.channel_versions) v WHERE c.thread_key = :tk)"""
        yield from self._delete_blobs(unused, {"tk": tk}, tk)

    def _collect_blobs(self, tk: bytes, freed: set[tuple[str, str, str]]) -> Plan[Query, None]:
        """Delete blobs that deleted checkpoints used and no remaining checkpoint uses."""
        if not freed:
            return
        unused = """thread_key = :tk AND (checkpoint_ns, channel, version) IN (
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                   json_extract(value, '$[2]')
            FROM json_each(:freed)
            EXCEPT
            SELECT c.checkpoint_ns, v.key, v.value
            FROM lgmp_checkpoints c, json_each(c.channel_versions) v
            WHERE c.thread_key = :tk AND c.checkpoint_ns IN (
                SELECT json_extract(value, '$[0]') FROM json_each(:freed)))"""
        yield from self._delete_blobs(unused, {"tk": tk, "freed": json.dumps(sorted(freed))}, tk)

    def _delete_blobs(self, where: str, params: dict[str, Any], tk: bytes) -> Plan[Query, None]:
        """Delete the blobs ``where`` picks, then the list items only they reached."""
        lists: Rows = yield Query(
            f"SELECT DISTINCT checkpoint_ns FROM lgmp_blobs WHERE {where} AND type = '{LIST_TYPE}'",
            params,
            fetch=True,
        )
        yield Query(f"DELETE FROM lgmp_blobs WHERE {where}", params)
        for (ns,) in sorted(lists):
            yield from self._collect_items(tk, ns)

    def _collect_items(self, tk: bytes, checkpoint_ns: str) -> Plan[Query, None]:
        """Delete list items, pages and spines no remaining list version reaches."""
        params = {"tk": tk, "ns": checkpoint_ns}
        yield Query(
            f"""
            WITH RECURSIVE {SLOTS}, {SPINE_PAGES}, live(id) AS (
                SELECT substr(n.children, s.g * {ID_SIZE} + 1, {ID_SIZE})
                FROM lgmp_nodes n JOIN pages p ON n.node_id = p.id
                JOIN slots s ON s.g * {ID_SIZE} < length(n.children)
                WHERE n.thread_key = :tk AND n.checkpoint_ns = :ns
                UNION
                SELECT substr(lb.blob, {ID_SIZE + 1} + s.g * {ID_SIZE}, {ID_SIZE})
                FROM lb JOIN slots s ON {ID_SIZE} + s.g * {ID_SIZE} < length(lb.blob)
            )
            DELETE FROM lgmp_items WHERE thread_key = :tk AND checkpoint_ns = :ns
                AND item_id NOT IN (SELECT id FROM live)""",
            params,
        )
        yield Query(
            f"""
            WITH RECURSIVE {SPINE_PAGES}
            DELETE FROM lgmp_nodes WHERE thread_key = :tk AND checkpoint_ns = :ns
                AND node_id NOT IN (SELECT id FROM spines UNION ALL SELECT id FROM pages)""",
            params,
        )

    def _trim(
        self, tk: bytes, checkpoint_ns: str, keep: int, sweep: bool = False
    ) -> Plan[Query, None]:
        """Keep the newest ``keep`` checkpoints of one thread namespace.

        As on PostgreSQL: a ``DeltaChannel`` value is rebuilt by replaying writes back to
        the checkpoint holding its last snapshot (its seed, recorded per channel at put
        time in ``delta_seeds``). Older checkpoints a kept one still replays from stay
        stored as ``replay_only``: read by delta replay, never returned by
        ``get_tuple``/``list``. Everything older goes, with its writes and the blobs
        nothing else uses. A kept checkpoint whose parent is deleted gets no parent.

        "Its writes" are every write below the floor: also those that landed after an
        earlier trim deleted their checkpoint (LangGraph stores a task's writes on a
        background thread), which nothing reads. A put's trim takes them when it deletes
        checkpoints (once the window is full, nearly every put), so a put below its
        window sends no statement more; ``sweep`` (prune) takes them in any case, for a
        late write after a run's last put. Writes that come before their checkpoint are
        for a newer one, above the floor: kept.
        """
        where = "thread_key = :tk AND checkpoint_ns = :ns"
        kept: Rows = yield Query(
            f"SELECT checkpoint_id, delta_seeds FROM lgmp_checkpoints WHERE {where} "
            "ORDER BY checkpoint_id DESC LIMIT :keep",
            {"tk": tk, "ns": checkpoint_ns, "keep": keep},
            fetch=True,
        )
        if not kept:
            return
        oldest = kept[-1][0]
        seeds = [s for _, raw in kept if raw for s in json.loads(raw).values()]
        params = {"tk": tk, "ns": checkpoint_ns, "oldest": oldest, "floor": min([oldest, *seeds])}
        gone: Rows = yield Query(
            f"SELECT channel_versions FROM lgmp_checkpoints WHERE {where} "
            "AND checkpoint_id < :floor",
            params,
            fetch=True,
        )
        if gone or sweep:  # one range of the primary key
            yield Query(f"DELETE FROM lgmp_writes WHERE {where} AND checkpoint_id < :floor", params)
        if gone:
            yield Query(
                f"DELETE FROM lgmp_checkpoints WHERE {where} AND checkpoint_id < :floor", params
            )
        yield Query(
            f"""
            UPDATE lgmp_checkpoints SET
                replay_only = checkpoint_id < :oldest,
                parent_checkpoint_id = CASE WHEN parent_checkpoint_id < :floor
                    THEN NULL ELSE parent_checkpoint_id END
            WHERE {where} AND checkpoint_id >= :floor
                AND ((checkpoint_id < :oldest AND NOT replay_only)
                     OR parent_checkpoint_id < :floor)""",
            params,
        )
        freed = {(checkpoint_ns, ch, ver) for (raw,) in gone for ch, ver in json.loads(raw).items()}
        yield from self._collect_blobs(tk, freed)

    # -- deletion and maintenance -----------------------------------------------------

    def _delete_threads(self, tks: Sequence[bytes]) -> Plan[Query, None]:
        """Delete threads whole, leaving a tombstone (no content) that refuses late writes."""
        now = time.time()
        for tk in sorted(set(tks)):
            yield Query(
                """
                UPDATE lgmp_threads SET thread_id = NULL, expires_at = NULL, deleted_at = :now,
                    refused = NULL, owner = NULL,
                    live_after = max(
                        coalesce(live_after, ''),
                        coalesce((SELECT max(checkpoint_id) FROM lgmp_checkpoints
                                  WHERE thread_key = :tk), ''),
                        coalesce((SELECT max(checkpoint_id) FROM lgmp_writes
                                  WHERE thread_key = :tk), ''), :deleted)
                WHERE thread_key = :tk""",
                {"tk": tk, "now": now, "deleted": deletion_id()},
                write=True,
            )
            for table in (*THREAD_TABLES, "lgmp_fences"):  # deletion is final: no owner
                yield Query(f"DELETE FROM {table} WHERE thread_key = ?", (tk,))

    def delete_thread(self, thread_id: str) -> Plan[Query, None]:
        yield from self._delete_threads([thread_key(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[Query, None]:
        freed: dict[bytes, set[tuple[str, str, str]]] = defaultdict(set)
        for chunk in _chunks(list(dict.fromkeys(run_ids))):
            match = f"run_id IN ({_marks(len(chunk))})"
            gone: Rows = yield Query(
                "SELECT thread_key, checkpoint_ns, checkpoint_id, channel_versions "
                f"FROM lgmp_checkpoints WHERE {match}",
                chunk,
                fetch=True,
                write=True,
            )
            if not gone:
                continue
            yield Query(
                "DELETE FROM lgmp_writes "
                "WHERE thread_key = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                [(tk, ns, cid) for tk, ns, cid, _ in gone],
                many=True,
            )
            yield Query(f"DELETE FROM lgmp_checkpoints WHERE {match}", chunk)
            for tk, ns, _, raw in gone:
                freed[bytes(tk)].update((ns, ch, ver) for ch, ver in json.loads(raw).items())
        for tk in sorted(freed):
            yield from self._collect_blobs(tk, freed[tk])
        yield from self.threads.refresh(freed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[Query, None]:
        now = time.time()
        src, dst = thread_key(source_thread_id), thread_key(target_thread_id)
        ttl = self.settings.ttl_seconds
        visible: Rows = yield Query(
            f"SELECT 1 FROM lgmp_threads t WHERE t.thread_key = :src AND {VISIBLE}",
            {"src": src, "now": now},
            fetch=True,
            write=True,
        )
        if not visible:
            return
        yield Query(
            """
            INSERT INTO lgmp_threads (thread_key, thread_id, expires_at, owner)
            VALUES (?, ?, ?, (SELECT owner FROM lgmp_threads WHERE thread_key = ?))
            ON CONFLICT (thread_key) DO UPDATE SET thread_id = excluded.thread_id,
                expires_at = excluded.expires_at,
                owner = coalesce(excluded.owner, lgmp_threads.owner)""",
            (dst, _id_bytes(target_thread_id), None if ttl is None else now + ttl, src),
        )
        columns = {
            "lgmp_blobs": "checkpoint_ns, channel, version, type, blob",
            "lgmp_writes": "checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, "
            "type, blob",
            "lgmp_items": "checkpoint_ns, item_id, type, data",
            "lgmp_nodes": "checkpoint_ns, node_id, children",
            "lgmp_checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
            "checkpoint_type, checkpoint, metadata_type, metadata, metadata_json, "
            "channel_versions, versions_json, delta_seeds, replay_only",
        }
        for table, cols in columns.items():
            yield Query(
                f"INSERT INTO {table} (thread_key, {cols}) SELECT ?, {cols} FROM {table} "
                "WHERE thread_key = ? ON CONFLICT DO NOTHING",
                (dst, src),
            )
        yield from self.threads.copy(src, dst)

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Query, None]:
        if not thread_ids:
            return
        tks = sorted({thread_key(t) for t in thread_ids})
        if not keep_latest:
            yield from self._delete_threads(tks)
            return
        for tk in tks:
            namespaces: Rows = yield Query(
                "SELECT DISTINCT checkpoint_ns FROM lgmp_checkpoints WHERE thread_key = ?",
                (tk,),
                fetch=True,
                write=True,
            )
            for (ns,) in namespaces:
                yield from self._trim(tk, ns, 1, sweep=True)
        yield from self.threads.refresh(tks)

    def sweep_expired(self, batch_size: int) -> Plan[Query, tuple[int, bool]]:
        """One bounded batch of expired threads (and old tombstones), deleted whole.

        An expired thread on a deleted id keeps that deletion's tombstone, bare, to its
        own end: runs that predate the deletion stay refused.
        """
        now, old = time.time(), time.time() - TOMBSTONE_SECONDS
        rows: Rows = yield Query(
            """SELECT thread_key, thread_id IS NOT NULL,
                live_after IS NOT NULL AND coalesce(deleted_at >= :old, 0)
            FROM lgmp_threads
            WHERE expires_at <= :now OR (thread_id IS NULL AND deleted_at < :old)
            ORDER BY thread_key LIMIT :n""",
            {"now": now, "old": old, "n": batch_size},
            fetch=True,
            write=True,
        )
        live = sum(1 for _, named, _ in rows if named)
        for chunk in _chunks(rows):
            keys = [bytes(tk) for tk, _, _ in chunk]
            marks = _marks(len(keys))
            for table in (*THREAD_TABLES, "lgmp_fences"):
                yield Query(f"DELETE FROM {table} WHERE thread_key IN ({marks})", keys)
            kept = [bytes(tk) for tk, _, tomb in chunk if tomb]
            if kept:
                yield Query(
                    "UPDATE lgmp_threads SET thread_id = NULL, expires_at = NULL, owner = NULL "
                    f"WHERE thread_key IN ({_marks(len(kept))})",
                    kept,
                )
            gone = [bytes(tk) for tk, _, tomb in chunk if not tomb]
            if gone:
                yield Query(
                    f"DELETE FROM lgmp_threads WHERE thread_key IN ({_marks(len(gone))})", gone
                )
        total = len(rows)
        yield self.threads.sweep_transcripts(batch_size)
        return int(live), int(total) >= batch_size
