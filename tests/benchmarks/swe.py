"""examples/swe_mini.py on a fleet: N samples over K distinct per-sample images, 2 workers through Redis.

The bench starts its own redis-server and ``--workers`` worker processes on this machine (as shipped:
password, fleet secret), builds the example's images if any is missing (``build_images.sh``), runs the
example with ``-T copies=N/K`` and ``names=`` the first K repositories, and while it runs polls
``docker ps`` for the fleet's containers (label ``toolfleet.owner_pid``: the worker process that made
each), so it reports the peak number of containers each worker held at once. Container starts are
counted from the Engine's event stream, read live during the run, so short-lived containers between
two polls are not missed.

The sixth repository, ``api``, is a multi-service sample (its client and a price service: two
containers), so with every image ``containers_needed`` (one per sample plus one per ``api`` sample)
exceeds ``samples``: ``container_starts`` equal to it means nothing was started twice or pooled.

JSON: ``{"workload": "swe", "policy", "images", "samples", "workers", "slots", "correct", "errors",
"wall_s", "samples_per_s", "container_starts", "containers_needed", "container_starts_per_worker": [..],
"peak_containers_per_worker": [..], "containers_left": [..], "poll_interval_s", "polls"}``
(per-worker lists in worker start order).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import psutil

from tests.support.fleet import REPO_ROOT, Fleet, running_fleet

EXAMPLE = REPO_ROOT / "examples" / "swe_mini.py"
BUILD_SCRIPT = EXAMPLE.parent / "swe_mini" / "build_images.sh"
NAMES = ("calc", "clamp", "leap", "slug", "stack", "api")  # "api": two containers per sample (a service)
SERVICE_IMAGES = {"api": "toolfleet/swe-mini-api-server:latest"}
OWNER_PID_LABEL = "toolfleet.owner_pid"
DOCKER_TIMEOUT_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=20, help="samples in all (a multiple of --images)")
    parser.add_argument("--images", type=int, default=len(NAMES), help=f"distinct images, 1..{len(NAMES)}")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=3, help="each worker's --slots")
    parser.add_argument("--policy", default="fixer", help="scripted policy: fixer or noop")
    parser.add_argument("--poll-interval", type=float, default=0.2, help="seconds between docker ps polls")


async def _docker(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec("docker", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), DOCKER_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"docker {args[0]} failed: {err.decode(errors='replace').strip()}")
    return out.decode()


def _process_trees(pids: Iterable[int]) -> list[set[int]]:
    """Each worker's pid with its descendants (whichever of them creates the containers)."""
    trees = []
    for pid in pids:
        try:
            trees.append({pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))})
        except psutil.NoSuchProcess:
            trees.append({pid})
    return trees


class ContainerCounter:
    """Counts the toolfleet containers each worker holds (running or not), by polling ``docker ps``."""

    def __init__(self, worker_pids: list[int], interval: float = 0.2) -> None:
        self.worker_pids = worker_pids
        self.interval = interval
        self.peaks = [0] * len(worker_pids)
        self.polls = 0

    async def counts(self) -> list[int]:
        out = await _docker("ps", "-a", "--filter", "label=toolfleet.managed=1",
                            "--format", '{{.Label "' + OWNER_PID_LABEL + '"}}')
        trees = _process_trees(self.worker_pids)
        counts = [0] * len(trees)
        for line in out.split():
            for i, tree in enumerate(trees):
                if line.isdigit() and int(line) in tree:
                    counts[i] += 1
        return counts

    async def poll(self) -> None:
        while True:
            for i, n in enumerate(await self.counts()):
                self.peaks[i] = max(self.peaks[i], n)
            self.polls += 1
            await asyncio.sleep(self.interval)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ContainerCounter]:
        task = asyncio.create_task(self.poll())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class StartCounter:
    """Container starts, read live from ``docker events`` (the Engine replays only its last few hundred
    events, so asking afterwards with ``--since`` loses starts on a busy host). Attributed to workers
    by the ``toolfleet.owner_pid`` label when the stream ends."""

    def __init__(self) -> None:
        self.owner_pids: list[int] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> StartCounter:
        self._proc = await asyncio.create_subprocess_exec(
            "docker", "events", "--filter", "type=container", "--filter", "event=start",
            "--filter", "label=toolfleet.managed=1",
            "--format", '{{index .Actor.Attributes "' + OWNER_PID_LABEL + '"}}',
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        self._reader = asyncio.create_task(self._read())
        await asyncio.sleep(0.5)  # the stream is open before the first sample starts
        return self

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for line in self._proc.stdout:
            text = line.decode().strip()
            if text.isdigit():
                self.owner_pids.append(int(text))

    async def __aexit__(self, *exc: object) -> None:
        assert self._proc is not None and self._reader is not None
        await asyncio.sleep(0.5)  # the last start events reach the stream
        self._proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reader, 10)
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            await asyncio.wait_for(self._proc.wait(), 10)

    def starts(self, worker_pids: list[int]) -> list[int]:
        trees = _process_trees(worker_pids)
        return [sum(1 for pid in self.owner_pids if pid in tree) for tree in trees]


