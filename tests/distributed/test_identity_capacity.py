"""Worker identity and placement with real worker processes on one machine, through a real Redis.

- two workers started without ``--hostname`` get distinct identities and both serve samples;
- a second worker under an identity a live worker heartbeats with is refused at start (one line, exit 2);
- placement spreads the first samples over both workers by free capacity.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.eval import eval_async
from tests.eval.task_files import BASIC
from tests.support.fleet import REPO_ROOT, SECRET_ENV, WorkerProcess, ensure_fleet_secret
from workers.fleet import names

pytestmark = [pytest.mark.celery, pytest.mark.timeout(300)]

def _bash_hosts(log) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {str(s.id): e.host for s in log.samples for e in s.events if e.event == "tool" and e.function == "bash"}


async def test_two_workers_without_hostname_both_serve_samples(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    workers = [fleet.anonymous_worker(slots=2), fleet.anonymous_worker(slots=2)]
    assert workers[0].host != workers[1].host
    for w in workers:  # <machine>-<pid>-<random>
        assert w.host.startswith(f"{socket.gethostname()}-{w.pid}-"), w.host
    [log] = await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer", task_args={"n": 4},
                             broker=fleet.redis.url, log_dir=tmp_path, max_samples=4)
    assert log.status == "success", [s.error for s in log.samples]
    assert all(s.scores["includes"].value == "C" for s in log.samples)
    # Four sandboxes at once over 2 + 2 slots: both workers held some.
    assert set(_bash_hosts(log).values()) == {w.host for w in workers}


def test_duplicate_identity_is_refused_at_start(fleet) -> None:  # type: ignore[no-untyped-def]
    first = fleet.worker(slots=1)
    env = {**os.environ, SECRET_ENV: first.secret}
    done = subprocess.run([sys.executable, "-m", "workers.cli", "--broker", fleet.redis.url, "--hostname", first.host,
                           "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"another live worker already uses the identity {first.host!r}" in lines[0]
    assert first.alive()


def test_two_workers_started_at_once_under_one_name_one_is_refused(fleet) -> None:  # type: ignore[no-untyped-def]
    """The claim is atomic (SET NX): two workers racing for one --hostname never both run."""
    env = {**os.environ, SECRET_ENV: ensure_fleet_secret()}
    name = f"twin-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "workers.cli", "--broker", fleet.redis.url, "--hostname", name,
            "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3", "--slots", "1"]
    procs = [subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
             for _ in range(2)]
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        exited = [p for p in procs if p.poll() is not None]
        assert len(exited) == 1, "neither twin was refused within 90 s"
        [loser] = exited
        [winner] = [p for p in procs if p is not loser]
        stderr = loser.stderr.read() if loser.stderr else ""
        assert loser.returncode == 2 and f"already uses the identity {name!r}" in stderr, stderr[-2000:]
        # The winner goes on: it publishes two more heartbeats after the loser is gone (every 0.5 s).
        client = fleet.redis.client()
        beats = {client.hget(names.heartbeat_key(name), "ts")}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(beats - {None}) < 3 and winner.poll() is None:
            time.sleep(0.1)
            beats.add(client.hget(names.heartbeat_key(name), "ts"))
        assert winner.poll() is None, "the worker that won the claim stopped"
        assert len(beats - {None}) >= 3, "the worker that won the claim stopped heartbeating"
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_identity_of_a_dead_worker_is_free_once_its_heartbeat_lapses(fleet) -> None:  # type: ignore[no-untyped-def]
    """A crashed worker's record is not a live duplicate: a restart under its name waits out its TTL."""
    first = fleet.worker(slots=1)
    first.kill()
    again = WorkerProcess(fleet.redis.url, host=first.host, slots=1)
    fleet.workers.append(again)
    again.start(timeout=60)
    assert again.alive()


async def test_placement_spreads_the_first_samples_over_idle_workers(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    """A big worker and a small one: the second sample goes to the idle small one, not the big one."""
    big, small = fleet.worker(slots=8), fleet.worker(slots=2)
    [log] = await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer", task_args={"n": 2},
                             broker=fleet.redis.url, log_dir=tmp_path, max_samples=2)
    assert log.status == "success", [s.error for s in log.samples]
    assert set(_bash_hosts(log).values()) == {big.host, small.host}


@pytest.mark.docker
async def test_containers_per_worker_stay_within_slots_and_only_the_pool_stays(
        tmp_path: Path, fleet, sandbox_image: str) -> None:  # type: ignore[no-untyped-def]
    """Samples and warm spares together never exceed --slots; after the eval only --warm-pool spares stay."""
    from tests.benchmarks.swe import ContainerCounter

    slots = 2
    workers = [fleet.worker(slots=slots, extra_args=("--warm-pool", "1")) for _ in range(2)]
    counter = ContainerCounter([w.pid for w in workers], interval=0.1)
    async with counter.running():
        [log] = await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer",
                                 task_args={"n": 6, "sandbox": {"type": "docker", "image": sandbox_image}},
                                 broker=fleet.redis.url, log_dir=tmp_path, max_samples=6)
    assert log.status == "success", [s.error for s in log.samples]
    assert set(_bash_hosts(log).values()) == {w.host for w in workers}
    assert max(counter.peaks) >= 1 and all(peak <= slots for peak in counter.peaks), counter.peaks
    assert all(count <= 1 for count in await counter.counts())  # the default image's one spare at most
