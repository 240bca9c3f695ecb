"""Write a toolfleet eval log in Inspect AI's log formats, so ``inspect_ai.log.read_eval_log`` and
``inspect view`` open it. Written from Inspect's documented log schema (``EvalLog``: ``eval``, ``plan``,
``results``, ``stats``, ``samples``; events by their ``event`` tag); toolfleet never imports inspect-ai.

``json``  one JSON object (the whole ``EvalLog``, samples included).
``eval``  a zip: ``header.json`` (the log without samples), ``samples/<id>_epoch_<n>.json`` per sample,
          ``summaries.json`` (one summary per sample) and ``_journal/start.json`` (version, eval, plan).

Events map to Inspect's types: model, tool, approval, span_begin/end, info, error, sample_limit, sandbox;
a toolfleet-only event (review, ...) becomes an ``info`` event whose ``source`` names it. The JSONL log
stays the source of truth (streaming, resume); this is a view of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any, Literal

from orchestrator.log._events import full_model_inputs

from ._log_file import read_eval_log
from ._loggable import dump_model

INSPECT_LOG_VERSION = 2
ExportFormat = Literal["eval", "json"]

_TOOL_ERROR_TYPES = {"parsing", "timeout", "unicode_decode", "permission", "file_not_found", "is_a_directory",
                     "limit", "approval", "unknown", "output_limit"}
_LIMIT_TYPES = {"message", "time", "working", "token", "operator", "custom", "cost"}
_PASSTHROUGH = {"span_begin", "span_end", "info"}
SANDBOX_OUTPUT_CHARS = 10_000


def _iso(ts: float | None) -> str | None:
    return None if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).isoformat()


def _error(message: str, traceback: str | None = None) -> dict[str, Any]:
    return {"message": message, "traceback": traceback or "", "traceback_ansi": traceback or ""}


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    out = {"input_tokens": usage.get("input_tokens") or 0, "output_tokens": usage.get("output_tokens") or 0,
           "total_tokens": usage.get("total_tokens") or 0}
    for optional in ("input_tokens_cache_write", "input_tokens_cache_read", "reasoning_tokens", "total_cost"):
        if usage.get(optional) is not None:  # Inspect's ModelUsage has the same optional fields
            out[optional] = usage[optional]
    return out


def _output(output: dict[str, Any] | None, model: str) -> dict[str, Any]:
    if not output:
        return {"model": model, "choices": []}
    out = {"model": output.get("model") or model, "choices": [
        {"message": c["message"], "stop_reason": c.get("stop_reason") or "unknown"} for c in output.get("choices", [])]}
    if output.get("usage"):
        out["usage"] = _usage(output["usage"])
    return out


def _event(e: dict[str, Any], model: str, inputs: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    kind = e.get("event")
    base = {"timestamp": _iso(e.get("timestamp")), "span_id": e.get("span_id"), "uuid": e.get("uuid")}
    if kind == "tool":
        err = e.get("error")
        result = e.get("result")
        return {**base, "event": "tool", "id": e.get("id") or "", "function": e.get("function") or "",
                "arguments": e.get("arguments") or {},
                "result": result if isinstance(result, (str, int, float, bool)) else json.dumps(result, default=str)
                if result is not None else "",
                "error": None if not err else {
                    "type": err.get("type") if err.get("type") in _TOOL_ERROR_TYPES else "unknown",
                    "message": f"[{err.get('type')}] {err.get('message', '')}"},
                "working_time": e.get("working_time"), "agent": e.get("agent"), "failed": e.get("failed")}
    if kind == "model":
        sent = (inputs or {}).get(e.get("uuid") or "")
        if sent is None:
            sent = e.get("input") if isinstance(e.get("input"), list) else []
        tools = [{"name": t["name"], "description": t.get("description") or "",
                  "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
                 for t in e.get("tools") or [] if isinstance(t, dict) and t.get("name")]
        return {**base, "event": "model", "model": e.get("model") or model, "input": sent, "tools": tools,
                "tool_choice": "auto", "config": {}, "output": _output(e.get("output"), e.get("model") or model),
                "error": e.get("error") if isinstance(e.get("error"), str) else None, "retries": e.get("retries"),
                "working_time": e.get("time")}
    if kind == "approval":
        return {**base, "event": "approval", "message": e.get("explanation") or "", "call": e.get("call"),
                "approver": e.get("approver") or "", "decision": e.get("decision"), "modified": e.get("modified"),
                "explanation": e.get("explanation")}
    if kind == "error":
        return {**base, "event": "error", "error": _error(e.get("message") or "", e.get("traceback"))}
    if kind == "sample_limit":
        kind_ = e.get("type") if e.get("type") in _LIMIT_TYPES else "custom"
        return {**base, "event": "sample_limit", "type": kind_, "message": e.get("message") or "",
                "limit": e.get("limit")}
    if kind == "sandbox":
        return {**base, **_sandbox_event(e)}
    if kind in _PASSTHROUGH:
        return {**e, **base}
    data = {k: v for k, v in e.items() if k not in ("uuid", "timestamp", "span_id")}
    return {**base, "event": "info", "source": f"toolfleet.{kind}", "data": data}


def _first(e: dict[str, Any], *names: str) -> Any:
    return next((e[n] for n in names if e.get(n) is not None), None)


def _sandbox_event(e: dict[str, Any]) -> dict[str, Any]:
    """An exec (or file read/write) on a sandbox, with where it ran and how long it took in ``options``."""
    action = e.get("action") if e.get("action") in ("exec", "read_file", "write_file") else "exec"
    cmd = _first(e, "cmd", "command")
    result = _first(e, "result", "exit_code", "returncode", "exit")
    output = _first(e, "output", "stdout")
    duration = _first(e, "duration", "working_time")
    options = {k: v for k, v in (("host", e.get("host")), ("duration", duration), ("phase", e.get("phase")),
                                 ("truncated", e.get("truncated") or None), ("error", e.get("error")),
                                 ("call_id", e.get("call_id")), ("service", e.get("service"))) if v is not None}
    stdin = e.get("input")
    return {"event": "sandbox", "action": action,
            "cmd": cmd if isinstance(cmd, str) or cmd is None else " ".join(map(str, cmd)),
            "options": options or None, "file": e.get("file"),
            "input": None if stdin is None else str(stdin)[:SANDBOX_OUTPUT_CHARS],
            "result": result if isinstance(result, int) else None,
            "output": None if output is None else str(output)[:SANDBOX_OUTPUT_CHARS],
            "completed": _iso(e["timestamp"] + duration) if isinstance(duration, (int, float)) and e.get("timestamp")
            else None}


def _sample(s: dict[str, Any], model: str, eval_id: str) -> dict[str, Any]:
    error = s.get("error")
    limit = s.get("limit")
    # The viewer addresses samples by uuid and expects the (here empty) attachment and store maps.
    uuid = hashlib.sha256(f"{eval_id}/{s['id']}/{s.get('epoch', 1)}".encode()).hexdigest()[:22]
    events = s.get("events") or []
    inputs = full_model_inputs(events)  # model inputs kept as shared heads in our log, whole in Inspect's
    return {
        "uuid": uuid, "attachments": {}, "store": {},
        "working_time": s.get("working_time") if s.get("working_time") is not None else s.get("total_time"),
        "id": s["id"], "epoch": s.get("epoch", 1), "input": s.get("input", ""), "target": s.get("target", ""),
        "metadata": s.get("metadata") or {}, "messages": s.get("messages") or [],
        "output": _output(s.get("output"), model), "scores": s.get("scores") or {},
        "events": [_event(e, model, inputs) for e in events],
        "model_usage": {k: _usage(v) for k, v in (s.get("model_usage") or {}).items()},
        "started_at": _iso(s.get("started_at")), "completed_at": _iso(s.get("completed_at")),
        "total_time": s.get("total_time"),
        "error": _error(f"{error['type']}: {error['message']}", error.get("traceback")) if error else None,
        "error_retries": [_error(f"{r['type']}: {r['message']}", r.get("traceback"))
                          for r in s.get("error_retries") or []],
        "limit": {"type": limit["type"] if limit["type"] in _LIMIT_TYPES else "custom", "limit": limit.get("limit")
                  or 0}
        if limit else None,
    }


def _summary(s: dict[str, Any]) -> dict[str, Any]:
    keep = ("uuid", "id", "epoch", "input", "target", "metadata", "scores", "model_usage", "total_time",
            "working_time", "started_at", "completed_at")
    out = {k: s[k] for k in keep if k in s}
    out["error"] = s["error"]["message"] if s.get("error") else None
    out["limit"] = s["limit"]["type"] if s.get("limit") else None
    out["message_count"] = len(s.get("messages") or [])
    out["completed"] = True
    return out


def inspect_log(log: Any) -> dict[str, Any]:
    """An Inspect ``EvalLog`` (as plain JSON data) for toolfleet's ``EvalLog``."""
    data = dump_model(log)
    spec, config = data["eval"], data["eval"]["config"]
    model = spec["model"]
    eval_spec = {
        "eval_id": spec["eval_id"], "run_id": (data["runs"][-1]["run_id"] if data["runs"] else spec["eval_id"]),
        "created": _iso(spec["created"]), "task": spec["task"], "task_id": spec["eval_id"], "task_version": 0,
        "task_file": spec.get("task_file"), "task_args": spec.get("task_args") or {},
        "dataset": {"name": spec["dataset"].get("name"), "location": spec["dataset"].get("location"),
                    "samples": spec["dataset"].get("samples"), "sample_ids": spec["dataset"].get("sample_ids")},
        "sandbox": {"type": config["sandbox"]["type"], "config": None} if config.get("sandbox") else None,
        "model": model, "model_args": spec.get("model_args") or {},
        "model_generate_config": spec.get("generate_config") or {},
        "config": {k: config.get(k) for k in ("limit", "epochs", "epochs_reducer", "fail_on_error", "message_limit",
                                              "token_limit", "time_limit", "working_limit", "max_samples",
                                              "max_sandboxes",
                                              "max_subprocesses")} | {"sample_id": config.get("sample_ids")},
        "packages": {"toolfleet": spec.get("toolfleet_version") or ""},
        "metadata": {"toolfleet_log": data.get("location"), "identity": spec.get("identity")},
    }
    results = data.get("results")
    stats = data.get("stats") or {}
    out: dict[str, Any] = {
        "version": INSPECT_LOG_VERSION,
        "status": "started" if data["status"] == "started" else data["status"],
        "eval": eval_spec,
        "plan": {"name": "plan", "steps": [{"solver": spec.get("solver") or "generate", "params": {}}], "config": {}},
        "results": None if results is None else {
            "total_samples": results["total_samples"], "completed_samples": results["completed_samples"],
            "scores": [{"name": sc["name"], "scorer": sc.get("scorer") or sc["name"], "reducer": sc.get("reducer"),
                        "scored_samples": sc.get("scored_samples"), "params": {},
                        "metrics": {k: {"name": m["name"], "value": m["value"], "params": {}}
                                    for k, m in sc["metrics"].items()}} for sc in results["scores"]]},
        "stats": {"started_at": _iso(stats.get("started_at")) or "", "completed_at": _iso(stats.get("completed_at"))
                  or "",
                  "model_usage": {k: _usage(v) for k, v in (stats.get("model_usage") or {}).items()}},
        "error": _error(data["error"]["message"], data["error"].get("traceback")) if data.get("error") else None,
        "samples": [_sample(s, model, spec["eval_id"])
                    for s in sorted(data["samples"], key=lambda s: (s["epoch"], str(s["id"])))],
    }
    return out


def write_inspect_log(log: Any, path: str | Path, format: ExportFormat = "eval") -> Path:
    """Write ``log`` (a toolfleet ``EvalLog``) to ``path`` in Inspect's ``format``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = inspect_log(log)
    tmp = path.with_name(path.name + ".tmp")
    if format == "json":
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    else:
        samples = data.pop("samples")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("_journal/start.json", json.dumps({"version": data["version"], "eval": data["eval"],
                                                           "plan": data["plan"]}))
            for s in samples:
                zf.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s, ensure_ascii=False))
            zf.writestr("summaries.json", json.dumps([_summary(s) for s in samples], ensure_ascii=False))
            zf.writestr("header.json", json.dumps(data, ensure_ascii=False))
    tmp.replace(path)  # readers never see half a file
    return path


def export_inspect_log(jsonl: str | Path, format: ExportFormat = "eval", output: str | Path | None = None) -> Path:
    """Read a toolfleet JSONL log and write its Inspect-format copy (default: next to it, ``.eval``/``.json``)."""
    jsonl = Path(jsonl)
    target = Path(output) if output is not None else jsonl.with_suffix(f".{format}")
    return write_inspect_log(read_eval_log(jsonl), target, format)
