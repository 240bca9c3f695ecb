"""``toolfleet log list|show|dump`` and ``toolfleet view`` (reading eval logs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from orchestrator.util._terminal import json_terminal_safe, terminal_safe

from ._common import fail


def add_commands(commands: Any) -> None:
    p = commands.add_parser("log", help="read eval logs", description="Read eval logs.")
    sub = p.add_subparsers(dest="log_command", metavar="list|show|dump|export", required=True)
    lst = sub.add_parser("list", help="list the logs in a directory")
    lst.add_argument("--log-dir", default="logs")
    lst.add_argument("--json", action="store_true", help="one JSON object per log")
    lst.set_defaults(handler=log_list)
    show = sub.add_parser("show", help="summarise a log (or one sample of it)")
    show.add_argument("log", metavar="LOG")
    show.add_argument("--sample", help="show this sample's messages and events")
    show.add_argument("--epoch", type=int, default=1)
    show.add_argument("--events", action="store_true", help="with --sample: every event, one line each")
    show.set_defaults(handler=log_show)
    export = sub.add_parser("export", help="write the log in Inspect's format (read by inspect_ai / `inspect view`)")
    export.add_argument("log", metavar="LOG|DIR", help="a log, or a directory: every log under it (then "
                        "`inspect view --log-dir DIR` shows them all)")
    export.add_argument("--format", choices=["eval", "json"], default="eval")
    export.add_argument("--output", "-o", help="output file (default: next to LOG, .eval or .json)")
    export.set_defaults(handler=log_export)
    dump = sub.add_parser("dump", help="print the whole log as one JSON object (the exporter)")
    dump.add_argument("log", metavar="LOG")
    dump.add_argument("--header-only", action="store_true", help="just the eval spec")
    dump.set_defaults(handler=log_dump)

    view = commands.add_parser("view", help="alias: `log show LOG`, or `log list` without a LOG")
    view.add_argument("log", nargs="?", metavar="LOG")
    view.add_argument("--log-dir", default="logs")
    view.add_argument("--sample")
    view.add_argument("--epoch", type=int, default=1)
    view.add_argument("--json", action="store_true")
    view.add_argument("--events", action="store_true")
    view.set_defaults(handler=lambda a: log_show(a) if a.log else log_list(a))


def _summary(log: Any) -> dict[str, Any]:
    results = log.results
    scores = {}
    if results is not None:
        scores = {s.name: {k: round(m.value, 4) for k, m in s.metrics.items()} for s in results.scores}
    done = sum(1 for s in log.samples if s.error is None)
    total = log.eval.dataset.samples * log.eval.config.epochs
    if log.eval.config.limit is not None:
        total = min(log.eval.config.limit, log.eval.dataset.samples) * log.eval.config.epochs
    return {"log": log.location, "task": log.eval.task, "model": log.eval.model, "status": log.status,
            "done": done, "total": total, "errors": sum(1 for s in log.samples if s.error is not None),
            "scores": scores, "created": log.eval.created}


def log_list(args: argparse.Namespace) -> int:
    from orchestrator.eval import LogFormatError, read_eval_log

    log_dir = Path(args.log_dir)
    if not log_dir.is_dir():
        return fail(f"Log directory '{log_dir}' does not exist.")
    rows = []
    for path in sorted(log_dir.rglob("*.jsonl")):  # eval-set and users nest logs in subdirectories
        try:
            rows.append(_summary(read_eval_log(path)))
        except (LogFormatError, ValueError):
            continue
    if getattr(args, "json", False):
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print(f"No eval logs in {log_dir}.")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("log", "task", "model", "status", "samples", "errors", "scores")
    table.columns[0].overflow = "fold"  # a long name wraps; it is never cut
    for row in rows:
        scores = "; ".join(f"{k}: " + (", ".join(f"{m}={v}" for m, v in s.items()) or "none scored")
                           for k, s in row["scores"].items())
        table.add_row(str(Path(row["log"]).relative_to(log_dir)), row["task"], row["model"], row["status"],
                      f"{row['done']}/{row['total']}", str(row["errors"]), scores)
    # Never cut a log name: as wide as the rows need on a terminal, unbounded when piped.
    console = Console()
    if not console.is_terminal:
        console = Console(width=100_000)
    console.print(table, overflow="ignore", crop=False)
    return 0


def _say(text: str) -> None:
    """``print`` for text that holds model, sandbox or dataset output: control sequences made inert."""
    print(terminal_safe(text))


def log_show(args: argparse.Namespace) -> int:
    from orchestrator.eval import read_eval_log

    log = read_eval_log(args.log)
    if args.sample is not None:
        return _show_sample(log, args.sample, args.epoch, getattr(args, "events", False))
    row = _summary(log)
    _say(f"{row['task']} · {row['model']} · {row['status']} · {row['done']}/{row['total']} samples, {row['errors']} "
         "errors")
    _say(f"eval id {log.eval.eval_id} · runs {len(log.runs)} · log {log.location}")
    from orchestrator.model._pricing import format_cost

    from ._eval_cmd import usage_lines

    stats = log.stats
    if not stats.model_usage and log.samples:
        from orchestrator.eval._results import eval_stats

        stats = eval_stats({s.key: s for s in log.samples}, 0.0)  # interrupted: no footer figures yet
    for line in usage_lines(stats):
        _say(line)
    for name, metrics in row["scores"].items():
        _say(f"  {name}: " + (", ".join(f"{m}={v}" for m, v in metrics.items()) or "no samples scored"))
    for s in sorted(log.samples, key=lambda s: (s.epoch, str(s.id))):
        score = ", ".join(f"{k}={v.value}" for k, v in s.scores.items())
        extra = f" limit={s.limit.type}" if s.limit else ""
        extra += f" ERROR {s.error.type}: {s.error.message}" if s.error else ""
        extra += f" retries={len(s.error_retries)}" if s.error_retries else ""
        cost = f", {format_cost(s.model_usage)}" if s.model_usage else ""
        _say(f"  [{s.id}#{s.epoch}] {score}{extra}  ({(s.total_time or 0):.2f}s{cost})")
    return 0


SHOWN_EVENTS = 20  # without --events, the first events are listed and the rest counted


def _show_sample(log: Any, sample_id: str, epoch: int, all_events: bool = False) -> int:
    match = next((s for s in log.samples if str(s.id) == sample_id and s.epoch == epoch), None)
    if match is None:
        return fail(f"No sample '{sample_id}' (epoch {epoch}) in {log.location}.")
    for m in match.messages:
        text = m.text
        calls = getattr(m, "tool_calls", None) or []
        _say(f"--- {m.role}" + (f" ({m.function})" if getattr(m, "function", None) else ""))
        if text:
            _say(text)
        error = getattr(m, "error", None)
        if error is not None:  # a failed tool call: say why, not an empty body
            _say(f"ERROR [{getattr(error, 'type', '?')}] {getattr(error, 'message', error)}")
        for c in calls:
            _say(f"  -> {c.function}({_arguments_as_sent(c)[:500]})")
    _say(f"--- scores: {json.dumps({k: v.model_dump() for k, v in match.scores.items()})}")
    if match.error:
        _say(f"--- error: {match.error.type}: {match.error.message}")
    for r in match.error_retries:
        _say(f"--- earlier attempt failed: {r.type}: {r.message}")
    _say(f"--- {len(match.events)} events")
    shown = match.events if all_events else match.events[:SHOWN_EVENTS]
    for e in shown:
        _say("  " + event_line(e))
    if len(shown) < len(match.events):
        _say(f"  ... {len(match.events) - len(shown)} more (--events shows all)")
    return 0


def _arguments_as_sent(call: Any) -> str:
    """What the model sent: when its arguments did not parse, the parse error (which quotes the raw text)."""
    if getattr(call, "parse_error", None):
        return f"<not parsed: {' '.join(str(call.parse_error).split())}>"
    return json.dumps(call.arguments, ensure_ascii=False)


def event_line(e: Any) -> str:
    """One line per event: time, kind, and what matters for that kind."""
    import time as _time

    stamp = _time.strftime("%H:%M:%S", _time.gmtime(e.timestamp)) if getattr(e, "timestamp", None) else "--:--:--"
    kind = getattr(e, "event", type(e).__name__)
    data = e.model_dump(mode="json", exclude={"uuid", "timestamp", "span_id", "event"})
    if kind == "tool":
        err = data.get("error")
        unparsed = err is not None and err.get("type") == "parsing" and not data.get("arguments")
        args = "<not parsed>" if unparsed else json.dumps(data.get("arguments"), ensure_ascii=False)[:120]
        detail = f"{data.get('function')}({args})"
        detail += f" ERROR [{err.get('type')}] {err.get('message')}" if err else f" -> {str(data.get('result'))[:80]!r}"
        detail += f" on {data['host']}" if data.get("host") else ""
    elif kind == "model":
        usage = data.get("usage") or {}
        detail = f"{data.get('model')} tokens={usage.get('total_tokens', 0)}"
        detail += f" retries={data['retries']}" if data.get("retries") else ""
        detail += f" ERROR {data['error']}" if data.get("error") else ""
    elif kind == "sandbox":
        what = data.get("cmd") if data.get("action") == "exec" else f"{data.get('action')} {data.get('file')}"
        where = f"@{data['service']} " if data.get("service") else ""
        detail = f"[{data.get('phase') or '-'}] {where}{json.dumps(str(what or ''), ensure_ascii=False)[:120]}"
        detail += f" -> exit {data['result']}" if data.get("result") is not None else ""
        detail += f" ({data['duration']:.3f}s)" if data.get("duration") is not None else ""
        detail += f" ERROR {data['error']}" if data.get("error") else ""
        detail += f" on {data['host']}" if data.get("host") else ""
    elif kind in ("span_begin", "span_end"):
        detail = f"{data.get('type') or ''} {data.get('name') or data.get('id')}".strip()
    else:
        detail = json.dumps(data, ensure_ascii=False, default=str)
    return " ".join(f"{stamp} {kind:<12} {detail}".split())[:300]


def log_export(args: argparse.Namespace) -> int:
    from orchestrator.eval._inspect_export import export_inspect_log

    source = Path(args.log)
    if source.is_dir():
        if args.output:
            return fail("--output names one file: give a LOG, not a directory.")
        logs = sorted(source.rglob("*.jsonl"))
        if not logs:
            return fail(f"No eval logs under {source}.")
        for log in logs:
            _say(str(export_inspect_log(log, args.format)))
        return 0
    _say(str(export_inspect_log(source, args.format, args.output)))
    return 0


def log_dump(args: argparse.Namespace) -> int:
    from orchestrator.eval import read_eval_log

    log = read_eval_log(args.log, header_only=args.header_only)
    dump = log.model_dump_json(indent=2) + "\n"
    # To a terminal, model and sandbox text must not drive it; piped, the JSON is already exact.
    sys.stdout.write(json_terminal_safe(dump) if sys.stdout.isatty() else dump)
    return 0
