"""``toolfleet bench fanout``: many concurrent samples, each running stages of parallel bash calls via Celery.

Starts its own redis-server and ``--workers`` ``toolfleet worker`` processes (or measures ``--broker``'s
running fleet), opens one sandbox per sample through the ``CeleryDispatcher`` (placement spreads them),
then every sample runs ``--stages`` turns of ``--stage`` parallel ``bash true`` calls through
``execute_tools`` (planner, dispatcher, splice — the whole orchestrator path), all samples at once: the
fleet measurement an installed toolfleet runs (``orchestrator/bench/_stages.py``).

- ``calls_per_s``: tool calls completed per second of wall time;
- ``p50_ms`` / ``p99_ms``: per-stage latency (a turn's whole parallel stage);
- ``loop_lag_p99_ms``: the orchestrator's event-loop lag during the run;
- ``orchestrator_cpu_ms_per_call`` / ``worker_cpu_ms_per_call``: CPU time of this process and of the
  worker processes per call during the run (steadier than calls/s on a shared machine; the workers'
  is null with ``--broker``);
- ``redis_commands_per_call`` / ``redis_bytes_in_per_call`` / ``redis_bytes_out_per_call``: what Redis
  ran and moved per call meanwhile (INFO commandstats and stats deltas, heartbeats included);
- ``calls_per_message``: calls per ``toolfleet.stage`` message (stages of several samples dispatched
  together share one message per worker queue);
- ``embedded``: the same samples x stages through the in-process dispatcher (embedded mode) over
  sandboxes of the same kind, in the same run; ``vs_embedded`` = Celery calls/s / embedded calls/s.
  The two alternate ``--rounds`` times (each round: every sample's ``--stages`` stages), both sets
  of sandboxes open throughout, and each figure pools its rounds: on a shared machine a phase's
  calls/s drifts by 20 % within a minute, which two phases run one after the other would read as
  a difference between the modes (``vs_embedded_by_round`` shows the spread);
- ``baseline``: the same calls as ``docker exec`` through the Engine API (exec_create + start +
  inspect), same number of sandboxes and calls in flight, same run (docker sandboxes only).

Targets: >= 300 calls/s on 2 cores, and >= 15x the docker-exec baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.bench._connect import fleet_dispatcher, open_sandboxes
from orchestrator.bench._stages import FleetRounds, add_measure_arguments, phase, pooled, sandbox_config
from orchestrator.dispatch import SampleRoute

from ._broker import add_broker_argument, fleet_or_broker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_measure_arguments(parser)
    add_broker_argument(parser)
    parser.add_argument("--workers", type=int, default=1, help="worker processes (hosts)")
    parser.add_argument("--concurrency", type=int, default=128, help="pool threads per worker")
    parser.add_argument("--task-events", action="store_true",
                        help="workers send Celery task events (as when Flower watches the fleet)")
    parser.add_argument("--baseline-stages", type=int, default=1, help="turns per sample for the docker-exec baseline")
    parser.add_argument("--no-embedded", dest="embedded", action="store_false",
                        help="skip the embedded baseline (same samples x stages through the in-process dispatcher)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch.inprocess import InProcessDispatcher

    slots = -(-args.samples // args.workers) + 4
    config = sandbox_config(args.sandbox, args.samples)
    workers = {"workers": args.workers, "concurrency": args.concurrency, "slots": slots,
               "extra_args": ("--task-events",) if args.task_events else ()}
    async with fleet_or_broker(args.broker, **workers) as (url, fleet):
        dispatcher = await fleet_dispatcher(url)
        local = InProcessDispatcher()
        routes, open_s = await open_sandboxes(dispatcher, args.samples, config, "bench", "fan")
        local_routes = ((await open_sandboxes(local, args.samples, config, "bench-embedded", "emb"))[0]
                        if args.embedded else [])
        rounds = FleetRounds(dispatcher, routes, url, args.stages, args.stage)
        embedded_rounds: list[dict[str, Any]] = []
        cpu_workers = 0.0
        try:
            # Celery and embedded phases alternate, both sets of sandboxes open throughout: on a shared
            # machine calls/s drifts by 20 % within a minute, which two phases run one after the other
            # would read as a difference between the modes.
            for _ in range(max(1, args.rounds)):
                workers_before = fleet.worker_cpu_seconds() if fleet else 0.0
                await rounds.round()
                cpu_workers += fleet.worker_cpu_seconds() - workers_before if fleet else 0.0
                if args.embedded:
                    embedded_rounds.append(await phase(local_routes, local, args.stages, args.stage))
        finally:
            await asyncio.gather(*(local.close_sandbox(r) for r in local_routes))
            await local.aclose()
        baseline = None
        if args.sandbox == "docker":
            baseline = await _docker_exec_baseline(fleet, routes, args)
        await asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes))
        await dispatcher.aclose()
    celery = rounds.figures()
    embedded = None
    if embedded_rounds:
        pooled_embedded = pooled(embedded_rounds)
        cpu = pooled_embedded.pop("orchestrator_cpu_s")
        embedded = {"workload": "fanout", "implementation": "embedded (in-process dispatcher)", **pooled_embedded,
                    "cpu_ms_per_call": round(cpu / pooled_embedded["calls"] * 1000, 3)}
    calls = celery["calls"]
    out: dict[str, Any] = {
        "workload": "fanout",
        "sandbox": args.sandbox,
        "task_events": args.task_events,
        "samples": args.samples,
        "stages": args.stages,
        "stage": args.stage,
        "workers": args.workers,
        "rounds": len(rounds.rounds),
        **celery,
        "worker_cpu_ms_per_call": round(cpu_workers / calls * 1000, 3) if fleet else None,
        "open_sandboxes_s": round(open_s, 2),
        "embedded": embedded,
        "baseline": baseline,
    }
    if embedded and embedded["calls_per_s"]:
        out["vs_embedded"] = round(celery["calls_per_s"] / embedded["calls_per_s"], 2)
        # Same calls in both: Celery calls/s over embedded calls/s is embedded wall time over Celery's.
        out["vs_embedded_by_round"] = [round(e["wall_s"] / c["wall_s"], 2)
                                       for c, e in zip(rounds.rounds, embedded_rounds, strict=True)]
    if baseline:
        out["speedup"] = round(celery["calls_per_s"] / baseline["calls_per_s"], 1) if baseline["calls_per_s"] else None
    return out


async def _docker_exec_baseline(fleet: Any, routes: list[SampleRoute], args: argparse.Namespace) -> dict[str, Any]:
    """The same stages as one ``docker exec`` per call (Engine API), same concurrency, on the same containers."""
    import docker

    from workers.sandbox.docker import labels

    client = docker.APIClient(version="auto", timeout=120, max_pool_size=args.samples * args.stage)
    pool = ThreadPoolExecutor(max_workers=args.samples * args.stage, thread_name_prefix="bench-docker-exec")
    loop = asyncio.get_running_loop()
    try:
        found = await loop.run_in_executor(pool,
                                           lambda: client.containers(filters={"label": f"{labels.EVAL_ID}=bench"}))
        containers = [c["Id"] for c in found][: len(routes)]
        if not containers:
            return {"workload": "fanout", "implementation": "docker exec (Engine API)", "calls_per_s": 0.0,
                    "note": "no bench containers found"}

        def one(container: str) -> None:
            exec_id = client.exec_create(container, ["bash", "--login", "-c", "true"])["Id"]
            client.exec_start(exec_id)
            if client.exec_inspect(exec_id)["ExitCode"] != 0:
                raise RuntimeError("baseline docker exec failed")

        async def sample(container: str) -> None:
            for _ in range(args.baseline_stages):
                await asyncio.gather(*(loop.run_in_executor(pool, one, container) for _ in range(args.stage)))

        start = time.perf_counter()
        await asyncio.gather(*(sample(c) for c in containers))
        wall = time.perf_counter() - start
        calls = len(containers) * args.baseline_stages * args.stage
        return {"workload": "fanout", "implementation": "docker exec (Engine API)", "calls": calls,
                "calls_per_s": round(calls / wall, 1)}
    finally:
        pool.shutdown(wait=False)
        client.close()
