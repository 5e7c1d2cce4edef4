"""The commands, each thin over the Python API (``copy_threads``, ``delete_thread``, ...)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import __version__
from ..errors import InvalidConfigError
from ..transfer.migration import CopyProgress, copy_threads, list_thread_ids
from . import admin
from .jsonl import export_thread, import_thread
from .opening import Opened, open_url
from .output import (
    FOUND_PROBLEMS,
    NOT_FOUND,
    OK,
    UNSUPPORTED,
    USAGE,
    CliError,
    Progress,
    confirm,
    emit_json,
    human_bytes,
    table,
)


def _cfg(thread_id: str, ns: str | None = None, cid: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        c["checkpoint_ns"] = ns
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _ours(opened: Opened, what: str) -> None:
    if opened.memory is None or opened.backend == "memory":
        raise CliError(f"{what} works on our backends, not on {opened.url}", UNSUPPORTED)


# -- info ----------------------------------------------------------------------------------


def info(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        _ours(opened, "info")
        out: dict[str, Any] = {
            "url": opened.url,
            "backend": opened.backend,
            "package_version": __version__,
        }
        if opened.backend == "redis":
            facts = admin.redis_info(opened)
            scan = admin.redis_scan(opened)
            out.update(
                server_version=facts.get("redis_version"),
                schema_version="n/a (Redis keys need no migrations)",
                maxmemory_policy=facts.get("maxmemory_policy"),
                used_memory=facts.get("used_memory"),
                threads=scan["threads"],
                keys=sum(scan["keys_per_kind"].values()),
                bytes=sum(scan["per_kind"].values()),
            )
        else:
            with admin.sql(opened) as db:
                sizes = db.table_sizes()
                out.update(
                    server_version=db.server_version(),
                    schema_version=db.versions(),
                    package_schema_version=admin.latest_versions(opened.backend),
                    threads=db.rows(
                        f"SELECT count(*) FROM {db.table('lgmp_threads')} "
                        "WHERE thread_id IS NOT NULL"
                    )[0][0]
                    if "lgmp_threads" in sizes
                    else 0,
                    checkpoints=sizes.get("lgmp_checkpoints", (0, 0))[0],
                    store_items=sizes.get("lgmp_store", (0, 0))[0],
                    bytes=sum(b for _, b in sizes.values()),
                    tables={k: {"rows": r, "bytes": b} for k, (r, b) in sizes.items()},
                )
        if args.json:
            emit_json(out)
        else:
            for key, value in out.items():
                if key == "tables":
                    continue
                if key in ("bytes", "used_memory") and isinstance(value, int):
                    value = f"{value} ({human_bytes(value)})"
                print(f"{key.replace('_', ' ')}: {value}")
    return OK


# -- schema --------------------------------------------------------------------------------


def setup(args: argparse.Namespace) -> int:
    if getattr(args, "sql", False):
        return _schema_sql(args)
    with open_url(args.url) as opened:
        _ours(opened, "setup")
        before = _versions(opened)
    with open_url(args.url, setup=True) as opened:
        after = _versions(opened)
    if args.json:
        emit_json({"url": opened.url, "before": before, "after": after})
    else:
        for component in after:
            print(f"{component}: schema version {before.get(component)} -> {after[component]}")
    return OK


def _versions(opened: Opened) -> dict[str, Any]:
    if opened.backend == "redis":
        return {}
    with admin.sql(opened) as db:
        return db.versions()


def _schema_sql(args: argparse.Namespace) -> int:
    """The statements ``setup`` would run, printed, not run (alembic's ``--sql``)."""
    with open_url(args.url) as opened:
        _ours(opened, "migrate-schema --sql")
        if opened.backend == "redis":
            print("-- Redis: nothing to migrate (no schema)")
            return OK
        with admin.sql(opened) as db:
            for what, plan in (
                ("checkpointer", opened.saver._plans.setup()),
                ("store", opened.store._plans.setup()),
            ):
                print(f"-- {what} of {opened.url}")
                _print_plan(db, plan)
    return OK


def _print_plan(db: admin._Sql, plan: Any) -> None:
    """Drive a setup plan: reads run for real (the current version), the rest print."""
    answer: Any = None
    try:
        while True:
            query = plan.send(answer)
            answer = None
            fetch = getattr(query, "fetch", False)
            statements = getattr(query, "script", ()) or (query.sql,)
            for statement in statements[:-1]:  # a script's: none has parameters
                print(f"{_dedent(statement.strip())};")
            text = statements[-1].strip()
            if fetch:  # a script's read is its last statement
                try:
                    answer = db.rows(text, tuple(query.params or ()))
                except Exception:  # its bookkeeping table does not exist yet
                    if db.pg:
                        db.conn.rollback()
                    answer = [(-1, True)]  # no version; setup would create the table
                continue
            params = query.params or ()
            if params and db.pg:
                import psycopg

                text = psycopg.ClientCursor(db.conn).mogrify(text, params)
            elif params:
                text += f"  -- parameters: {tuple(params)!r}"
            print(f"{_dedent(text)};")
    except StopIteration:
        pass


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indent = min((len(x) - len(x.lstrip()) for x in lines[1:] if x.strip()), default=0)
    return "\n".join([lines[0], *(x[indent:] for x in lines[1:])]) if lines else text


# -- threads ---------------------------------------------------------------------------------


def threads_ls(args: argparse.Namespace) -> int:
    """The thread index, newest first: ``saver.threads.search`` with the filters given."""
    metadata = _json_object("--metadata", args.metadata) if args.metadata else {}
    with open_url(args.url) as opened:
        _ours(opened, "threads ls")
        index = opened.saver.threads
        if args.user:
            metadata[index.user_key] = args.user
        found = index.search(
            metadata=metadata or None, status=args.status, limit=args.limit, offset=args.offset
        )
        records = [_record(r) for r in found]
        if args.json:
            emit_json(records)
        else:
            rows = [
                [r["thread_id"], r["status"], r["updated_at"], r["title"] or ""] for r in records
            ]
            table(rows, ["thread_id", "status", "updated_at", "title"])
    return OK


def items_ls(args: argparse.Namespace) -> int:
    """The store's items under ``--namespace``, oldest update first; with ``--stale-days``
    only those whose last write is older than that (the notes' staleness review). Reads
    every item under the prefix, a page at a time: an admin's occasional look."""
    from datetime import datetime, timedelta, timezone

    if args.stale_days is not None and not args.stale_days >= 0:
        raise CliError(f"--stale-days must be 0 or more, got {args.stale_days:g}", USAGE)
    if args.limit < 0 or args.offset < 0:
        raise CliError("--limit and --offset must be 0 or more", USAGE)
    prefix = tuple(part for part in args.namespace.split("/") if part)
    now = datetime.now(timezone.utc)
    cutoff = None
    if args.stale_days is not None:
        try:
            cutoff = now - timedelta(days=args.stale_days)
        except OverflowError:  # before year 1 (or inf): nothing is that old
            cutoff = datetime.min.replace(tzinfo=timezone.utc)
    found = []
    with open_url(args.url) as opened:
        store = opened.store
        offset = 0
        while page := store.search(prefix, limit=ITEMS_PAGE, offset=offset):
            offset += len(page)
            found += [item for item in page if cutoff is None or item.updated_at < cutoff]
    found.sort(key=lambda item: (item.updated_at, item.namespace, item.key))
    shown = found[args.offset : args.offset + args.limit]
    records = [
        {
            "namespace": list(item.namespace),
            "key": item.key,
            "created_at": item.created_at.isoformat(),
            "updated_at": item.updated_at.isoformat(),
            "days_since_update": round((now - item.updated_at).total_seconds() / 86400, 1),
            "value": item.value,
        }
        for item in shown
    ]
    if args.json:
        emit_json(records)
    else:
        rows = [
            ["/".join(r["namespace"]), r["key"], r["updated_at"], r["days_since_update"]]
            for r in records
        ]
        table(rows, ["namespace", "key", "updated_at", "days"])
        if len(found) > len(shown):
            print(
                f"({len(found)} items in all; --limit and --offset page through them)",
                file=sys.stderr,
            )
    return OK


ITEMS_PAGE = 500


def _json_object(option: str, text: str) -> dict[str, Any]:
    """``text`` as a JSON object, or a usage error (2) saying what is wrong with it."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f'{option} is not JSON ({exc}): give an object, e.g. \'{{"k": "v"}}\'', USAGE
        ) from None
    if not isinstance(value, dict):
        raise CliError(
            f'{option} must be a JSON object, e.g. \'{{"k": "v"}}\', got {text!r}', USAGE
        )
    return value


def _record(record: Any) -> dict[str, Any]:
    """A thread record as JSON can carry it: interrupts as ``{id, value}`` objects."""
    out = dict(record)
    out["interrupts"] = {
        task: [{"id": i.id, "value": i.value} for i in interrupts]
        for task, interrupts in record["interrupts"].items()
    }
    return out


# -- approvals -------------------------------------------------------------------------------


def approvals(args: argparse.Namespace) -> int:
    """``approvals ls``: the queue, oldest first; ``approvals expire``: mark overdue ones."""
    from ..approvals import Approvals

    with open_url(args.url) as opened:
        _ours(opened, "approvals")
        queue = Approvals(opened.saver, opened.store, window=args.window_hours * 3600)
        if args.action == "expire":
            confirm("mark every approval past its window expired", args.yes)
            meter = Progress("approvals expired")
            expired = queue.expire_overdue(batch_size=args.batch_size, progress=meter.update)
            meter.close()
            if args.json:
                emit_json({"expired": expired})
            else:
                print(f"expired {expired}")
            return OK
        status = None if args.status == "all" else args.status
        found = queue.list(
            user_id=args.user,
            action=args.action_name,
            status=status,
            limit=args.limit,
            offset=args.offset,
        )
        rows = [
            {
                "id": a.id,
                "thread_id": a.thread_id,
                "user_id": a.user_id,
                "status": a.status,
                "action": a.action,
                "args": a.args,
                "created_at": a.created_at,
                "expires_at": a.expires_at,
            }
            for a in found
        ]
        if args.json:
            emit_json(rows)
        else:
            table(
                [[r["id"], r["thread_id"], r["user_id"], r["status"], r["action"],
                  r["expires_at"]] for r in rows],
                ["id", "thread_id", "user_id", "status", "action", "expires_at"],
            )  # fmt: skip
    return OK


def _history(saver: Any, thread_id: str, limit: int | None) -> list[Any]:
    out = []
    for t in saver.list(_cfg(thread_id)):
        out.append(t)
        if limit is not None and len(out) >= limit:
            break
    return out


def thread_show(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        saver = opened.saver
        latest = saver.get_tuple(_cfg(args.thread_id, ""))
        if latest is None:
            raise CliError(f"no thread {args.thread_id!r} at {opened.url}", NOT_FOUND)
        history = _history(saver, args.thread_id, args.limit)
        rows = []
        for t in history:
            c = t.config["configurable"]
            size = len(saver.serde.dumps_typed(t.checkpoint)[1])
            parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            rows.append(
                {
                    "checkpoint_ns": c.get("checkpoint_ns", ""),
                    "checkpoint_id": c["checkpoint_id"],
                    "parent_checkpoint_id": parent,
                    "step": t.metadata.get("step"),
                    "source": t.metadata.get("source"),
                    "ts": t.checkpoint.get("ts"),
                    "writes": len(t.pending_writes or ()),
                    "bytes": size,
                }
            )
        channels = []
        for name, value in sorted(latest.checkpoint.get("channel_values", {}).items()):
            data = saver.serde.dumps_typed(value)[1]
            length = len(value) if isinstance(value, (list, dict, str)) else None
            channels.append(
                {"channel": name, "type": type(value).__name__, "items": length, "bytes": len(data)}
            )
        interrupts = [
            {"task_id": task_id, "value": repr(value)[:200]}
            for task_id, channel, value in latest.pending_writes or ()
            if channel == "__interrupt__"
        ]
        out = {
            "thread_id": args.thread_id,
            "latest_checkpoint_id": latest.config["configurable"]["checkpoint_id"],
            "metadata": latest.metadata,
            "channels": channels,
            "pending_writes": len(latest.pending_writes or ()),
            "interrupts": interrupts,
            "history": rows,
        }
        if args.json:
            emit_json(out)
            return OK
        print(f"thread {args.thread_id} (latest checkpoint {out['latest_checkpoint_id']})")
        print(f"pending writes: {out['pending_writes']}, interrupts: {len(interrupts)}")
        for i in interrupts:
            print(f"  interrupt in task {i['task_id']}: {i['value']}")
        print("\nstate:")
        table(
            [[c["channel"], c["type"], c["items"], c["bytes"]] for c in channels],
            ["channel", "type", "items", "bytes"],
        )
        first = f", first {args.limit}" if args.limit else ""
        print(f"\nhistory (newest first{first}):")
        table(
            [
                [
                    r["checkpoint_ns"] or "-",
                    r["checkpoint_id"],
                    r["step"],
                    r["source"],
                    r["writes"],
                    r["bytes"],
                ]
                for r in rows
            ],
            ["ns", "checkpoint_id", "step", "source", "writes", "bytes"],
        )
    return OK


def thread_export(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        if opened.saver.get_tuple(_cfg(args.thread_id, "")) is None:
            raise CliError(f"no thread {args.thread_id!r} at {opened.url}", NOT_FOUND)
        bar = Progress("exported checkpoints")
        out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
        try:
            report = export_thread(
                opened.saver,
                args.thread_id,
                out,
                progress=lambda p: bar.update(p.checkpoints_copied),
            )
        finally:
            bar.close()
            if out is not sys.stdout:
                out.close()
    print(
        f"exported {args.thread_id}: {report.checkpoints_copied} checkpoints, "
        f"{report.writes_copied} writes",
        file=sys.stderr,
    )
    return OK


def thread_import(args: argparse.Namespace) -> int:
    source = open(args.input, encoding="utf-8") if args.input != "-" else sys.stdin  # noqa: SIM115
    try:
        with open_url(args.url) as opened:
            first = source.readline()
            header = json.loads(first) if first.strip() else {}
            tid = args.thread or header.get("thread_id")
            if tid and opened.saver.get_tuple(_cfg(str(tid), "")) is not None:
                raise CliError(
                    f"thread {tid!r} already exists at {opened.url}: delete it first, or "
                    "import it as another thread with --thread NEW_ID"
                )
            import io

            bar = Progress("imported checkpoints")
            try:
                tid, checkpoints, writes = import_thread(
                    opened.saver, _Chain(io.StringIO(first), source), args.thread, bar.update
                )
            finally:
                bar.close()
    finally:
        if source is not sys.stdin:
            source.close()
    print(f"imported {tid}: {checkpoints} checkpoints, {writes} writes", file=sys.stderr)
    return OK


class _Chain:
    """Two text streams read as one (the header was read already to check the thread)."""

    def __init__(self, *parts: Any) -> None:
        self.parts = list(parts)

    def readline(self) -> str:
        while self.parts:
            line = self.parts[0].readline()
            if line:
                return str(line)
            self.parts.pop(0)
        return ""

    def __iter__(self) -> Any:
        return iter(self.readline, "")


def thread_delete(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        if opened.saver.get_tuple(_cfg(args.thread_id, "")) is None:
            raise CliError(f"no thread {args.thread_id!r} at {opened.url}", NOT_FOUND)
        confirm(
            f"Delete thread {args.thread_id!r} and all its checkpoints at {opened.url}?",
            args.yes,
            expected=args.thread_id,
        )
        opened.saver.delete_thread(args.thread_id)
    print(f"deleted thread {args.thread_id}", file=sys.stderr)
    return OK


# -- space -----------------------------------------------------------------------------------


def stats(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        _ours(opened, "stats")
        if opened.backend == "redis":
            scan = admin.redis_scan(opened)
            top = scan["per_tag"].most_common(args.top)
            found = admin.redis_threads(opened, [t for t, _ in top])
            threads = [
                {"thread_id": found[t][0], "checkpoints": found[t][1], "bytes": b} for t, b in top
            ]
            kinds = {
                k: {"keys": scan["keys_per_kind"][k], "bytes": b}
                for k, b in sorted(scan["per_kind"].items())
            }
        else:
            with admin.sql(opened) as db:
                threads = db.biggest_threads(args.top)
                kinds = {k: {"rows": r, "bytes": b} for k, (r, b) in db.table_sizes().items()}
        out = {"url": opened.url, "biggest_threads": threads, "bytes_per_kind": kinds}
        if args.json:
            emit_json(out)
            return OK
        print(f"biggest threads at {opened.url}:")
        table(
            [
                [t["thread_id"], t["checkpoints"], t["bytes"], human_bytes(t["bytes"])]
                for t in threads
            ],
            ["thread_id", "checkpoints", "bytes", "size"],
        )
        print("\nbytes per kind:")
        count = "keys" if opened.backend == "redis" else "rows"
        table(
            [[k, v[count], v["bytes"], human_bytes(v["bytes"])] for k, v in kinds.items()],
            ["kind", count, "bytes", "size"],
        )
    return OK


def sweep(args: argparse.Namespace) -> int:
    with open_url(args.url) as opened:
        _ours(opened, "sweep")
        threads = opened.saver.sweep_expired(args.batch_size)
        items = opened.store.sweep_ttl(args.batch_size) if hasattr(opened.store, "sweep_ttl") else 0
    out = {"threads_deleted": threads, "items_deleted": items}
    if args.json:
        emit_json(out)
    else:
        print(f"swept {threads} expired threads, {items} expired store items")
    return OK


def prune(args: argparse.Namespace) -> int:
    if not args.keep_latest:
        raise CliError("prune needs --keep-latest (the only strategy the CLI offers)", 2)
    with open_url(args.url) as opened:
        ids = list(args.thread_ids) or (list_thread_ids(opened.saver) if args.all else [])
        if not ids:
            raise CliError("name the threads to prune, or give --all", 2)
        what = f"{len(ids)} threads" if len(ids) > 1 else f"thread {ids[0]!r}"
        confirm(f"Prune {what} at {opened.url} to their latest checkpoint?", args.yes)
        bar = Progress("pruned threads", every=1000)
        try:
            for n in range(0, len(ids), args.batch_size):
                opened.saver.prune(ids[n : n + args.batch_size], strategy="keep_latest")
                bar.update(min(n + args.batch_size, len(ids)), total=len(ids))
        finally:
            bar.close()
    print(f"pruned {len(ids)} threads to their latest checkpoint", file=sys.stderr)
    return OK


# -- migrate ---------------------------------------------------------------------------------


def migrate(args: argparse.Namespace) -> int:
    with open_url(args.source) as source, open_url(args.target, setup=True) as target:
        if args.store and (source.memory is None or target.memory is None):
            raise CliError(
                "--store copies between our URLs: LangGraph's savers have no store", UNSUPPORTED
            )
        if args.thread:
            ids = list(dict.fromkeys(args.thread))
            missing = [
                t for t in ids if next(iter(source.saver.list(_cfg(t), limit=1)), None) is None
            ]
            if missing:
                raise CliError(
                    f"no thread {', '.join(map(repr, missing))} at {source.url}: nothing "
                    "was copied",
                    NOT_FOUND,
                )
        else:  # listed first (copy_threads would): the progress then has its total
            ids = list_thread_ids(source.saver, batch_size=args.batch_size)
        bar = Progress("copied threads", every=1)

        def progress(p: CopyProgress) -> None:
            now = f"now {p.thread_id}" if p.thread_id else ""
            detail = f"{p.checkpoints_copied} checkpoints copied, {p.checkpoints_skipped} there"
            bar.update(p.threads_done, f"{detail}, {now}" if bar.live else detail, len(ids))

        try:
            report = copy_threads(
                source.saver,
                target.saver,
                ids,
                progress=progress,
                verify=args.verify,
                batch_size=args.batch_size,
                user_id=args.user,
            )
        finally:
            bar.close()
        items = None
        if args.store:
            from ..transfer.migration import copy_store

            items = copy_store(source.store, target.store, batch_size=args.batch_size)
    out = {
        "from": source.url,
        "to": target.url,
        "threads": len(report.threads),
        "checkpoints_copied": report.checkpoints_copied,
        "checkpoints_skipped": report.checkpoints_skipped,
        "writes_copied": report.writes_copied,
        "verified": args.verify,
        "differences": report.differences,
        "items_copied": items.items_copied if items else None,
    }
    if args.json:
        emit_json(out)
    else:
        print(
            f"copied {out['checkpoints_copied']} checkpoints ({out['writes_copied']} writes) "
            f"of {out['threads']} threads; {out['checkpoints_skipped']} were there already"
        )
        if items:
            print(f"copied {items.items_copied} store items ({items.items_skipped} unchanged)")
        if args.verify:
            print(
                "verified: equal" if report.ok else f"verify: {len(report.differences)} differences"
            )
            for d in report.differences[:50]:
                print(f"  {d}")
    return OK if report.ok else FOUND_PROBLEMS


# -- erasure ---------------------------------------------------------------------------------


def erase_user(args: argparse.Namespace) -> int:
    from ..errors import MemoryConnectionError
    from ..privacy.erasure import ErasureProgress, declared_templates
    from ..privacy.erasure import erase_user as erase

    if getattr(args, "lift", False):
        return _lift_erasure(args)
    with open_url(args.url) as opened:
        _ours(opened, "erase-user")
        if not args.dry_run:
            where = ", ".join(str(t) for t in declared_templates())
            confirm(
                f"Erase everything of user {args.user_id!r} at {opened.url} (threads, "
                f"transcripts, sessions, store items under {where})?",
                args.yes,
                expected=args.user_id,
            )
        bar = Progress("erased threads")

        def progress(p: ErasureProgress) -> None:
            if p.kind == "threads":
                bar.update(p.done, "")

        try:
            report = erase(
                args.user_id,
                memory=opened.memory,
                dry_run=args.dry_run,
                progress=progress,
                batch_size=args.batch_size,
            )
        except (InvalidConfigError, MemoryConnectionError):
            raise  # main() prints those in one line
        except Exception as exc:  # one line, not a traceback; erasure resumes when re-run
            raise CliError(
                f"erase-user {args.user_id!r} stopped: {type(exc).__name__}: {exc} "
                "(what went stays gone; run it again to finish)"
            ) from exc
        finally:
            bar.close()
    if args.json:
        emit_json(report.to_dict())
        return OK
    verb = "would erase" if report.dry_run else "erased"
    counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in report.counts.items())
    print(f"{verb} user {report.user_id}: {counts} in {report.duration_s:.3f} s")
    return OK


# -- encryption ------------------------------------------------------------------------------


def rekey(args: argparse.Namespace) -> int:
    """Move every encrypted row to the current key (LANGGRAPH_MEMORY_ENCRYPTION_KEYS: the
    first key is current; list the old ones after it). Resumes when run again."""
    from ..errors import MemoryConnectionError
    from ..privacy.rekey import RekeyProgress
    from ..privacy.rekey import rekey as run_rekey

    with open_url(args.url) as opened:
        _ours(opened, "rekey")
        bar = Progress("rekeyed rows")

        def progress(p: RekeyProgress) -> None:
            bar.update(p.examined, f"{p.rewritten} rewritten ({p.part})", p.total)

        try:
            report = run_rekey(opened.memory, batch_size=args.batch_size, progress=progress)
        except (InvalidConfigError, MemoryConnectionError):
            raise
        except Exception as exc:  # one line; a re-run goes on where this one stopped
            raise CliError(
                f"rekey stopped: {type(exc).__name__}: {exc} (rows done stay done; run it "
                "again to finish)"
            ) from exc
        finally:
            bar.close()
    if args.json:
        emit_json(
            {
                "examined": report.examined,
                "rewritten": report.rewritten,
                "unreachable": report.unreachable,
                "unencrypted": report.unencrypted,
                "parts": report.parts,
                "seconds": round(report.seconds, 3),
            }
        )
        return FOUND_PROBLEMS if report.unencrypted else OK
    print(
        f"rekeyed {report.rewritten} of {report.examined} rows in {report.seconds:.1f} s"
        + (f" ({report.unreachable} unreachable)" if report.unreachable else "")
    )
    if report.unencrypted:
        # Run over an unencrypted database without the migration mode, rekey moved
        # nothing and, silent, looked like the migration done.
        print(
            f"{report.unencrypted} values are not encrypted (or sealed by an earlier "
            "release) and were left: reads refuse them. Run rekey again with "
            "LANGGRAPH_MEMORY_ENCRYPTION_ACCEPT_PLAINTEXT=1 to encrypt them.",
            file=sys.stderr,
        )
        return FOUND_PROBLEMS
    return OK


def _lift_erasure(args: argparse.Namespace) -> int:
    """``erase-user USER --lift``: the user may be written again before the hold ends."""
    from ..privacy.erasure import lift_erasure

    with open_url(args.url) as opened:
        _ours(opened, "erase-user")
        lifted = lift_erasure(args.user_id, memory=opened.memory)
    if args.json:
        emit_json({"user_id": args.user_id, "lifted": lifted})
        return OK
    print(f"user {args.user_id}: " + ("hold lifted" if lifted else "no hold to lift"))
    return OK


# -- doctor ----------------------------------------------------------------------------------


def doctor(args: argparse.Namespace) -> int:
    findings: list[admin.Finding] = []
    with open_url(args.url) as opened:
        _ours(opened, "doctor")
        if opened.backend == "redis":
            findings.extend(_redis_checks(opened))
        else:
            findings.extend(_sql_checks(opened))
        findings.append(_approval_window_check(opened))
    if args.json:
        emit_json([f.__dict__ for f in findings])
    else:
        for f in findings:
            mark = {"ok": "ok", "warning": "WARNING", "problem": "PROBLEM"}[f.level]
            print(f"[{mark}] {f.check}: {f.message}")
            if f.fix:
                print(f"    fix: {f.fix}")
    # a warning is a finding too: a script checking the exit code must not miss it
    return OK if all(f.level == "ok" for f in findings) else FOUND_PROBLEMS


def _approval_window_check(opened: Opened) -> admin.Finding:
    """A checkpoint TTL shorter than 1.5x the default approval window (24 h): a thread
    waiting for a reviewer would expire before its approval does."""
    from ..approvals import check_ttl
    from ..approvals.queue import DEFAULT_WINDOW

    check, window = "ttl vs approval window", DEFAULT_WINDOW.total_seconds()
    try:
        check_ttl(opened.saver.settings.ttl_seconds, window)
    except InvalidConfigError as exc:
        return admin.Finding(check, "warning", str(exc), "raise ttl, or pass a shorter window")
    return admin.Finding(check, "ok", "no checkpoint TTL shorter than 1.5x the 24 h window")


def _redis_checks(opened: Opened) -> list[admin.Finding]:
    policy, maxmemory = admin.redis_policy(opened)
    check = "redis maxmemory-policy"
    if policy is None:
        return [
            admin.Finding(
                check,
                "warning",
                f"could not read it: {maxmemory}",
                "check it with your provider: it must be noeviction or volatile-*",
            )
        ]
    if policy == "noeviction" or policy.startswith("volatile-"):
        return [admin.Finding(check, "ok", f"{policy}: our keys are never evicted")]
    limit = (
        ""
        if maxmemory not in ("0", None)
        else " (maxmemory is 0 today, so it applies once a limit is set)"
    )
    return [
        admin.Finding(
            check,
            "problem",
            f"{policy}: Redis may evict some keys of a thread and keep others, leaving it half "
            f"deleted{limit}",
            "CONFIG SET maxmemory-policy noeviction (or volatile-*, with a TTL on threads)",
            {"policy": policy, "maxmemory": maxmemory},
        )
    ]


def _sql_checks(opened: Opened) -> list[admin.Finding]:
    out = []
    latest = admin.latest_versions(opened.backend)
    with admin.sql(opened) as db:
        versions = db.versions()
        for component, have in versions.items():
            want = latest[component]
            check = f"{component} schema"
            if have is None:
                out.append(admin.Finding(check, "problem", "not set up", "langgraph-memory setup"))
            elif have < want:
                out.append(
                    admin.Finding(
                        check,
                        "problem",
                        f"version {have}, older than this package's {want}",
                        "langgraph-memory migrate-schema (see --sql first)",
                    )
                )
            elif have > want:
                out.append(
                    admin.Finding(
                        check,
                        "problem",
                        f"version {have}, newer than this package's {want}: upgrade "
                        "langgraph-memory-plus",
                        "pip install -U langgraph-memory-plus",
                    )
                )
            else:
                out.append(admin.Finding(check, "ok", f"version {have}, current"))
        if db.pg:
            out.extend(_pg_checks(opened, db))
        else:
            mode = db.rows("PRAGMA journal_mode")[0][0]
            level = "ok" if str(mode).lower() == "wal" else "warning"
            out.append(
                admin.Finding(
                    "sqlite journal mode",
                    level,
                    str(mode),
                    "" if level == "ok" else "langgraph-memory setup turns WAL on",
                )
            )
    return out


def _pg_checks(opened: Opened, db: admin._Sql) -> list[admin.Finding]:
    out = []
    if "lgmp_store_vectors" in db.tables():
        vectors = db.rows(f"SELECT count(*) FROM {db.table('lgmp_store_vectors')}")[0][0]
        has = db.rows("SELECT count(*) FROM pg_extension WHERE extname = 'vector'")[0][0]
        available = db.rows("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")[
            0
        ][0]
        if vectors and not has:
            out.append(
                admin.Finding(
                    "pgvector",
                    "warning",
                    f"{vectors} stored embeddings (an index is configured) but the vector "
                    f"extension is not installed{'' if available else ' nor available'}: "
                    "searches are scored exactly, by a scan",
                    "CREATE EXTENSION vector (as a superuser), then reopen the store",
                )
            )
        else:
            out.append(
                admin.Finding(
                    "pgvector", "ok", "installed" if has else "no embeddings stored: not needed"
                )
            )
    threshold = opened.option("prepare_threshold", "default")
    bouncer = ":6432" in opened.url or "pgbouncer" in opened.url.lower()
    if bouncer and threshold is not None:
        out.append(
            admin.Finding(
                "pgbouncer",
                "problem",
                "the URL looks like PgBouncer (port 6432) but prepares statements: in transaction "
                "mode that fails with 'prepared statement does not exist'",
                "add ?prepare_threshold=none to the URL",
            )
        )
    elif bouncer:
        out.append(admin.Finding("pgbouncer", "ok", "prepare_threshold=none"))
    return out
