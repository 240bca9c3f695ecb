"""``toolfleet eval`` and ``toolfleet eval-retry`` (flag names follow Inspect's where they mean the same)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from ._common import parse_kv


def add_commands(commands: Any) -> None:
    p = commands.add_parser("eval", help="evaluate a task", description="Evaluate a task file's task.")
    p.add_argument("task", metavar="TASK_FILE[@task]", help="a Python file defining @task functions (pick one with "
                   "@name), or harbor:DIR for Harbor (Terminal-Bench) task directories")
    p.add_argument("--oracle", action="store_true",
                   help="harbor:DIR only: run each task's solution/solve.sh instead of an agent (no model needed) "
                        "to check every environment; the summary lists the tasks whose oracle fails")
    _add_harbor_flags(p)
    p.add_argument("--model", "-m", help="provider/model, e.g. openai/gpt-4o-mini or scripted/<policy>")
    p.add_argument("-M", dest="model_args", action="append", metavar="K=V", help="model argument (repeatable)")
    p.add_argument("-T", dest="task_args", action="append", metavar="K=V", help="task argument (repeatable)")
    _add_run_flags(p)
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="start a new log even if LOG_DIR holds an unfinished one of the same identity (task, task "
                        "file contents and args, model and -M args, generation settings, sandbox, solver, scorers, "
                        "sample selection, epochs)")
    p.set_defaults(handler=run_eval)

    r = commands.add_parser("eval-retry", help="resume an interrupted eval (or retry its errored samples)",
                            description="Resume an eval from its log: finished samples are not re-run.")
    r.add_argument("log", metavar="LOG", help="the eval's .jsonl log file")
    r.add_argument("--model", "-m", help="override the model recorded in the log")
    _add_run_flags(r, defaults_from_log=True)
    r.set_defaults(handler=run_eval_retry)

    es = commands.add_parser("eval-set", help="several tasks x models into one log dir, retried until complete",
                             description="Run every task with every model into LOG_DIR; re-running the same "
                                         "command completes an interrupted set (finished samples are kept).")
    es.add_argument("tasks", nargs="+", metavar="TASK_FILE[@task]")
    es.add_argument("--model", "-m", help="provider/model; comma-separate several")
    es.add_argument("-M", dest="model_args", action="append", metavar="K=V", help="model argument (repeatable)")
    es.add_argument("-T", dest="task_args", action="append", metavar="K=V", help="task argument (repeatable)")
    es.add_argument("--retry-attempts", type=int, default=10, help="passes after the first while logs are incomplete")
    es.add_argument("--retry-wait", type=float, default=30.0, help="seconds before the first retry pass (doubles)")
    _add_run_flags(es)
    es.set_defaults(handler=run_eval_set)


# harbor:DIR only: flag -> the Harbor task argument it sets (recorded in the log with the others).
HARBOR_FLAGS = {"task_env": "--task-env", "timeout_multiplier": "--timeout-multiplier",
                "agent_timeout_multiplier": "--agent-timeout-multiplier",
                "verifier_timeout_multiplier": "--verifier-timeout-multiplier",
                "build_timeout_multiplier": "--build-timeout-multiplier"}


def _add_harbor_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Harbor tasks (harbor:DIR only)")
    g.add_argument("--task-env", action="append", metavar="NAME", help="a variable of this environment the tasks' "
                   "${VAR} templates may read (repeatable; a pattern such as 'TB_*' passes the names it matches); "
                   "TOOLFLEET_* and credential-looking names are never passed")
    g.add_argument("--timeout-multiplier", type=float, metavar="X", help="scale every Harbor timeout (agent, "
                   "verifier, build) by X, as Harbor's flag of the same name")
    g.add_argument("--agent-timeout-multiplier", type=float, metavar="X", help="scale the agent's timeout")
    g.add_argument("--verifier-timeout-multiplier", type=float, metavar="X", help="scale the verifier's timeout")
    g.add_argument("--build-timeout-multiplier", type=float, metavar="X", help="scale the image builds' timeout")


def _harbor_task_args(args: argparse.Namespace, task_args: dict[str, Any]) -> None:
    """The Harbor flags given, as task arguments; refused (one line) for a task that is not harbor:DIR."""
    from orchestrator.eval._errors import EvalSetupError
    from orchestrator.eval._harbor import is_harbor_spec

    given = {key: getattr(args, key) for key in HARBOR_FLAGS if getattr(args, key, None) is not None}
    if given and not is_harbor_spec(args.task):
        flag = HARBOR_FLAGS[next(iter(given))]
        raise EvalSetupError(f"{flag} is for Harbor tasks: give harbor:DIR, not '{args.task}'.")
    task_args.update(given)


def _add_run_flags(p: argparse.ArgumentParser, defaults_from_log: bool = False) -> None:
    note = " (default: as recorded in the log)" if defaults_from_log else ""
    p.add_argument("--limit", type=int, help="evaluate the first N samples" + note)
    p.add_argument("--sample-id", help="evaluate only these sample ids (comma-separated)" + note)
    p.add_argument("--epochs", type=int, help="run each sample N times" + note)
    p.add_argument("--epochs-reducer", help="how epochs' scores reduce to one per sample: mean (default), max, median, "
                   "mode, at_least_K, pass_at_K; comma-separate several" + note)
    p.add_argument("--fail-on-error", nargs="?", const="true", metavar="N|FRACTION",
                   help="stop the eval at the first sample error (flag alone), after N errors, or once a FRACTION "
                        "(< 1) of samples errored (default: never stop, record the errors)" + note)
    p.add_argument("--max-connections", type=int, help="model requests in flight at most (the ceiling of the "
                   "adaptive limit; default 10 for openai/anthropic)" + note)
    p.add_argument("--model-prices", metavar="FILE", help="JSON/YAML prices (USD per million tokens) over the "
                   "built-in table (default: $TOOLFLEET_MODEL_PRICES)" + note)
    p.add_argument("--max-subprocesses", type=int, help="tool calls executing at once" + note)
    p.add_argument("--max-samples", type=int, help="samples in flight at once (default 32)" + note)
    p.add_argument("--max-sandboxes", type=int, help="sandboxes alive at once" + note)
    p.add_argument("--retry-on-error", type=int, nargs="?", const=1,
                   help="retry errored samples N times (flag alone: 1)" + note)
    p.add_argument("--sandbox", type=_sandbox_flag,
                   help="local | docker | docker:COMPOSE_FILE (overrides the task's sandbox)" + note)
    # $TOOLFLEET_BROKER as the worker reads it: a URL holding the Redis password stays out of argv (ps).
    p.add_argument("--broker", default=None if defaults_from_log else os.environ.get("TOOLFLEET_BROKER") or None,
                   help="Redis URL: run tool calls on toolfleet workers (distributed mode; default: "
                        "$TOOLFLEET_BROKER)" + note)
    p.add_argument("--egress-allow", dest="egress_allow", action="append", metavar="CIDR|HOST",
                   help="embedded mode: a private network or host sandboxes with a network may reach besides the "
                        "internet (repeatable), e.g. a local package mirror; with --broker the workers' own "
                        "--egress-allow decides (docs/egress.md)")
    p.add_argument("--approval", metavar="FILE|human|auto", help="approval policy (overrides the task's)" + note)
    p.add_argument("--review", metavar="FILE|human", help="review policy (overrides the task's)" + note)
    p.add_argument("--message-limit", type=int, help="per-sample message limit" + note)
    p.add_argument("--token-limit", type=int, help="per-sample token limit" + note)
    p.add_argument("--time-limit", type=float, help="per-sample wall-clock limit in seconds" + note)
    p.add_argument("--working-limit", type=float, help="per-sample working-time limit in seconds: wall clock "
                   "minus waits (model connection slots, rate-limit backoff and retries)" + note)
    p.add_argument("--no-preflight", dest="preflight", action="store_false",
                   help="skip the checks made before the first sample starts (sandbox specs, docker images, live "
                        "workers, the model endpoint)")
    p.add_argument("--log-dir", default=None if defaults_from_log else "logs",
                   help="where eval logs go (default ./logs)")
    p.add_argument("--display", choices=["auto", "rich", "log", "none"], default="auto",
                   help="progress display: rich on a TTY, JSON log lines otherwise (auto)")
    p.add_argument("--log-format", choices=["jsonl", "eval", "json"], default=None,
                   help="also write the log in Inspect's format (.eval or .json) next to the .jsonl, which "
                        "stays for streaming and resume (default: jsonl only)")
    g = p.add_argument_group("generation (override the task's GenerateConfig)")
    g.add_argument("--temperature", type=float)
    g.add_argument("--max-tokens", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--seed", type=int)
    g.add_argument("--stop-seqs", help="comma-separated stop sequences")
    g.add_argument("--max-retries", type=int, help="model API retries per request")
    g.add_argument("--timeout", type=float, help="model API request timeout (seconds)")
    g.add_argument("--max-tool-output", type=int, help="bytes of tool output the model sees (0: no truncation)")
    g.add_argument("--parallel-tool-calls", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--reasoning-tokens", type=int, help="extended-thinking budget (anthropic)")
    g.add_argument("--cache-prompt", type=_cache_prompt_flag, metavar="auto|true|false",
                   help="prompt caching (anthropic; default auto: when tools are given)")
    g.add_argument("--batch", nargs="?", const=True, type=_batch_flag, metavar="SIZE|FILE",
                   help="send model requests through the provider's batch API (half price, slower): alone for "
                        "the defaults, a batch size, or a YAML/JSON file of batch options (size, max_size, "
                        "send_delay, tick, max_batches, max_consecutive_check_failures)")


GENERATE_FLAGS = ("temperature", "max_tokens", "top_p", "seed", "stop_seqs", "max_retries", "timeout",
                  "max_tool_output", "parallel_tool_calls", "reasoning_tokens", "cache_prompt",
                  "batch")


def _cache_prompt_flag(value: str) -> str | bool:
    choices: dict[str, str | bool] = {"auto": "auto", "true": True, "false": False}
    if value.lower() not in choices:
        raise argparse.ArgumentTypeError(f"{value!r}: use auto, true or false")
    return choices[value.lower()]


def _batch_flag(value: str) -> bool | int | dict[str, Any]:
    """``--batch`` alone (True), ``--batch 1000`` (a size) or ``--batch batch.yml`` (options), as Inspect."""
    from orchestrator.model._generate_config import BatchConfig

    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.isdigit():
        if int(value) < 1:
            raise argparse.ArgumentTypeError(f"a batch size is at least 1, got {value}")
        return int(value)
    path = Path(value)
    if path.suffix.lower() not in (".yml", ".yaml", ".json"):
        raise argparse.ArgumentTypeError(f"{value!r}: give a batch size or a .yml/.yaml/.json file of batch options")
    try:
        import yaml

        options = yaml.safe_load(path.read_text())  # JSON is YAML
        return BatchConfig.model_validate(options or {}).model_dump(exclude_none=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {value}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{value} is not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        first: dict[str, Any] = getattr(exc, "errors", lambda: [{}])()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "options"
        raise argparse.ArgumentTypeError(f"{value}: {where}: {first.get('msg', exc)}") from None


def _sandbox_flag(value: str) -> str | tuple[str, str]:
    """``docker:compose.yaml`` (Inspect's form): the compose file, relative to the current directory."""
    kind, sep, path = value.partition(":")
    if not sep:
        return value
    if kind != "docker" or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: use local, docker or docker:COMPOSE_FILE")
    return (kind, str(Path(path).resolve()))


def _common_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    config = {name: getattr(args, name) for name in GENERATE_FLAGS if getattr(args, name) is not None}
    if "stop_seqs" in config:
        config["stop_seqs"] = [s for s in config["stop_seqs"].split(",") if s]
    return dict(limit=args.limit, epochs=args.epochs, max_samples=args.max_samples, max_sandboxes=args.max_sandboxes,
                retry_on_error=args.retry_on_error, sandbox=args.sandbox, broker=args.broker, approval=args.approval,
                review=args.review, message_limit=args.message_limit, token_limit=args.token_limit,
                time_limit=args.time_limit, working_limit=args.working_limit, display=args.display,
                sample_id=args.sample_id,
                epochs_reducer=args.epochs_reducer.split(",") if args.epochs_reducer else None,
                fail_on_error=parse_fail_on_error(args.fail_on_error), max_connections=args.max_connections,
                max_subprocesses=args.max_subprocesses, config=config or None, log_format=args.log_format,
                preflight=args.preflight, model_prices=args.model_prices, egress_allow=args.egress_allow)


def parse_fail_on_error(value: str | None) -> bool | float | None:
    """``true`` (the flag alone), ``false``, a count N >= 1 or a fraction 0 < F < 1."""
    from orchestrator._errors import SetupError

    if value is None:
        return None
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number <= 0 or (number >= 1 and not number.is_integer()):
        raise SetupError(f"--fail-on-error expects a count N >= 1 or a fraction between 0 and 1, got '{value}'.")
    return int(number) if number >= 1 else number


def run_eval(args: argparse.Namespace) -> int:
    from orchestrator.eval import eval_async
    from orchestrator.util import tune_gc_for_many_samples

    tune_gc_for_many_samples()  # this process is the orchestrator: thousands of live samples
    kwargs = _common_kwargs(args)
    kwargs["retry_on_error"] = kwargs["retry_on_error"] or 0
    kwargs["log_format"] = kwargs["log_format"] or "jsonl"
    task_args, model = parse_kv(args.task_args, "-T"), args.model
    _harbor_task_args(args, task_args)
    if args.oracle:
        from orchestrator._errors import SetupError
        from orchestrator.eval._harbor import ORACLE_MODEL, is_harbor_spec

        if not is_harbor_spec(args.task):
            raise SetupError(f"--oracle runs Harbor tasks' solutions: give harbor:DIR, not '{args.task}'.")
        task_args["oracle"] = True
        model = model or ORACLE_MODEL  # the oracle calls no model
    [log] = asyncio.run(eval_async(args.task, model, task_args=task_args,
                                   model_args=parse_kv(args.model_args, "-M"), log_dir=args.log_dir,
                                   resume=args.resume, **kwargs))
    print_summary(log)
    if log.eval.task_args.get("oracle") and _oracle_failures(log):
        return 1
    return 0 if log.status == "success" else 1


def _oracle_failures(log: Any) -> list[str]:
    from orchestrator.eval._harbor import oracle_failures

    return oracle_failures(log)


def run_eval_set(args: argparse.Namespace) -> int:
    from orchestrator.eval import eval_set_async
    from orchestrator.util import tune_gc_for_many_samples

    tune_gc_for_many_samples()
    kwargs = _common_kwargs(args)
    kwargs["retry_on_error"] = kwargs["retry_on_error"] or 0
    kwargs["log_format"] = kwargs["log_format"] or "jsonl"
    models = [m for m in (args.model or "").split(",") if m] or None
    ok, logs = asyncio.run(eval_set_async(args.tasks, args.log_dir, models, retry_attempts=args.retry_attempts,
                                          retry_wait=args.retry_wait, task_args=parse_kv(args.task_args, "-T"),
                                          model_args=parse_kv(args.model_args, "-M"), **kwargs))
    for log in logs:
        print_summary(log)
    print(f"eval-set: {'complete' if ok else 'incomplete (re-run the same command to continue)'} "
          f"({sum(log.status == 'success' for log in logs)}/{len(logs)} logs complete)")
    return 0 if ok else 1


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


def usage_lines(stats: Any) -> list[str]:
    """The eval's cost (or what is unknown of it) and its adaptive connection limit, if it moved."""
    from orchestrator.model._pricing import format_cost

    tokens = sum(u.total_tokens for u in stats.model_usage.values())
    lines = [f"cost: {format_cost(stats.model_usage)} ({tokens:,} tokens)"] if stats.model_usage else []
    for model, report in stats.connections.items():
        if report.overloads or report.final != report.ceiling:
            lines.append(f"connections: {model} up to {report.ceiling}, lowest {report.lowest}, now {report.final} "
                         f"({report.overloads} overloaded responses)")
    return lines


def print_summary(log: Any) -> None:
    """Results on stdout (the progress display and log lines go to stderr)."""
    results = log.results
    lines = [f"{log.eval.task} · {log.eval.model} · {log.status}"]
    if results is not None:
        lines.append(f"samples: {results.completed_samples}/{results.total_samples} completed, "
                     f"{results.error_samples} errored")
        for score in results.scores:
            if not score.metrics:  # nothing scored: no made-up 0.000
                lines.append(f"{score.name}: no samples scored")
                continue
            metrics = ", ".join(f"{m.name}={m.value:.3f}" for m in score.metrics.values())
            reduced = f" ({score.reducer} over epochs)" if score.reducer else ""
            lines.append(f"{score.name}: {metrics}{reduced}")
    if log.eval.task_args.get("oracle"):  # harbor:DIR --oracle: which tasks' solutions do not pass
        failed = _oracle_failures(log)
        total = len(log.samples)
        tasks = f"{total} task{'s' if total != 1 else ''}"
        lines.append(f"oracle failed on {len(failed)} of {tasks}: {'; '.join(failed)}" if failed
                     else f"oracle passed on {'all ' if total != 1 else ''}{tasks}")
    lines.extend(usage_lines(log.stats))
    lines.append(f"log: {log.location}")
    for suffix in (".eval", ".json"):  # an Inspect-format copy written with --log-format
        inspect_copy = Path(log.location or "").with_suffix(suffix)
        if log.location and inspect_copy.is_file():
            lines.append(f"inspect log: {inspect_copy}")
    from orchestrator.util._terminal import terminal_safe

    # Score names (a Harbor verifier's reward names), sample ids (task directories' names) and error texts are
    # written by datasets and sandboxes: each line is made inert before it reaches the terminal.
    print("\n".join(terminal_safe(line, keep_newlines=False) for line in lines), file=sys.stdout, flush=True)
