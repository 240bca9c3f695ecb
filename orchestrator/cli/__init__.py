"""The ``toolfleet`` command line (console script ``toolfleet = orchestrator.cli:main``).

User mistakes (``EvalSetupError`` and friends) print one line on stderr and exit 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._common import EXIT_INTERRUPTED, EXIT_USER_ERROR, fail

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from . import _bench_cmd, _eval_cmd, _log_cmd

    parser = argparse.ArgumentParser(prog="toolfleet", description="Run LLM agents at scale with sandboxed tools.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _eval_cmd.add_commands(commands)
    commands.add_parser("worker", help="run a worker (Celery) that executes tool calls; see `toolfleet worker --help`",
                        add_help=False)
    _bench_cmd.add_command(commands)
    _log_cmd.add_commands(commands)
    return parser


def _version() -> str:
    from orchestrator import __version__

    return f"toolfleet {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "worker":
        # The worker owns its flags; pass them through untouched.
        return _worker(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    from orchestrator.eval._errors import EvalSetupError

    try:
        return int(args.handler(args) or 0)
    except EvalSetupError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        print("toolfleet: interrupted. Resume with `toolfleet eval-retry LOG` (finished samples are kept).",
              file=sys.stderr)
        return EXIT_INTERRUPTED


def _worker(argv: list[str]) -> int:
    try:
        from workers.cli import worker_main
    except ImportError as exc:
        return fail(f"The worker is not available in this install ({exc}).")
    return int(worker_main(argv) or 0)

