"""``toolfleet bench configs``: a worker's resources after thousands of sandboxes of distinct configs.

A worker builds one driver per distinct sandbox config; a SWE-bench-sized run brings thousands (one image
or environment per sample). This opens ``sandboxes`` sandboxes, each of a config no other has (every
field that makes a new driver is varied in turn: environment, image, user, working directory, network,
limits, disk cap, read-only root, init, pool size, services, channel options, API threads, ttl...), runs
one command in each and closes it, ``concurrency`` at a time, through the real ``SandboxHost`` a worker's
runtime owns (``workers.sandbox_host``) on real Docker (or local sandboxes: ``--sandbox local``).

It reports this process's threads, open fds and RSS after ``warmup`` sandboxes (the start) and after
the last one closed (the end; the host still holds what it keeps idle), their peaks, the drivers and
Docker Engines the host holds at the end, ``open_close_per_s``, ``errors``, and the containers left once
the host is closed (0 expected). ``ok`` is false when threads, fds or RSS grew beyond the bounds
(``--max-threads``, ``--max-fds``, ``--max-rss-mb``) or a container is left.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from orchestrator._wire import SandboxSpec

SANDBOX_IMAGE = "toolfleet/sandbox:latest"
OTHER_IMAGE = "toolfleet/sandbox-rootfs:bookworm"  # built by `toolfleet setup` (the sandbox image's base)
SERVICE_IMAGE = "toolfleet/debian-base:bookworm"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")
    parser.add_argument("--sandboxes", type=int, default=2000, help="sandboxes, each of its own config")
    parser.add_argument("--concurrency", type=int, default=4, help="sandboxes open at once")
    parser.add_argument("--warmup", type=int, default=42, help="sandboxes (distinct configs) before the start figures")
    parser.add_argument("--max-threads", type=int, default=8, help="threads the end may exceed the start by")
    parser.add_argument("--max-fds", type=int, default=16, help="open fds the end may exceed the start by")
    parser.add_argument("--max-rss-mb", type=float, default=64.0, help="MiB of RSS the end may exceed the start by")


@dataclass
class Usage:
    """This process's threads, open fds and resident memory."""

    threads: int
    fds: int
    rss_mb: float

    @classmethod
    def now(cls) -> Usage:
        proc = psutil.Process()
        return cls(proc.num_threads(), proc.num_fds(), round(proc.memory_info().rss / 2**20, 1))


# Each variant changes fields that make a new driver (the key is the whole config); ``i`` makes it unique.
_DOCKER_VARIANTS: list[Callable[[int], dict[str, Any]]] = [
    lambda i: {"environment": {"SOAK": str(i)}},
    lambda i: {"image": OTHER_IMAGE, "environment": {"SOAK": str(i)}},
    lambda i: {"user": "root", "pids_limit": 256 + i % 251},
    lambda i: {"working_dir": "/tmp", "mem_limit": f"{256 + i % 509}m"},
    # A network of its own, its rules and DNS filter each time (the host must enforce egress: docs/egress.md).
    lambda i: {"network_mode": "public", "cpus": round(0.5 + (i % 97) / 100, 2)},
    lambda i: {"disk_limit": f"{512 + i % 499}m"},
    lambda i: {"disk_limit": None, "read_only": True, "ttl": 3600.0 + i},
    lambda i: {"init": False, "memswap_limit": f"{1100 + i % 503}m"},
    lambda i: {"pool_size": 1, "environment": {"SOAK": str(i)}},  # a warm spare is made, then given back
    lambda i: {"fast_path": False, "output_cap": 65536 + i},
    lambda i: {"direct_channel": False, "warm_spares": i % 3, "reap_interval": 30.0 + i % 31},
    lambda i: {"api_threads": 4 + 4 * (i % 3), "acquire_timeout": 60.0 + i},  # the shared pool widens to 12
    lambda i: {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "max_sandboxes": 32 + i % 997},
    lambda i: {"services": {"db": {"image": SERVICE_IMAGE, "command": ["sleep", "infinity"],
                                   "environment": {"SOAK": str(i)}}}},
]


