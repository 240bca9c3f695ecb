"""The ``toolfleet`` command line (console script ``toolfleet = orchestrator.cli:main``).

User mistakes (``SetupError`` and friends) print one line on stderr and exit 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from ._common import EXIT_INTERRUPTED, EXIT_USER_ERROR, OneLineParser, fail

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from . import _bench_cmd, _eval_cmd, _log_cmd, _setup_cmd

    parser = OneLineParser(prog="toolfleet", description="Run LLM agents at scale with sandboxed tools.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--log-level", default=None, metavar="LEVEL",
                        help="level of toolfleet's own log lines on stderr (default: warning, or $TOOLFLEET_LOG_LEVEL)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _eval_cmd.add_commands(commands)
    commands.add_parser("worker", help="run a worker (Celery) that executes tool calls; see `toolfleet worker --help`",
                        add_help=False)
    _bench_cmd.add_command(commands)
    _log_cmd.add_commands(commands)
    _setup_cmd.add_command(commands)
    return parser


def configure_logging(level: str | None = None) -> None:
    """structlog for the whole process: human lines on a TTY, JSON lines otherwise; on stderr."""
    import logging
    import os

    import structlog

    name = (level or os.environ.get("TOOLFLEET_LOG_LEVEL") or "warning").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        numeric = logging.WARNING
    tty = sys.stderr.isatty()
    renderer = structlog.dev.ConsoleRenderer(colors=True) if tty else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def _version() -> str:
    from orchestrator import __version__

    return f"toolfleet {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "worker":
        # The worker owns its flags; pass them through untouched.
        return _worker(args_list[1:])
    parser = build_parser()
    if args_list and args_list[0] == "bench":
        # A workload owns its flags, --help included (argparse's REMAINDER would refuse a leading flag).
        args = parser.parse_args(["bench"])
        args.argv = args_list[1:]
    else:
        args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    configure_logging(args.log_level)
    from pydantic import ValidationError

    from orchestrator._errors import SetupError

    previous = signal.signal(signal.SIGTERM, _terminated)  # for this command only (main may run in-process)
    try:
        return int(args.handler(args) or 0)
    except SetupError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        from orchestrator.eval._eval import active_log_paths

        logs = " ".join(str(p) for p in active_log_paths()) or "LOG"
        print(f"toolfleet: interrupted. Resume with `toolfleet eval-retry {logs}` (finished samples are kept).",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except ValidationError as exc:  # a value pydantic refused (e.g. a config field): one line, not a traceback
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0].get("loc", ())) if errors else ""
        return fail(f"Invalid value{' for ' + where if where else ''}: {errors[0]['msg'] if errors else exc}")
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (``kill``, a batch scheduler, ``docker stop``) ends a command as Ctrl-C does: the eval's samples
    are cancelled, its sandboxes closed, its log kept, and the line to resume it printed."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background: no Ctrl-C path to take
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)  # asyncio's own handler, when a loop runs: the main task is cancelled


def _worker(argv: list[str]) -> int:
    try:
        from workers.cli import worker_main
    except ImportError as exc:
        return fail(f"The worker is not available in this install ({exc}).")
    return int(worker_main(argv) or 0)

