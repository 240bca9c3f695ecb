"""One soak from start to table: the fleet, the reference, the runs, the audit, the leak scan, the verdict."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from orchestrator.eval import read_eval_log

from . import _audit
from ._faults import schedule
from ._soak import Options, RunResult, Soak, recovery_table
from .task import sample_ids


def run(o: Options) -> bool:
    say = o.say
    say(f"[chaos] seed {o.seed}: {o.samples} samples, {o.workers} workers x {o.slots} slots, faults "
        f"{', '.join(o.kinds)} x{o.repeats}, batch kills {o.batch_kills}; load average {os.getloadavg()[0]:.1f}")
    soak = Soak(o)
    hosts: set[str] = set()
    try:
        soak.start()
        started = time.monotonic()
        reference = soak.reference()
        say(f"[chaos] embedded reference: {len(reference)} samples in {time.monotonic() - started:.0f} s")
        baseline = soak.soak("baseline", []) if o.baseline else None
        if baseline is not None:
            say(f"[chaos] baseline (no faults): {baseline.wall_s:.0f} s")
        plan = schedule(list(o.kinds), o.repeats, o.seed, last=o.last)
        say("[chaos] plan: " + ", ".join(f"{p.kind}@{p.at:.2f}+{p.delay:g}s" for p in plan))
        chaos = soak.soak("chaos", plan)
        batch = None
        if o.batch_kills:
            from ._batch import batch_phase

            batch = batch_phase(soak, reference)
        hosts = {w.host for w in soak.fleet.workers}
        assert chaos.log is not None
        audit = _audit.audit_samples(sample_ids(o.samples), {str(s.id): s for s in read_eval_log(chaos.log).samples},
                                     reference)
        eval_ids = chaos.eval_ids | soak.filler_eval_ids() | (baseline.eval_ids if baseline else set()) | \
            (batch.eval_ids if batch else set())
        leaks = soak.leaks(eval_ids)
    finally:
        soak.stop()
    leaks += [f"container {c} of worker {h}" for h in hosts for c in _owned(h)]
    return _table(o, chaos, baseline, audit, leaks, soak.unacked, batch)


def _owned(host: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=toolfleet.owner={host}"], check=False,
                          capture_output=True,
                          text=True, timeout=60)
    return done.stdout.split()


def _table(o: Options, chaos: RunResult, baseline: RunResult | None, audit: _audit.SampleAudit, leaks: list[str],
           unacked: int, batch: Any) -> bool:
    say = o.say
    lost = len(audit.lost) + (batch.lost if batch else 0)
    duplicated = audit.duplicated + (batch.duplicated if batch else 0)
    rows = recovery_table(chaos.faults)
    if batch is not None:
        rows.append(("batch-kill", batch.kills, f"{batch.recovery_s:.1f} (eval-retry to the end)"))
    injected = {kind for kind, n, _ in rows if n}
    rows += [(kind, 0, "not injected: the eval ended first") for kind in o.kinds if kind not in injected]
    unrecovered = [f for f in chaos.faults if f.recovery_s is None]
    say("")
    say(f"chaos soak, seed {o.seed}: {o.samples} samples on {o.workers} workers x {o.slots} slots (docker sandboxes)")
    say(f"  samples      {audit.completed} completed, {len(audit.failed)} failed with a recorded reason, "
        f"{len(audit.lost)} lost")
    say(f"  calls        {audit.calls} tool messages, each equal to the embedded run's")
    if audit.snapshots:
        say("  snapshots    " + ", ".join(f"{k}: {v}" for k, v in sorted(audit.snapshots.items())))
    say(f"  orchestrator {chaos.orchestrator_runs} process(es) (eval + eval-retry)")
    for line in chaos.unplanned:
        say(f"    ended on its own, then eval-retry: {line}")
    say(f"  {'fault':<20} {'injected':>8}  recovery s (median / max)")
    for kind, n, shown in rows:
        say(f"  {kind:<20} {n:>8}  {shown}")
    base = f"{baseline.wall_s:.0f} s" if baseline else "not run"
    say(f"  wall time    {chaos.wall_s:.0f} s with faults, {base} without")
    if batch is not None:
        say(f"  batch mode   {batch.samples} samples, {batch.kills} kill(s) between submit and log: "
            f"{batch.submissions} request submission(s) for {batch.requests} requests")
    say(f"  lost {lost}, duplicated {duplicated}, leaked {len(leaks)}  (kombu unacked entries awaiting redelivery: "
        f"{unacked})")
    for sid, why in list(audit.lost.items())[:20]:
        say(f"    lost {sid}: {why}")
    for sid, why in list(audit.failed.items())[:20]:
        say(f"    failed {sid}: {why}")
    for leak in leaks[:30]:
        say(f"    leaked: {leak}")
    ok = (not lost and not duplicated and not leaks and not unrecovered and injected >= set(o.kinds)
          and not chaos.unplanned)
    say(f"  verdict      {'PASS' if ok else 'FAIL'}")
    return ok
