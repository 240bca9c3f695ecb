"""``toolfleet eval`` and ``toolfleet eval-retry`` (flag names follow Inspect's where they mean the same)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ._common import parse_kv


def add_commands(commands: Any) -> None:
    p = commands.add_parser("eval", help="evaluate a task", description="Evaluate a task file's task.")
    p.add_argument("task", metavar="TASK_FILE[@task]", help="a Python file defining @task functions (pick one with @name)")
    p.add_argument("--model", "-m", help="provider/model, e.g. openai/gpt-4o-mini or scripted/<policy>")
    p.add_argument("-M", dest="model_args", action="append", metavar="K=V", help="model argument (repeatable)")
    p.add_argument("-T", dest="task_args", action="append", metavar="K=V", help="task argument (repeatable)")
    _add_run_flags(p)
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="start a new log even if LOG_DIR holds an unfinished one for this task")
    p.set_defaults(handler=run_eval)

    r = commands.add_parser("eval-retry", help="resume an interrupted eval (or retry its errored samples)",
                            description="Resume an eval from its log: finished samples are not re-run.")
    r.add_argument("log", metavar="LOG", help="the eval's .jsonl log file")
    r.add_argument("--model", "-m", help="override the model recorded in the log")
    _add_run_flags(r, defaults_from_log=True)
    r.set_defaults(handler=run_eval_retry)


def _add_run_flags(p: argparse.ArgumentParser, defaults_from_log: bool = False) -> None:
    note = " (default: as recorded in the log)" if defaults_from_log else ""
    p.add_argument("--limit", type=int, help="evaluate the first N samples" + note)
    p.add_argument("--epochs", type=int, help="run each sample N times" + note)
    p.add_argument("--max-samples", type=int, help="samples in flight at once (default 32)" + note)
    p.add_argument("--max-sandboxes", type=int, help="sandboxes alive at once" + note)
    p.add_argument("--retry-on-error", type=int, nargs="?", const=1, help="retry errored samples N times (flag alone: 1)" + note)
    p.add_argument("--sandbox", help="local | docker (overrides the task's sandbox)" + note)
    p.add_argument("--broker", help="Redis URL: run tool calls on toolfleet workers (distributed mode)" + note)
    p.add_argument("--approval", metavar="FILE|human|auto", help="approval policy (overrides the task's)" + note)
    p.add_argument("--review", metavar="FILE|human", help="review policy (overrides the task's)" + note)
    p.add_argument("--message-limit", type=int, help="per-sample message limit" + note)
    p.add_argument("--token-limit", type=int, help="per-sample token limit" + note)
    p.add_argument("--time-limit", type=float, help="per-sample wall-clock limit in seconds" + note)
    p.add_argument("--log-dir", default=None if defaults_from_log else "logs", help="where eval logs go (default ./logs)")
    p.add_argument("--display", choices=["auto", "rich", "log", "none"], default="auto",
                   help="progress display: rich on a TTY, JSON log lines otherwise (auto)")


def _common_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(limit=args.limit, epochs=args.epochs, max_samples=args.max_samples, max_sandboxes=args.max_sandboxes,
                retry_on_error=args.retry_on_error, sandbox=args.sandbox, broker=args.broker, approval=args.approval,
                review=args.review, message_limit=args.message_limit, token_limit=args.token_limit,
                time_limit=args.time_limit, display=args.display)


def run_eval(args: argparse.Namespace) -> int:
    from orchestrator.eval import eval_async
    from orchestrator.util import tune_gc_for_many_samples

    tune_gc_for_many_samples()  # this process is the orchestrator: thousands of live samples
    kwargs = _common_kwargs(args)
    kwargs["retry_on_error"] = kwargs["retry_on_error"] or 0
    [log] = asyncio.run(eval_async(args.task, args.model, task_args=parse_kv(args.task_args, "-T"),
                                   model_args=parse_kv(args.model_args, "-M"), log_dir=args.log_dir,
                                   resume=args.resume, **kwargs))
    print_summary(log)
    return 0 if log.status == "success" else 1


def run_eval_retry(args: argparse.Namespace) -> int:
    from orchestrator.eval import eval_retry_async
    from orchestrator.util import tune_gc_for_many_samples

    tune_gc_for_many_samples()

    kwargs = {k: v for k, v in _common_kwargs(args).items() if v is not None}
    if args.log_dir:
        kwargs["log_dir"] = args.log_dir
    log = asyncio.run(eval_retry_async(args.log, model=args.model, **kwargs))
    print_summary(log)
    return 0 if log.status == "success" else 1


def print_summary(log: Any) -> None:
    """Results on stdout (the progress display and log lines go to stderr)."""
    results = log.results
    lines = [f"{log.eval.task} · {log.eval.model} · {log.status}"]
    if results is not None:
        lines.append(f"samples: {results.completed_samples}/{results.total_samples} completed, "
                     f"{results.error_samples} errored")
        for score in results.scores:
            metrics = ", ".join(f"{m.name}={m.value:.3f}" for m in score.metrics.values())
            lines.append(f"{score.name}: {metrics}")
    lines.append(f"log: {log.location}")
    print("\n".join(lines), file=sys.stdout, flush=True)
