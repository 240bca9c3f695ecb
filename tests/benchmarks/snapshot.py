"""``toolfleet bench snapshot``: how long taking a sandbox snapshot and forking sandboxes from it take.

In this process (embedded mode), or through the workers of ``--broker``, on one docker sandbox holding ``mib`` MiB on a
tmpfs-backed path and as much in its container layer:
- ``snapshot_s``: ``await sandbox.snapshot()`` — the first of a sandbox (one commit) and, as
  ``resnapshot_s``, a second one of the same sandbox (two commits: see ``workers.sandbox.docker._snapshot``);
- ``fork_first_s``: ``fork(snapshot, forks)`` until all are ready, the first time (the snapshot's driver
  starts: it reads the snapshot's tmpfs contents once), and ``fork_again_s`` a second time;
- ``fork_close_s``: closing them; ``size_mib``: what the snapshot counts against the host's budget;
- ``cold_open_s``: for comparison, opening as many fresh sandboxes of the base image at once (no pool).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import InProcessDispatcher, reset_active_dispatcher, set_active_dispatcher


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--forks", type=int, default=4, help="sandboxes opened from the snapshot at once")
    parser.add_argument("--mib", type=int, default=8, help="MiB written on a tmpfs path and in the layer each")
    parser.add_argument("--image", default=None, help="sandbox image (default: the sandbox image)")
    parser.add_argument("--broker", default=None, help="run through the workers of this Redis (default: embedded)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch import CeleryDispatcher, reset_route, set_route
    from orchestrator.eval._fork import _sandbox_for, fork as open_forks
    from orchestrator.util import fork
    from orchestrator.util._fork import bind_fork_opener

    eval_id = f"bench-snapshot-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {"type": "docker", "pool_size": 0, **({"image": args.image} if args.image else {})}
    dispatcher = CeleryDispatcher(args.broker) if args.broker else InProcessDispatcher()
    token = set_active_dispatcher(dispatcher)
    bind_fork_opener(open_forks)  # this task's own context, as a sample's runner binds it
    route = await dispatcher.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id="bench", config=config))
    route_token = set_route(route)
    timings: dict[str, float] = {}
    try:
        env = _sandbox_for(dispatcher, route)
        fill = (f"head -c {args.mib << 20} /dev/urandom > /tmp/data && "
                f"head -c {args.mib << 20} /dev/urandom > /opt/data")
        done = await env.exec(["sh", "-c", fill], user="root", timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"could not fill the sandbox: {done.stderr}")
        t0 = time.monotonic()
        snap = await env.snapshot()
        timings["snapshot_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        await env.snapshot()
        timings["resnapshot_s"] = time.monotonic() - t0
        for key in ("fork_first_s", "fork_again_s"):
            t0 = time.monotonic()
            async with fork(snap, args.forks) as boxes:
                timings[key] = time.monotonic() - t0
                for box in boxes:
                    check = await box.exec(["sh", "-c", "test -s /tmp/data && test -s /opt/data"])
                    if check.returncode != 0:
                        raise RuntimeError("a fork lacks the snapshot's files")
                t0 = time.monotonic()
            timings["fork_close_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        fresh = await asyncio.gather(*(dispatcher.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id=f"cold{i}",
                                                                           config=config))
                                       for i in range(args.forks)))
        timings["cold_open_s"] = time.monotonic() - t0
        await asyncio.gather(*(dispatcher.close_sandbox(r) for r in fresh))
    finally:
        reset_route(route_token)
        await dispatcher.close_sandbox(route)
        await dispatcher.remove_snapshots(eval_id)
        reset_active_dispatcher(token)
        await dispatcher.aclose()
    return {"mode": "workers" if args.broker else "embedded", "forks": args.forks, "mib": args.mib,
            "size_mib": round(snap.size / (1 << 20), 1), **{k: round(v, 3) for k, v in timings.items()}}