def distinct_configs(kind: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` sandbox configs, no two alike, cycling through every kind of field that makes a new driver."""
    if kind == "local":
        # A local sandbox's fields: each value makes its own driver.
        return [{"type": "local", "output_cap": 65536 + i, "warm_spares": i % 3} for i in range(start, start + n)]
    out = []
    for i in range(start, start + n):
        fields = _DOCKER_VARIANTS[i % len(_DOCKER_VARIANTS)](i)
        fields.setdefault("environment", {})["SOAK_ID"] = str(i)  # unique even where a variant repeats
        out.append({"type": "docker", **fields})
    return out


def drivers_held(host: Any) -> int:
    """Drivers a ``SandboxHost`` holds (``drivers``; ``_drivers`` before it had a bounded cache)."""
    drivers = getattr(host, "drivers", None)
    return len(drivers if drivers is not None else getattr(host, "_drivers", {}))


async def soak(host: Any, configs: list[dict[str, Any]], concurrency: int,
               on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Open, use and close a sandbox of each config on ``host`` (a ``SandboxHost``), ``concurrency`` at a
    time; counts, errors (the first one's message) and peaks of threads and fds while it ran."""
    queue: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
    for item in enumerate(configs):
        queue.put_nowait(item)
    errors: list[str] = []
    peak = Usage.now()
    done = 0
    eval_id = f"bench-configs-{uuid.uuid4().hex[:8]}"

    async def one(i: int, config: dict[str, Any]) -> None:
        handle, _ = await host.open(SandboxSpec(eval_id=eval_id, sample_id=f"c{i}", config=config))
        try:
            result = await host.lookup(handle).exec(["true"], timeout=60)
            if result.returncode != 0:
                raise RuntimeError(f"`true` exited {result.returncode}: {result.stderr[-200:]}")
        finally:
            await host.close(handle)

    async def runner() -> None:
        nonlocal done, peak
        while not queue.empty():
            i, config = queue.get_nowait()
            try:
                await asyncio.wait_for(one(i, config), 300)
            except Exception as exc:  # noqa: BLE001 - counted and reported; the soak goes on
                errors.append(f"config {i}: {type(exc).__name__}: {exc}")
            done += 1
            if done % 25 == 0:
                now = Usage.now()
                peak = Usage(max(peak.threads, now.threads), max(peak.fds, now.fds), max(peak.rss_mb, now.rss_mb))
                if on_progress is not None:
                    on_progress(done)

    started = time.monotonic()
    await asyncio.gather(*(runner() for _ in range(max(1, concurrency))))
    wall = time.monotonic() - started
    return {"sandboxes": done, "errors": len(errors), "first_error": errors[0] if errors else None,
            "wall_s": round(wall, 1), "open_close_per_s": round(done / wall, 2) if wall else None,
            "peak": asdict(peak)}


def _containers_of(owner: str) -> int:
    import docker

    client = docker.from_env(timeout=60)
    try:
        return len(client.api.containers(all=True, filters={"label": f"toolfleet.owner={owner}"}))
    finally:
        client.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from workers.sandbox.docker import HostSandboxes
    from workers.sandbox_host import SandboxHost

    owner = f"bench-configs-{uuid.uuid4().hex[:8]}"  # its own label: no other process's reaper takes these
    host = SandboxHost(HostSandboxes(limit=max(8, args.concurrency * 4), owner=owner))
    progress = (lambda n: print(f"bench configs: {n} sandboxes", flush=True)) if not args.json else None
    try:
        warm = await soak(host, distinct_configs(args.sandbox, args.warmup, start=10**6), args.concurrency)
        start = Usage.now()
        result = await soak(host, distinct_configs(args.sandbox, args.sandboxes), args.concurrency, progress)
        end = Usage.now()
        held = drivers_held(host)
        engines = len(getattr(host.docker, "engines", ()))
    finally:
        await host.close_all()
    closed = Usage.now()
    left = await asyncio.to_thread(_containers_of, owner) if args.sandbox == "docker" else 0
    delta = {"threads": end.threads - start.threads, "fds": end.fds - start.fds,
             "rss_mb": round(end.rss_mb - start.rss_mb, 1)}
    within = (delta["threads"] <= args.max_threads and delta["fds"] <= args.max_fds
              and delta["rss_mb"] <= args.max_rss_mb)
    return {
        "workload": "configs", "sandbox": args.sandbox, "concurrency": args.concurrency,
        **result, "errors": result["errors"] + warm["errors"],
        "first_error": result["first_error"] or warm["first_error"],
        "distinct_configs": args.sandboxes + args.warmup,
        "start": asdict(start), "end": asdict(end), "delta": delta, "after_close_all": asdict(closed),
        "drivers_held_end": held, "engines_end": engines, "containers_left": left,
        "ok": within and left == 0,
    }
