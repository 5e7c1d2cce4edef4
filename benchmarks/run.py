"""One command for the side-by-side benchmarks (see benchmarks/README.md)::

    python -m benchmarks.run --pg postgresql://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0 [--redis-stack redis://127.0.0.1:6380] [--quick] \\
        [--json out.json]

Sections run one after another; inside a section every round runs every saver once, in an
order rotated from round to round, and the tables report the median over rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import targets as tg
from . import workloads as wl
from .report import Section, Share, format_value, section_markdown
from .targets import Env, Target, open_session
from .workloads import StoppedEarly, chat_metrics, chat_turns, read_paths, store_ops, throughput

SECTIONS = ("chat", "reads", "throughput", "stores", "setup")


@dataclasses.dataclass
class Sizes:
    turns: list[int]
    short_samples: int  # turns behind each short-T p50 (and new threads behind the first turn)
    read_checkpoints: int
    read_reps: int
    threads: int
    turns_per_thread: int
    concurrency: list[int]
    store_items: int
    store_reps: int
    setup_reps: int
    rounds: int
    unit_seconds: float
    section_rounds: dict[str, int] = dataclasses.field(default_factory=dict)

    def rounds_for(self, section: str) -> int:
        return self.section_rounds.get(section, self.rounds)


PRESETS = {
    "full": Sizes(
        turns=[1, 10, 50, 200, 1000],
        short_samples=50,
        read_checkpoints=1000,
        read_reps=200,
        threads=1000,
        turns_per_thread=5,
        concurrency=[1, 8],
        store_items=10_000,
        store_reps=500,
        setup_reps=5,
        rounds=3,
        unit_seconds=900.0,
    ),
    "quick": Sizes(
        turns=[1, 10, 50],
        short_samples=20,
        read_checkpoints=100,
        read_reps=50,
        threads=50,
        turns_per_thread=5,
        concurrency=[1, 8],
        store_items=500,
        store_reps=100,
        setup_reps=3,
        rounds=2,
        unit_seconds=120.0,
    ),
}


def _ints(text: str) -> list[int]:
    values = sorted({int(part) for part in text.split(",") if part.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError("expected positive integers, comma-separated")
    return values


def _rounds(text: str) -> dict[str, int]:
    """``3`` -> every section 3; ``chat=1,reads=3`` -> those sections (key "" = the rest)."""
    out: dict[str, int] = {}
    for part in text.split(","):
        key, _, value = part.rpartition("=")
        key = key.strip()
        if key and key not in SECTIONS:
            raise argparse.ArgumentTypeError(f"unknown section {key!r}")
        out[key] = int(value)
        if out[key] < 1:
            raise argparse.ArgumentTypeError("rounds must be >= 1")
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="langgraph-memory-plus vs LangGraph's own savers and stores, side by side.",
    )
    p.add_argument(
        "--pg",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="PostgreSQL URL (loopback) used to create/drop lgmp_bench_* databases",
    )
    p.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/0",
        help="plain Redis URL (loopback) for our Redis savers",
    )
    p.add_argument(
        "--redis-stack",
        default=None,
        help="Redis Stack URL (loopback): adds the official langgraph-checkpoint-redis",
    )
    p.add_argument("--quick", action="store_true", help="small sizes: about a minute or two")
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)}",
    )
    p.add_argument(
        "--savers",
        default=None,
        help="comma-separated slugs to run (default: all), e.g. ours_pg,off_pg",
    )
    p.add_argument(
        "--rounds",
        type=_rounds,
        help="rounds per section (median over rounds): N, or per section, "
        "e.g. chat=1,reads=3,throughput=1,stores=3,setup=3 (others: the preset's)",
    )
    p.add_argument("--turns", type=_ints, help="chat thread lengths T, e.g. 1,10,50,200,1000")
    p.add_argument(
        "--short-samples",
        type=int,
        help="turns behind each turn p50 @T (fresh T-turn threads until there are this many; "
        "at T=1 that many new threads)",
    )
    p.add_argument("--read-checkpoints", type=int, help="checkpoints in the read-path thread")
    p.add_argument("--read-reps", type=int, help="timed reads per op")
    p.add_argument("--threads", type=int, help="threads in the throughput section")
    p.add_argument("--turns-per-thread", type=int, help="turns per thread (throughput)")
    p.add_argument("--concurrency", type=_ints, help="concurrency levels, e.g. 1,8")
    p.add_argument("--store-items", type=int, help="items put in each store")
    p.add_argument("--store-reps", type=int, help="timed get/search/list_namespaces calls")
    p.add_argument("--setup-reps", type=int, help="fresh databases/files per setup() timing")
    p.add_argument(
        "--unit-seconds",
        type=float,
        help="time bound of one unit (one saver, one round); it stops early after",
    )
    p.add_argument(
        "--text",
        choices=wl.TEXTS,
        default="natural",
        help="chat text: natural (default; compresses like real English) or repetitive "
        "(the ~150-word text of earlier runs, which PostgreSQL's TOAST compresses better)",
    )
    p.add_argument(
        "--messages",
        choices=wl.MESSAGES,
        default="realistic",
        help="message envelopes: realistic (default; ids as LangGraph and the provider assign "
        "them, an OpenAI-like AIMessage with its metadata, seeded) or bare (the ids "
        "user-<turn>/model-<position> and small metadata of earlier runs)",
    )
    p.add_argument("--json", dest="json_path", help="also write the full report as JSON here")
    p.add_argument("--markdown", dest="md_path", help="also write the tables to this file")
    p.add_argument("--label", default="", help="free text recorded in the report header")
    return p.parse_args(argv)  # fmt: skip


def sizes_from(args: argparse.Namespace) -> Sizes:
    sizes = dataclasses.replace(PRESETS["quick" if args.quick else "full"])
    for field in dataclasses.fields(Sizes):
        value = getattr(args, field.name, None)
        if value is not None and field.name != "rounds":
            setattr(sizes, field.name, value)
    if args.rounds:
        sizes.rounds = args.rounds.get("", sizes.rounds)
        sizes.section_rounds = {k: v for k, v in args.rounds.items() if k}
    if sizes.unit_seconds <= 0:
        raise SystemExit("--unit-seconds must be > 0")
    return sizes


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _rotated(items: list[Target], round_no: int) -> list[Target]:
    if not items:
        return []
    k = round_no % len(items)
    return items[k:] + items[:k]


def _run_rounds(
    section: Section,
    targets: list[Target],
    rounds: int,
    unit: Callable[[Target], dict[tuple[str, str], float]],
    label: str = "",
) -> None:
    for round_no in range(rounds):
        for target in _rotated(targets, round_no):
            _log(f"{section.key}{label}: round {round_no + 1}/{rounds}: {target.name}")
            started = time.perf_counter()
            try:
                section.add(target, unit(target))
            except StoppedEarly as exc:
                section.errors.append(f"{target.name}{label}, round {round_no + 1}: {exc}")
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                section.errors.append(
                    f"{target.name}{label}, round {round_no + 1}: {type(exc).__name__}: {exc}"
                )
            finally:
                gc.collect()
            _log(f"  ... {time.perf_counter() - started:.1f} s")


# ---------------------------------------------------------------------------------------------
# sections


def _ratio_line() -> str:
    return (
        "Ratio = this saver's median / the official saver's of the same flavour: SQLite rows "
        "vs `langgraph.checkpoint.sqlite` (`SqliteSaver` / `AsyncSqliteSaver`), the others vs "
        "the official PostgreSQL saver (sync rows vs `PostgresSaver`, async rows vs "
        "`AsyncPostgresSaver`); stores vs `PostgresStore`. Redis rows also give their ratio "
        "to `InMemorySaver` (`mem`). Lower is better except for turns/s and ops/s."
    )


def chat_section(env: Env, sizes: Sizes, savers: list[Target]) -> Section:
    section = Section("chat", "Chat turns: footprint, growth, turn latency")
    t_max = max(sizes.turns)
    section.description = [
        f"One thread per saver and round grows to T={t_max} turns through the real LangGraph "
        "runtime (`messages: Annotated[list, add_messages]`, fake model node + a second node, "
        f"~380 characters of {wl.current_text()} text a turn, {wl.current_messages()} message "
        "envelopes); footprint is measured at T = "
        f"{', '.join(map(str, sizes.turns))} (and T/2 for the top-half exponent). "
        "Then, on the same saver, fresh threads of T turns until the T-turn threads (the long "
        f"one's first T turns count as one) hold at least {sizes.short_samples} turns: "
        "`turn p50 @T` is the median over all their turns; `first turn p50, new thread` the "
        "median of the first turns of all threads (`new threads` of them). "
        f"{sizes.rounds_for('chat')} round(s).",
        "",
        "Footprint: PostgreSQL = `pg_total_relation_size` summed over the saver's tables in a "
        "database of its own; Redis = `MEMORY USAGE ... SAMPLES 0` summed over the saver's keys "
        "(search indexes of Redis Stack not included); InMemorySaver = bytes in its serialized "
        "dicts.",
        "",
        _ratio_line(),
    ]
    text_bytes: dict[int, int] = {}

    def unit(target: Target) -> dict[tuple[str, str], float]:
        with open_session(target, env) as session:
            deadline = time.perf_counter() + sizes.unit_seconds
            result = chat_turns(session, sizes.turns, deadline, sizes.short_samples)
        text_bytes.update(result["text_bytes"])
        if result["turns_done"] < t_max:
            section.notes.append(
                f"{target.name} stopped at turn {result['turns_done']} of {t_max} "
                f"(--unit-seconds {sizes.unit_seconds:g})"
            )
        return chat_metrics(result, sizes.turns)

    _run_rounds(section, savers, sizes.rounds_for("chat"), unit)
    ts = sorted(sizes.turns)
    section.summary = ["first turn p50, new thread"]
    section.summary += [f"turn p50 @T={t}" for t in ts if t <= 50 or t == ts[0]]
    big = [t for t in ts if t >= 50] or ts  # a footprint at T=1 or 10 is mostly empty schema
    section.summary += [f"footprint @T={t}" for t in big]
    if len(ts) >= 2:
        lo, hi = wl.growth_span(ts)
        section.summary.append(f"growth exponent T={lo}..{hi}")
    section.summary.append(f"growth exponent top half T={ts[-1] // 2}..{ts[-1]}")
    section.summary += [
        (
            f"turn p50 first -> last 10% @T={t}",
            f"turn p50, first 10% @T={t}",
            f"turn p50, last 10% @T={t}",
        )
        for t in ts[-2:]
    ]
    section.summary += [f"turn p50 without add_messages last/first @T={ts[-1]}"]
    if text_bytes:
        section.notes.insert(
            0,
            "message text in the thread: "
            + ", ".join(
                f"T={t}: {format_value(b, 'bytes')}" for t, b in sorted(text_bytes.items())
            ),
        )
    return section


def reads_section(env: Env, sizes: Sizes, savers: list[Target]) -> Section:
    section = Section("reads", "Read paths")
    section.description = [
        f"A chat thread (same graph) grown to at least {sizes.read_checkpoints} checkpoints, "
        f"then up to {sizes.read_reps} timed calls of each read: `get_tuple` of the latest "
        "checkpoint, `get_tuple` of a given `checkpoint_id` (time travel, forks: the middle "
        "checkpoint of the thread and its 10th), `list(config, limit=10)` consumed in full and "
        "`list(config, filter={'step': -1}, limit=1)` (async savers: `aget_tuple` / `alist`). "
        f"{sizes.rounds_for('reads')} round(s).",
        "",
        _ratio_line(),
    ]

    def unit(target: Target) -> dict[tuple[str, str], float]:
        with open_session(target, env) as session:
            deadline = time.perf_counter() + sizes.unit_seconds
            return read_paths(session, sizes.read_checkpoints, sizes.read_reps, deadline)

    _run_rounds(section, savers, sizes.rounds_for("reads"), unit)
    section.summary = [
        "get_tuple latest",
        "get_tuple by id, middle",
        "get_tuple by id, 10th",
        "list(limit=10)",
        "list(filter=first, limit=1)",
    ]
    return section


def throughput_section(env: Env, sizes: Sizes, savers: list[Target]) -> Section:
    section = Section("throughput", "Throughput")
    section.description = [
        f"{sizes.threads} threads x {sizes.turns_per_thread} turns of the chat graph. "
        "Concurrency 1: every saver, one turn at a time (`invoke` / `ainvoke`). "
        "Higher concurrency: async savers, and InMemorySaver through its async methods, that "
        "many threads in flight on one event loop (our savers: `from_conn_string` pools; "
        "official async PostgreSQL saver: an `AsyncConnectionPool` of that size). "
        "InMemorySaver there is the ceiling: the LangGraph runtime alone, no storage, in one "
        "Python process (CPU-bound under the GIL); its rows at that concurrency count as async. "
        f"{sizes.rounds_for('throughput')} round(s).",
        "",
        _ratio_line(),
    ]
    for concurrency in sizes.concurrency:
        if concurrency == 1:
            eligible = list(savers)
        else:
            eligible = [t.on_event_loop() for t in savers if t.is_async or t.has_async_api]

        def unit(target: Target, c: int = concurrency) -> dict[tuple[str, str], float]:
            with open_session(target, env, pool_size=c) as session:
                deadline = time.perf_counter() + sizes.unit_seconds
                metrics, stopped = throughput(
                    session, sizes.threads, sizes.turns_per_thread, c, deadline
                )
            if stopped:
                section.notes.append(
                    f"{target.name} @c={c} stopped early (--unit-seconds "
                    f"{sizes.unit_seconds:g}); turns/s is over the turns it did"
                )
            return metrics

        _run_rounds(
            section, eligible, sizes.rounds_for("throughput"), unit, label=f" @c={concurrency}"
        )
    section.summary = [f"turns/s @c={c}" for c in sizes.concurrency]
    ceiling = tg.MEMORY_SAVER.name
    shares = [
        Share(f"turns/s @c={c} of ceiling", f"turns/s @c={c}", ceiling)
        for c in sizes.concurrency
        if c > 1
    ]
    section.summary += shares
    section.summary += [f"turn p50 @c={c}" for c in sizes.concurrency]
    for share in shares:
        top = section.median(share.metric, ceiling)
        if top is None:
            continue
        section.notes.append(
            f"ceiling {share.metric}: {ceiling} (`ainvoke`, no storage) at "
            f"{format_value(top, 'turns/s')}; of it: "
            + ", ".join(
                f"{name} {value:.0%}"
                for name in section.targets
                if name != ceiling and (value := section.share(share, name)) is not None
            )
        )
    return section


def stores_section(env: Env, sizes: Sizes, only: set[str] | None) -> Section:
    section = Section("stores", "Stores")
    stores, skip_note = tg.store_targets()
    if only is not None:
        stores = [t for t in stores if t.slug in only]
    if skip_note or not stores:
        section.status = "skipped"
        section.notes.append(skip_note or "skipped: no store selected")
        _log(f"stores: {section.notes[-1]}")
        return section
    section.description = [
        f"{sizes.store_items} items (~190 characters of text each) put one by one into "
        f"{wl.store_namespaces(sizes.store_items)} namespaces `('users', 'u<k>', 'memories')`, "
        f"then up to {sizes.store_reps} timed calls of each: `get`, "
        "`search(('users', 'u<k>'), filter={'kind': 'fact'}, limit=10)`, the search across "
        "namespaces `search(('users',), filter={'kind': 'fact', 'topic': 't<j>'}, limit=10)` "
        f"(about 1% of the items match, in one namespace of {wl.TOPICS}) and "
        "`list_namespaces(prefix=('users',), limit=100)`. No vector index. "
        f"{sizes.rounds_for('stores')} round(s).",
        "",
        _ratio_line(),
    ]

    def unit(target: Target) -> dict[tuple[str, str], float]:
        with open_session(target, env) as session:
            deadline = time.perf_counter() + sizes.unit_seconds
            return store_ops(session, sizes.store_items, sizes.store_reps, deadline)

    _run_rounds(section, stores, sizes.rounds_for("stores"), unit)
    section.summary = [
        "put",
        "get",
        "search(ns, filter, limit=10)",
        "search(('users',), filter, limit=10)",
        "list_namespaces(limit=100)",
    ]
    return section


SETUP_TARGETS = (
    tg.OURS_PG,
    tg.OFF_PG,
    tg.OURS_SQLITE,
    tg.OFF_SQLITE,
    tg.OURS_PG_STORE,
    tg.OFF_PG_STORE,
    tg.OURS_SQLITE_STORE,
    tg.OFF_SQLITE_STORE,
)


def setup_section(env: Env, sizes: Sizes, only: set[str] | None) -> Section:
    section = Section("setup", "setup() on fresh storage", baseline_of=tg.same_backend_baseline)
    have_official = tg.has_official_sqlite()
    targets = [
        t
        for t in SETUP_TARGETS
        if (only is None or t.slug in only) and (have_official or t.slug[:10] != "off_sqlite")
    ]
    section.description = [
        f"{sizes.setup_reps} times per saver/store and round: fresh storage (a new PostgreSQL "
        "database, a new SQLite file), `from_conn_string`, then "
        "`setup()`, timed alone and together with the opening; creating the storage is not "
        f"timed. Median per round, then over {sizes.rounds_for('setup')} round(s).",
        "",
        "Ratio = the official implementation of the same backend and kind (`PostgresSaver`, "
        "`SqliteSaver`, `PostgresStore`, `SqliteStore`).",
    ]

    def unit(target: Target) -> dict[tuple[str, str], float]:
        alone, opened = [], []
        for _ in range(sizes.setup_reps):
            setup_s, open_s = tg.timed_setup(target, env)
            alone.append(setup_s)
            opened.append(open_s)
        return {
            ("setup()", "ms"): statistics.median(alone) * 1000.0,
            ("from_conn_string + setup()", "ms"): statistics.median(opened) * 1000.0,
        }

    _run_rounds(section, targets, sizes.rounds_for("setup"), unit)
    section.summary = ["setup()", "from_conn_string + setup()"]
    return section


# ---------------------------------------------------------------------------------------------
# report header


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_state() -> dict[str, Any]:
    import langgraph_memory_plus

    root = Path(langgraph_memory_plus.__file__).resolve().parent.parent
    state: dict[str, Any] = {"path": str(root)}
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "langgraph_memory_plus"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        state.update(git_head=head, uncommitted_changes=bool(dirty))
    except (OSError, subprocess.SubprocessError):
        state["git_head"] = None
    return state


def _meta(env: Env, sizes: Sizes, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "run_id": env.run_id,
        "label": args.label,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "text": wl.text_description(args.text),
        "messages": wl.messages_description(args.messages),
        "sizes": dataclasses.asdict(sizes),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "servers": tg.server_versions(env),
        "packages": {
            name: _version(name)
            for name in (
                "langgraph-memory-plus",
                "langgraph",
                "langgraph-checkpoint",
                "langgraph-checkpoint-postgres",
                "langgraph-checkpoint-redis",
                "langgraph-checkpoint-sqlite",
                "psycopg",
                "redis",
            )
        },
        "langgraph_memory_plus_source": _source_state(),
    }


def _header_markdown(meta: dict[str, Any]) -> str:
    pkgs = ", ".join(f"{k} {v}" for k, v in meta["packages"].items() if v)
    servers = ", ".join(f"{k} {v}" for k, v in meta["servers"].items() if k != "host")
    src = meta["langgraph_memory_plus_source"]
    head = src.get("git_head")
    source = f"{src['path']}" + (
        f" @ {head}{' + uncommitted changes' if src.get('uncommitted_changes') else ''}"
        if head
        else ""
    )
    lines = [
        f"## langgraph-memory-plus benchmarks ({meta['mode']}, run {meta['run_id']})",
        "",
        f"- started {meta['started']} on {meta['cpus']} CPUs (load average "
        f"{meta['loadavg_at_start'][0]}), Python {meta['python']}",
        f"- servers: {servers}",
        f"- packages: {pkgs}",
        f"- our code: {source}",
        f"- chat text: {meta['text']}",
        f"- chat messages: {meta['messages']}",
    ]
    if "loadavg_at_end" in meta:
        lines.append(
            f"- took {meta['seconds']} s; load average at the end {meta['loadavg_at_end'][0]}"
        )
    if meta["label"]:
        lines.append(f"- label: {meta['label']}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    sizes = sizes_from(args)
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections: {', '.join(sorted(unknown))}")
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    if args.redis_stack:
        tg.check_redis_url(args.redis_stack)
        try:
            import langgraph.checkpoint.redis
        except ImportError as exc:
            raise SystemExit(
                "--redis-stack needs the official saver: pip install langgraph-checkpoint-redis"
            ) from exc
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            "the baseline needs the official saver: pip install langgraph-checkpoint-postgres"
        ) from exc

    try:
        wl.use_text(args.text)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from exc
    wl.use_messages(args.messages)
    env = Env(pg=args.pg, redis=args.redis, redis_stack=args.redis_stack)
    only = {s.strip() for s in args.savers.split(",")} if args.savers else None
    savers = [t for t in tg.saver_targets(bool(args.redis_stack)) if only is None or t.slug in only]
    meta = _meta(env, sizes, args)
    print(_header_markdown(meta), flush=True)

    started = time.perf_counter()
    sections: list[Section] = []
    for name in wanted:
        if name == "chat":
            section = chat_section(env, sizes, savers)
        elif name == "reads":
            section = reads_section(env, sizes, savers)
        elif name == "throughput":
            section = throughput_section(env, sizes, savers)
        elif name == "stores":
            section = stores_section(env, sizes, only)
        else:
            section = setup_section(env, sizes, only)
        sections.append(section)
        print(section_markdown(section), flush=True)

    meta["seconds"] = round(time.perf_counter() - started, 1)
    meta["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = {"meta": meta, "sections": {s.key: s.to_json() for s in sections}}
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n")
        _log(f"wrote {args.json_path}")
    if args.md_path:
        body = "\n".join([_header_markdown(meta), *(section_markdown(s) for s in sections)])
        Path(args.md_path).write_text(body)
        _log(f"wrote {args.md_path}")
    _log(f"done in {meta['seconds']} s")
    return report


if __name__ == "__main__":
    main()
