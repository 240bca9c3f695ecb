"""The soak: the chaos task through Celery on real workers with docker sandboxes, faults injected, then audited.

``run(options)`` starts a Redis and ``workers`` worker processes (``tests/support/fleet.py``), runs the
embedded reference (the same scripted samples in-process: the transcripts every run must reproduce),
optionally the same soak without faults (the wall-time baseline), then the soak with the faults of
``_faults.schedule``, restarting the orchestrator with ``eval-retry`` whenever it was killed. Afterwards it
audits the log (``_audit.audit_samples``) and, after a bounded grace, what is left in Docker and Redis.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.eval import read_eval_log
from tests.support.fleet import (
    REPO_ROOT,
    Fleet,
    RedisServer,
    WorkerProcess,
    child_env,
    ensure_fleet_secret,
)

from . import _audit
from ._faults import KINDS, LIBFAKETIME, SKEW_S, Planned

TASK = str(Path(__file__).with_name("task.py"))
HEARTBEAT_TTL_S = 3.0
RECOVERY_BOUND_S = 300.0
LEAK_GRACE_S = 120.0
SNAPSHOT_DISK = "64m"


@dataclass
class Options:
    samples: int = 40
    workers: int = 3
    slots: int = 6
    seed: int = 1
    kinds: tuple[str, ...] = KINDS
    repeats: int = 1
    baseline: bool = False
    snapshot_every: int = 8
    last: float = 0.7  # the last fault fires by this share of the samples (room for its recovery after)
    retry_on_error: int = 6
    batch_kills: int = 1  # batch-mode evals killed between the provider's accepting a batch and the log line
    batch_samples: int = 6
    keep: bool = False  # keep the work directory (logs) afterwards
    say: Any = print


@dataclass
class FaultRecord:
    kind: str
    injected_at: float
    detail: str = ""
    recovery_s: float | None = None  # None: not recovered within the bound


@dataclass
class RunResult:
    wall_s: float
    log: Path | None
    eval_ids: set[str] = field(default_factory=set)
    faults: list[FaultRecord] = field(default_factory=list)
    orchestrator_runs: int = 1
    unplanned: list[str] = field(default_factory=list)  # the orchestrator ended on its own before the eval was done


class Orchestrator:
    """The ``toolfleet eval`` process of one run (and the ``eval-retry`` processes after it was killed)."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_dir: Path, out: Path) -> None:
        self.env, self.log_dir, self.out = env, log_dir, out
        self.runs = 0
        self.proc = self._start(cmd)

    def _start(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        self.runs += 1
        with open(self.out, "ab") as out:
            return subprocess.Popen(cmd, cwd=REPO_ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    @property
    def log(self) -> Path | None:
        found = sorted(self.log_dir.glob("*.jsonl"))
        return found[0] if found else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def retry(self) -> None:
        assert self.log is not None
        self.proc = self._start([sys.executable, "-P", "-m", "orchestrator.cli", "eval-retry", str(self.log),
                                 "--display", "none"])

    def finished(self) -> bool:
        """The eval's footer is written (success, or an error the log names)."""
        log = self.log
        if log is None:
            return False
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            return any(line.startswith(b'{"type":"footer"') or b'"type": "footer"' in line[:40]
                       for line in f.read().splitlines())


class Progress:
    """Samples finished so far in a log (read incrementally), and the eval id from its header."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.offset = 0
        self.done = 0
        self.eval_id: str | None = None

    def read(self, path: Path | None) -> int:
        if path is None:
            return self.done
        if path != self.path:
            self.path, self.offset, self.done = path, 0, 0
        with open(path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            if b'"type":"sample"' in line[:40] or b'"type": "sample"' in line[:40]:
                self.done += 1
            elif self.eval_id is None and b'"header"' in line[:40]:
                self.eval_id = json.loads(line)["eval"]["eval_id"]
        return self.done


class Soak:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.rng = random.Random(f"chaos-faults:{options.seed}")
        self.work = Path(tempfile.mkdtemp(prefix="toolfleet-chaos-"))
        self.redis = RedisServer(password=secrets.token_hex(16))
        self.fleet = Fleet(self.redis)
        self.skewed: set[str] = set()
        self.filler: subprocess.Popen[bytes] | None = None
        self.unacked = 0

    # --- the fleet -------------------------------------------------------------------------------

    def start(self) -> None:
        ensure_fleet_secret()
        self.redis.start()
        self.fleet.start_workers(self.o.workers, **self._worker_options())

    def _worker_options(self) -> dict[str, Any]:
        return {"slots": self.o.slots, "concurrency": 4 * self.o.slots, "imports": ("tests.chaos.tools",),
                "heartbeat_interval": 0.5, "heartbeat_ttl": HEARTBEAT_TTL_S, "orphan_grace": 2.0,
                "allow_local": False, "extra_args": ("--snapshot-disk", SNAPSHOT_DISK, "--warm-pool", "1")}

    def replace(self, worker: WorkerProcess, env: dict[str, str] | None = None, graceful: bool = True) -> WorkerProcess:
        """The worker's process stopped (drained, or SIGKILLed) and a new one started under its name."""
        if graceful:
            worker.stop(120)
        else:
            worker.kill()
        fresh = WorkerProcess(self.redis.url, host=worker.host, env=env, **self._worker_options())
        self.fleet.workers[self.fleet.workers.index(worker)] = fresh
        worker.log.close()
        fresh.start(60)
        return fresh

    def stop(self) -> None:
        self.fleet.stop(120)
        self.fleet.cleanup()
        self.redis.cleanup()
        if not self.o.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def whole(self) -> bool:
        try:
            client = self.redis.client()
            return all(w.alive() and client.exists(f"toolfleet:host:{w.host}") for w in self.fleet.workers)
        except Exception:  # noqa: BLE001 - Redis still restarting
            return False

    # --- runs ------------------------------------------------------------------------------------

    def eval_cmd(self, log_dir: Path, sandbox: str, distributed: bool, samples: int | None = None,
                 task: str = "chaos", more: tuple[str, ...] = (), model: str = "scripted/chaos") -> list[str]:
        n = self.o.samples if samples is None else samples
        args = ["-T", f"samples={n}", "-T", f"seed={self.o.seed}", "-T", f"sandbox={sandbox}",
                "-T", f"snapshot_every={self.o.snapshot_every}"] if task == "chaos" else []
        return [sys.executable, "-P", "-m", "orchestrator.cli", "eval", f"{TASK}@{task}", "--model", model,
                *args, "--log-dir", str(log_dir), "--display", "none", "--retry-on-error", str(self.o.retry_on_error),
                "--max-samples", str(self.o.workers * self.o.slots), "--time-limit", "900",
                *(["--broker", self.redis.url] if distributed else []), *more]

    def env(self, distributed: bool = True, **extra: str) -> dict[str, str]:
        """A child's environment; a distributed run's ``eval-retry`` finds the broker's password here."""
        env = child_env(**extra)
        env.pop("TOOLFLEET_BROKER", None)
        return {**env, "TOOLFLEET_BROKER": self.redis.url} if distributed else env

    def reference(self) -> dict[str, Any]:
        """The embedded run of the same samples (local sandboxes): the tool messages every run must equal."""
        log_dir = self.work / "reference"
        cmd = [*self.eval_cmd(log_dir, "local", distributed=False), "--max-samples", "64"]  # in-process: no fleet bound
        done = subprocess.run(cmd, cwd=REPO_ROOT, env=self.env(False),
                              check=False, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"the embedded reference run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        [path] = log_dir.glob("*.jsonl")
        return {str(s.id): s for s in read_eval_log(path).samples}

    def soak(self, name: str, plan: list[Planned]) -> RunResult:
        log_dir = self.work / name
        started = time.monotonic()
        orch = Orchestrator(self.eval_cmd(log_dir, "docker", distributed=True), self.env(), log_dir,
                            self.work / f"{name}.out")
        try:
            return self._drive(name, orch, plan, started)
        except BaseException:
            orch.kill()  # interrupted: no orchestrator outlives the soak
            raise

    def _drive(self, name: str, orch: Orchestrator, plan: list[Planned], started: float) -> RunResult:
        progress = Progress()
        result = RunResult(0.0, None)
        pending = list(plan)
        while True:
            done = progress.read(orch.log)
            if orch.proc.poll() is not None:
                if orch.finished() and orch.proc.returncode == 0:
                    break
                if orch.runs > 3 * (len(plan) + 1):
                    raise RuntimeError(f"{name}: the orchestrator keeps failing; see {orch.out}")
                errors = _sample_errors(orch.log)
                result.unplanned.append(f"exit {orch.proc.returncode}, {sum(errors.values())} sample error(s): "
                                        + "; ".join(f"{n} x {why}" for why, n in errors.most_common(3)))
                self.o.say(f"[chaos] {name}: orchestrator exited {orch.proc.returncode} on its own: eval-retry "
                           f"({result.unplanned[-1]})")
                orch.retry()
                continue
            if pending and progress.eval_id and done >= pending[0].at * self.o.samples:
                planned = pending.pop(0)
                time.sleep(planned.delay)
                progress.read(orch.log)  # what finished meanwhile is not the recovery's
                result.faults.append(self.inject(planned.kind, orch, progress))
                continue
            time.sleep(0.2)
        result.wall_s = time.monotonic() - started
        result.log = orch.log
        result.orchestrator_runs = orch.runs
        if progress.eval_id:
            result.eval_ids.add(progress.eval_id)
        self._end_filler()
        return result

    # --- faults ----------------------------------------------------------------------------------

    def inject(self, kind: str, orch: Orchestrator, progress: Progress) -> FaultRecord:
        record = FaultRecord(kind, time.monotonic())
        before = progress.done
        worker = self.rng.choice(self.fleet.workers)
        if kind == "worker-kill":
            record.detail = worker.host
            self.replace(worker, graceful=False)
        elif kind == "worker-stop":
            record.detail = worker.host
            os.killpg(worker.pid, signal.SIGSTOP)
            try:
                time.sleep(HEARTBEAT_TTL_S + 5.0 + 3.0)  # past its TTL and the orchestrator's lost_grace
            finally:
                os.killpg(worker.pid, signal.SIGCONT)
        elif kind == "redis-restart":
            self.redis.restart(down_for=1.0)
        elif kind == "redis-restart-aof":
            self.redis.enable_aof()
            time.sleep(self.rng.uniform(0.5, 2.0))
            self.redis.restart(down_for=1.0, aof=True)
            self.redis.client().config_set("appendonly", "no")  # as shipped again for the next restart
        elif kind == "container-kill":
            ids = self._containers(progress.eval_id, running=True)
            record.detail = f"{len(ids)} running"
            if ids:
                subprocess.run(["docker", "kill", self.rng.choice(ids)], check=False, capture_output=True, timeout=60)
        elif kind == "snapshot-disk-full":
            self._end_filler()
            before = -1  # recovered once the filler's eval ended (its snapshots removed) and a sample finished
            log_dir = self.work / f"filler-{len(self.skewed)}-{time.monotonic_ns()}"
            cmd = self.eval_cmd(log_dir, "docker", distributed=True, task="fill_snapshots",
                                more=("-T", "hold=10", "-T", "mb=24"))
            self.filler = subprocess.Popen(cmd, cwd=REPO_ROOT, env=self.env(), stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True)
            record.detail = str(log_dir)
        elif kind == "orchestrator-kill":
            orch.kill()
            orch.retry()
        elif kind == "clock-skew":
            skew = f"{'+' if len(self.skewed) % 2 == 0 else '-'}{SKEW_S}s"
            record.detail = f"{worker.host} {skew}"
            self.skewed.add(worker.host)
            skewed = self.replace(worker, env={"LD_PRELOAD": LIBFAKETIME, "FAKETIME": skew})
            self._recover(record, progress, before, orch)
            self.replace(skewed)  # the clock back
            return record
        self._recover(record, progress, before, orch)
        return record

    def _recover(self, record: FaultRecord, progress: Progress, before: int, orch: Orchestrator) -> None:
        deadline = time.monotonic() + RECOVERY_BOUND_S
        while time.monotonic() < deadline:
            done = progress.read(orch.log)
            if before < 0 and self.filler is not None:
                if self.filler.poll() is None:
                    time.sleep(0.2)
                    continue
                self.filler, before = None, done
            if self.whole() and (done > before or (orch.proc.poll() is not None and orch.finished())):
                record.recovery_s = round(time.monotonic() - record.injected_at, 1)
                break
            if orch.proc.poll() is not None and not orch.finished():
                orch.retry()
            time.sleep(0.2)
        self.o.say(f"[chaos] {record.kind} {record.detail}: recovered in {record.recovery_s} s "
                   f"({progress.done}/{self.o.samples} samples)")

    def _end_filler(self) -> None:
        if self.filler is not None:
            try:
                self.filler.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.filler.pid, signal.SIGKILL)
            self.filler = None

    # --- leaks -----------------------------------------------------------------------------------

    def _containers(self, eval_id: str | None, running: bool = False) -> list[str]:
        if not eval_id:
            return []
        done = subprocess.run(["docker", "ps", "-q", *([] if running else ["-a"]), "--filter",
                               f"label=toolfleet.eval_id={eval_id}"], check=False, capture_output=True, text=True,
                              timeout=60)
        return done.stdout.split()

    def _snapshot_images(self, eval_ids: set[str]) -> list[str]:
        out: list[str] = []
        for eval_id in eval_ids:
            done = subprocess.run(["docker", "images", "-q", "--filter", f"label=toolfleet.snapshot.eval_id={eval_id}"],
                                  check=False, capture_output=True, text=True, timeout=60)
            out += done.stdout.split()
        return out

    def leaks(self, eval_ids: set[str]) -> list[str]:
        """What is still there after a bounded grace: containers and snapshot images of these evals, and
        Redis keys outside the allow-list (``_audit.leaked_keys``)."""
        deadline = time.monotonic() + LEAK_GRACE_S
        while True:
            found = [f"container {c} of eval {e}" for e in eval_ids for c in self._containers(e)]
            found += [f"snapshot image {i}" for i in self._snapshot_images(eval_ids)]
            keys = _audit.scan_redis(self.redis.client())
            found += _audit.leaked_keys(keys, eval_ids, time.time())
            self.unacked = int(keys.get("unacked", {}).get("size", 0))
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(1.0)

    def filler_eval_ids(self) -> set[str]:
        out = set()
        for path in self.work.glob("filler-*/*.jsonl"):
            with open(path) as f:
                out.add(json.loads(f.readline())["eval"]["eval_id"])
        return out


def _sample_errors(log: Path | None) -> Counter[str]:
    """The errored samples' reasons in a log (first line of each)."""
    if log is None:
        return Counter()
    return Counter((s.error.message or "").splitlines()[0][:160] for s in read_eval_log(log).samples if s.error)


def recovery_table(faults: list[FaultRecord]) -> list[tuple[str, int, str]]:
    """(kind, injected, recovery seconds median / max) per kind, in ``KINDS`` order. Pure."""
    rows = []
    for kind in [k for k in KINDS if any(f.kind == k for f in faults)]:
        times = [f.recovery_s for f in faults if f.kind == kind]
        ok = [t for t in times if t is not None]
        shown = f"{statistics.median(ok):.1f} / {max(ok):.1f}" if ok else "-"
        if len(ok) < len(times):
            shown += f" ({len(times) - len(ok)} not recovered)"
        rows.append((kind, len(times), shown))
    return rows
