"""The eval log: a documented, versioned JSON Lines file written incrementally.

Format ``toolfleet-eval-log`` version 1 — one JSON object per line, each with a ``type``:

``header``  (first line) ``{"type": "header", "format": "toolfleet-eval-log", "version": 1, "eval": EvalSpec}``
``run``     one per process that worked on the eval (the first run, then each resume):
            ``{"type": "run", "run_id", "started_at", "host", "pid", "resumed"}``
``sample``  one per finished sample attempt-set (after its retries): ``{"type": "sample", "sample": EvalSample}``.
            A sample may appear again after a resume re-ran it (it had errored); the **last** line for an
            ``(id, epoch)`` wins.
``batch``   (batch mode) a provider batch holding this eval's requests: ``{"type": "batch", "event": "submit",
            "model", "batch_id", "at", "requests": [{"custom_id", "sample_id", "epoch", "turn", "key"}]}`` when
            submitted, ``{"type": "batch", "event": "end", "model", "batch_id", "state", "error", "at"}`` when
            it ended; a resume collects the submitted batches' results instead of paying again (``model._batch``).
``footer``  when a run finishes: ``{"type": "footer", "status", "results", "stats", "error"}``.
``sandbox`` (distributed mode) a sandbox opened on / closed by a worker host:
            ``{"type": "sandbox", "event": "open"|"close", "handle", "queue", "sample_id", "epoch", "run_id"}``;
            a resume closes the ones a killed run left open (``open_sandboxes``).

Untrusted text: model output may hold lone surrogates or nest arbitrarily deep; the writer replaces
lone surrogates with U+FFFD and cuts containers nested deeper than ``MAX_LOG_DEPTH`` (``_loggable``), so
every line is valid UTF-8 JSON. A sample that still cannot be written is recorded as a stub with a
``LogWriteError``: that sample's error, never the eval's end.

Readers ignore line types they do not know, so adding one is not a version change.

Durability: each line is written, flushed and ``fsync``'d before the eval moves on (the progress display
only counts a sample once its line is on disk), so a SIGKILL or power loss loses at most the samples
still running. A torn last line (killed mid-write) is ignored by readers and cut off before a resume
appends. ``read_eval_log`` turns the file into one ``EvalLog`` (``toolfleet log dump`` prints it as JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.log._events import EvalEvents, Event
from orchestrator.model._chat_message import ChatMessage
from orchestrator.model._concurrency import ConnectionReport
from orchestrator.model._model_output import ModelOutput, ModelUsage
from orchestrator.scorer._score import Score

from ._errors import SetupError
from ._identity import EvalIdentity
from ._loggable import dump_model, encode_line

LOG_FORMAT = "toolfleet-eval-log"
LOG_VERSION = 1
LOG_SUFFIX = ".jsonl"

EvalStatus = Literal["started", "success", "error", "cancelled"]


class EvalDataset(BaseModel):
    name: str | None = None
    location: str | None = None
    samples: int = 0
    sample_ids: list[int | str] = Field(default_factory=list)


class EvalConfig(BaseModel):
    limit: int | None = None
    sample_ids: list[str] | None = None  # --sample-id: only these samples
    epochs: int = 1
    epochs_reducer: list[str] | None = None
    fail_on_error: bool | float | None = None
    max_connections: int | None = None
    max_subprocesses: int | None = None
    model_prices: str | None = None  # --model-prices: the price file over the built-in table
    log_format: str = "jsonl"  # "eval"/"json": an Inspect-format copy is (re)written when a run ends
    max_samples: int | None = None
    max_sandboxes: int | None = None
    retry_on_error: int = 0
    sandbox: dict[str, Any] | None = None
    broker: str | None = None  # credentials redacted
    approval: str | None = None
    review: str | None = None
    message_limit: int | None = None
    token_limit: int | None = None
    time_limit: float | None = None
    working_limit: float | None = None


class EvalSpec(BaseModel):
    eval_id: str
    created: float
    task: str
    task_file: str | None = None
    task_args: dict[str, Any] = Field(default_factory=dict)
    model: str
    model_args: dict[str, Any] = Field(default_factory=dict)  # as given (-M), secrets redacted
    generate_config: dict[str, Any] = Field(default_factory=dict)
    task_file_hash: str | None = None
    identity: EvalIdentity | None = None  # what a re-run must match to resume this log
    dataset: EvalDataset
    solver: str | None = None
    scorers: list[str] = Field(default_factory=list)
    config: EvalConfig = Field(default_factory=EvalConfig)
    toolfleet_version: str | None = None


class EvalError(BaseModel):
    type: str
    message: str
    traceback: str | None = None
    retryable: bool = True
    at: float = Field(default_factory=time.time)


class EvalSampleLimit(BaseModel):
    type: str
    limit: float | int | None = None
    message: str | None = None


class EvalSample(BaseModel):
    id: int | str
    epoch: int = 1
    input: str | list[ChatMessage]
    target: str | list[str] = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    messages: list[ChatMessage] = Field(default_factory=list)
    output: ModelOutput | None = None
    scores: dict[str, Score] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    model_usage: dict[str, ModelUsage] = Field(default_factory=dict)
    started_at: float | None = None
    completed_at: float | None = None
    total_time: float | None = None
    working_time: float | None = None  # the solver's working time: wall clock minus waits (as Inspect)
    error: EvalError | None = None  # set when the sample failed for good (after its retries)
    error_retries: list[EvalError] = Field(default_factory=list)  # errors of earlier attempts
    limit: EvalSampleLimit | None = None
    attempts: int = 1
    run_id: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return sample_key(self.id, self.epoch)

    @property
    def transcript(self) -> EvalEvents:
        """Inspect's deprecated view of the sample's events (read ``events`` instead)."""
        return EvalEvents(events=self.events)


def sample_key(sample_id: int | str, epoch: int) -> tuple[str, int]:
    # ids compare as strings: a JSON round trip must not turn 1 and "1" into different samples.
    return (str(sample_id), epoch)


class EvalMetricValue(BaseModel):
    name: str
    value: float


class EvalScore(BaseModel):
    name: str
    scorer: str | None = None  # the scorer's key in samples' ``scores`` (``name`` adds the reducer if several)
    reducer: str | None = None  # how epochs were reduced (None: one epoch)
    scored_samples: int = 0
    metrics: dict[str, EvalMetricValue] = Field(default_factory=dict)


class EvalResults(BaseModel):
    total_samples: int = 0
    completed_samples: int = 0
    error_samples: int = 0
    scores: list[EvalScore] = Field(default_factory=list)


class EvalStats(BaseModel):
    started_at: float | None = None
    completed_at: float | None = None
    model_usage: dict[str, ModelUsage] = Field(default_factory=dict)  # each with its total_cost (None: no price)
    connections: dict[str, ConnectionReport] = Field(default_factory=dict)  # the adaptive limit, per model


class EvalRun(BaseModel):
    run_id: str
    started_at: float
    host: str | None = None
    pid: int | None = None
    resumed: bool = False


class SandboxRecord(BaseModel):
    handle: str
    queue: str | None = None
    sample_id: int | str | None = None
    epoch: int | None = None
    run_id: str | None = None


class EvalLog(BaseModel):
    format: str = LOG_FORMAT
    version: int = LOG_VERSION
    status: EvalStatus = "started"
    eval: EvalSpec
    runs: list[EvalRun] = Field(default_factory=list)
    results: EvalResults | None = None
    stats: EvalStats = Field(default_factory=EvalStats)
    error: EvalError | None = None
    samples: list[EvalSample] = Field(default_factory=list)
    location: str | None = None
    open_sandboxes: list[SandboxRecord] = Field(default_factory=list)  # opened, never closed (a killed run's)
    sandbox_events: list[dict[str, Any]] = Field(default_factory=list)  # every ``sandbox`` line, in order
    batches: list[dict[str, Any]] = Field(default_factory=list)  # every ``batch`` line, in order


class LogFormatError(SetupError):
    """The file is not a toolfleet eval log (or a newer version of one)."""


def read_eval_log(path: str | Path, header_only: bool = False) -> EvalLog:
    """Read a log file (complete or interrupted) into an ``EvalLog``."""
    path = Path(path)
    if not path.is_file():
        raise LogFormatError(f"Log file '{path}' does not exist.")
    log: EvalLog | None = None
    samples: dict[tuple[str, int], EvalSample] = {}
    sandboxes: dict[str, SandboxRecord] = {}
    with path.open("rb") as f:
        lines = f.read().split(b"\n")
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            if n == len(lines) or (n == len(lines) - 1 and not lines[-1]):
                break  # a torn last line: the writer was killed mid-write
            raise LogFormatError(f"{path}:{n}: not valid JSON") from None
        kind = record.get("type")
        if log is None:
            if kind != "header" or record.get("format") != LOG_FORMAT:
                raise LogFormatError(f"'{path}' is not a toolfleet eval log.")
            if record.get("version", 0) > LOG_VERSION:
                raise LogFormatError(
                    f"'{path}' is log version {record['version']}; this toolfleet reads up to {LOG_VERSION}.")
            log = EvalLog(eval=EvalSpec.model_validate(record["eval"]), location=str(path))
            if header_only:
                return log
        elif kind == "run":
            log.runs.append(EvalRun.model_validate(record))
            log.status = "started"  # a run after a footer: that footer is superseded
            log.results = None
        elif kind == "sample":
            sample = EvalSample.model_validate(record["sample"])
            samples[sample.key] = sample
        elif kind == "sandbox":
            log.sandbox_events.append({k: v for k, v in record.items() if k != "type"})
            rec = SandboxRecord.model_validate(record)
            if record.get("event") == "open":
                sandboxes[rec.handle] = rec
            else:
                sandboxes.pop(rec.handle, None)
        elif kind == "batch":
            log.batches.append({k: v for k, v in record.items() if k != "type"})
        elif kind == "footer":
            log.status = record["status"]
            log.results = EvalResults.model_validate(record["results"]) if record.get("results") else None
            log.stats = EvalStats.model_validate(record.get("stats") or {})
            log.error = EvalError.model_validate(record["error"]) if record.get("error") else None
    if log is None:
        raise LogFormatError(f"'{path}' is empty: not a toolfleet eval log.")
    log.samples = list(samples.values())
    log.open_sandboxes = list(sandboxes.values())
    return log


class LogWriter:
    """Appends lines durably. One writer per eval; lines are serialised by a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    @classmethod
    async def create(cls, path: Path, spec: EvalSpec) -> LogWriter:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = cls(path)
        header = {"type": "header", "format": LOG_FORMAT, "version": LOG_VERSION, "eval": dump_model(spec)}
        await writer._write(header, mode="xb")
        return writer

    @classmethod
    async def resume(cls, path: Path) -> LogWriter:
        await asyncio.to_thread(_cut_torn_tail, path)
        return cls(path)

    async def run(self, run_id: str, resumed: bool) -> None:
        await self._write({"type": "run", "run_id": run_id, "started_at": time.time(), "host": socket.gethostname(),
                           "pid": os.getpid(), "resumed": resumed})

    async def sample(self, sample: EvalSample) -> None:
        await self._write({"type": "sample", "sample": dump_model(sample)})

    async def sandbox(self, event: Literal["open", "close"], record: SandboxRecord) -> None:
        await self._write({"type": "sandbox", "event": event, **record.model_dump(mode="json")})

    async def batch(self, record: dict[str, Any]) -> None:
        await self._write({"type": "batch", **record})

    async def footer(self, status: EvalStatus, results: EvalResults | None, stats: EvalStats,
                     error: EvalError | None = None) -> None:
        await self._write({"type": "footer", "status": status,
                           "results": results.model_dump(mode="json") if results else None,
                           "stats": stats.model_dump(mode="json"),
                           "error": error.model_dump(mode="json") if error else None})

    async def _write(self, record: dict[str, Any], mode: str = "ab") -> None:
        # Model output is untrusted: odd strings and deep nesting are made safe here, never raised.
        line = encode_line(record)
        async with self._lock:
            # fsync blocks for milliseconds on real disks: keep it off the event loop.
            await asyncio.to_thread(_append_durably, self.path, line, mode)


def _append_durably(path: Path, line: bytes, mode: str) -> None:
    with open(path, mode) as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_tail(path: Path) -> None:
    """Drop a partial last line left by a writer killed mid-write, so appends start on a fresh line."""
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())