async def missing_images(names: Iterable[str]) -> list[str]:
    missing = []
    for name in names:
        for image in (f"toolfleet/swe-mini-{name}:latest", SERVICE_IMAGES.get(name)):
            try:
                if image is not None:
                    await _docker("image", "inspect", "--format", "{{.Id}}", image)
            except RuntimeError:
                missing.append(name)
                break
    return missing


async def build_images(names: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec("sh", str(BUILD_SCRIPT), *names, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 1800)
    if proc.returncode != 0:
        raise RuntimeError(f"building the swe_mini images failed: {err.decode(errors='replace')[-1000:]}")


def _worker_pids(fleet: Fleet) -> list[int]:
    return [w.pid for w in fleet.workers]  # worker start order


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.eval import eval_async

    if not 1 <= args.images <= len(NAMES):
        raise SystemExit(f"--images must be 1..{len(NAMES)}")
    names = list(NAMES[: args.images])
    copies = max(1, args.samples // len(names))
    missing = await missing_images(names)
    if missing:
        await build_images(missing)
    # Workers without --hostname, as a user starts several on one machine: each takes its own identity.
    async with running_fleet(workers=args.workers, concurrency=16, slots=args.slots, named=False) as fleet:
        pids = _worker_pids(fleet)
        counter = ContainerCounter(pids, args.poll_interval)
        with tempfile.TemporaryDirectory(prefix="toolfleet-bench-swe-") as log_dir:
            start = time.perf_counter()
            async with StartCounter() as starts, counter.running():
                [log] = await eval_async(str(EXAMPLE), f"scripted/{args.policy}", broker=fleet.url, log_dir=log_dir,
                                         task_args={"copies": copies, "names": ",".join(names)}, display="none",
                                         max_samples=args.workers * args.slots, resume=False)
            wall = time.perf_counter() - start
        left = await counter.counts()
        started = starts.starts(pids)
        hosts = list(fleet.hosts)
    total = len(log.samples)
    errors = [s for s in log.samples if s.error is not None]
    correct = sum(1 for s in log.samples if s.error is None and s.scores["tests_pass"].value == "C")
    containers_per_run = sum(1 + (s.metadata.get("repo") in SERVICE_IMAGES) for s in log.samples)
    return {"workload": "swe", "policy": args.policy, "images": len(names), "samples": total,
            "workers": args.workers, "worker_hosts": hosts, "slots": args.slots, "correct": correct,
            "errors": len(errors),
            **({"first_error": f"{errors[0].id}: {getattr(errors[0].error, 'message', '')}"} if errors else {}),
            "wall_s": round(wall, 3), "samples_per_s": round(total / wall, 3) if wall > 0 else None,
            "container_starts": sum(started), "container_starts_per_worker": started,
            "containers_needed": containers_per_run,
            "peak_containers_per_worker": counter.peaks, "containers_left": left,
            "poll_interval_s": args.poll_interval, "polls": counter.polls}
