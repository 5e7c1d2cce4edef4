"""``langgraph-memory``: the admin command line, thin over the Python API.

Every command takes ``-u/--url`` (else ``LANGGRAPH_MEMORY_URL``, else the default SQLite
file), like ``from_url``; listings take ``--json``; destructive commands ask on a terminal
or take ``--yes``. Exit codes: see :data:`.output.EXIT_CODES`. Only the standard library
(``argparse``): the core install stays small, and there is no ``cli`` extra to install.

Only this module, :mod:`.output` and :mod:`..errors` load for ``--help`` or a usage
error: each command's module (and LangGraph, drivers) is imported when it runs, so
``--help`` answers in a few hundredths of a second and works with no driver installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import InvalidConfigError, MemoryConnectionError
from .output import EXIT_CODES, FOUND_PROBLEMS, UNREACHABLE, UNSUPPORTED, USAGE, CliError

PROG = "langgraph-memory"
ENV_VAR = "LANGGRAPH_MEMORY_URL"  # url.ENV_VAR, not imported: url imports LangGraph


def _parser() -> argparse.ArgumentParser:
    codes = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Operate langgraph-memory-plus: inspect, migrate, clean up.",
        epilog=f"exit codes:\n{codes}\n\nURL: --url, else ${ENV_VAR}, else the default SQLite "
        "file. LangGraph's own savers (migrate --from): langgraph+postgresql://..., "
        "langgraph+sqlite:///file.db",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-u",
        "--url",
        default=os.environ.get(ENV_VAR) or None,
        help=f"backend URL (default: ${ENV_VAR})",
    )
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: str, help: str, **kw: object) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help, **kw)  # type: ignore[arg-type]
        p.set_defaults(run=run)
        return p

    command("info", "info", "backend, server and schema versions, counts, sizes")
    p = command("setup", "setup", "create or upgrade the tables (runs the migrations)")
    p.add_argument("--sql", action="store_true", help="print the SQL, run nothing")
    p = command("migrate-schema", "setup", "the same as setup (alembic's upgrade)")
    p.add_argument("--sql", action="store_true", help="print the SQL, run nothing")

    p = command("threads", "threads_ls", "list threads through the thread index")
    p.add_argument("action", choices=["ls"])
    p.add_argument("--user", help="only this user_id's threads")
    p.add_argument("--status", choices=["idle", "busy", "interrupted", "error"])
    p.add_argument("--metadata", help='a JSON object of metadata to match, e.g. {"k": "v"}')
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)

    p = command("items", "items_ls", "list the store's items, e.g. those not updated lately")
    p.add_argument("action", choices=["ls"])
    p.add_argument("--namespace", default="", help="only items under this prefix, e.g. a/b")
    p.add_argument(
        "--stale-days", type=float, metavar="N", help="only items not updated for N days"
    )
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)

    thread = sub.add_parser("thread", help="one thread: show, export, import, delete")
    tsub = thread.add_subparsers(dest="action", required=True, metavar="ACTION")

    def taction(name: str, run: str, help: str) -> argparse.ArgumentParser:
        p = tsub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(run=run)
        return p

    p = taction("show", "thread_show", "history, state summary and sizes of a thread")
    p.add_argument("thread_id")
    p.add_argument("--limit", type=int, default=20, help="history entries (0: all)")
    p = taction("export", "thread_export", "write a thread as JSON lines (lossless)")
    p.add_argument("thread_id")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p = taction("import", "thread_import", "read a thread written by thread export")
    p.add_argument("input", nargs="?", default="-", help="file to read (default: stdin)")
    p.add_argument("--thread", help="import under this thread id instead")
    p = taction("delete", "thread_delete", "delete a thread and all its checkpoints")
    p.add_argument("thread_id")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")

    p = command("stats", "stats", "the biggest threads and the bytes per kind of data")
    p.add_argument("--top", type=int, default=10)
    p = command("sweep", "sweep", "delete expired threads and store items now")
    p.add_argument("--batch-size", type=int, default=500)
    p = command("prune", "prune", "keep only the latest checkpoint of threads")
    p.add_argument("thread_ids", nargs="*")
    p.add_argument("--keep-latest", action="store_true", help="the strategy (required)")
    p.add_argument("--all", action="store_true", help="every thread")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p = command("migrate", "migrate", "copy threads from one saver into another")
    p.add_argument("--from", dest="source", required=True, help="source URL")
    p.add_argument("--to", dest="target", required=True, help="target URL")
    p.add_argument("--thread", action="append", help="only this thread (repeatable)")
    p.add_argument("--verify", action="store_true", help="compare every checkpoint after")
    p.add_argument("--store", action="store_true", help="copy the store's items too")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--user", help="the user of copied threads whose source shows none")
    p = command("erase-user", "erase_user", "erase everything of one user (GDPR, PIPL)")
    p.add_argument("user_id", metavar="USER")
    p.add_argument("--dry-run", action="store_true", help="change nothing; report what would go")
    p.add_argument(
        "--lift",
        action="store_true",
        help="erase nothing; end the hold of an erased user (a returning user)",
    )
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p = command("rekey", "rekey", "re-encrypt stored rows with the current encryption key")
    p.add_argument("--batch-size", type=int, default=500, help="rows per transaction")
    p = command("approvals", "approvals", "pending approvals: list, or expire overdue")
    p.add_argument("action", choices=["ls", "expire"])
    p.add_argument("--user", help="only this user's approvals")
    p.add_argument("--action-name", dest="action_name", help="only this requested action")
    p.add_argument(
        "--status",
        default="pending",
        choices=["pending", "approved", "rejected", "edited", "expired", "all"],
    )
    p.add_argument("--window-hours", type=float, default=24.0, help="the approval window")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask (expire)")
    command("doctor", "doctor", "check the setup for problems users do not think of")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code."""
    args = _parser().parse_args(argv)
    if getattr(args, "limit", None) == 0 and args.command == "thread":
        args.limit = None
    try:
        from . import commands  # here, not above: it imports LangGraph (see the docstring)

        return int(getattr(commands, args.run)(args))
    except (CliError, InvalidConfigError, MemoryConnectionError) as exc:  # ours: redacted
        code = exc.code if isinstance(exc, CliError) else USAGE
        code = UNREACHABLE if isinstance(exc, MemoryConnectionError) else code
        print(f"{PROG}: {exc}", file=sys.stderr)
        return code
    except ImportError as exc:  # a driver of an extra (see _connect.need), else a bug
        if "pip install" not in str(exc):
            raise
        print(f"{PROG}: {exc}", file=sys.stderr)
        return UNSUPPORTED
    except BrokenPipeError:  # the reader (| head) left: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; a re-run resumes", file=sys.stderr)
        return 130
    except Exception as exc:  # a driver's or a bug: its text may quote a URL's password
        message = f"{type(exc).__name__}: {exc}"
    print(f"{PROG}: failed: {_scrubbed(args, message)}", file=sys.stderr)
    return FOUND_PROBLEMS


def _scrubbed(args: argparse.Namespace, message: str) -> str:
    """``message`` as one line, every password of the command's URLs masked."""
    from ..drivers.urls import scrub

    urls = [getattr(args, name, None) for name in ("url", "source", "target")]
    for url in [*urls, os.environ.get(ENV_VAR)]:
        if url:
            message = scrub(message, url)
    return " ".join(message.split())


__all__ = ["main"]
