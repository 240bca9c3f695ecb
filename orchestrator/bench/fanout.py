"""``toolfleet bench fanout``: many concurrent samples, each running stages of parallel bash calls via Celery.

Starts its own redis-server and ``--workers`` ``toolfleet worker`` processes, opens one sandbox per
sample through the ``CeleryDispatcher`` (placement spreads them), then every sample runs ``--stages``
turns of ``--stage`` parallel ``bash true`` calls through ``execute_tools`` (planner, dispatcher,
splice — the whole orchestrator path), all samples at once.

- ``calls_per_s``: tool calls completed per second of wall time;
- ``p50_ms`` / ``p99_ms``: per-stage latency (a turn's whole parallel stage);
- ``loop_lag_p99_ms``: the orchestrator's event-loop lag during the run;
- ``orchestrator_cpu_ms_per_call`` / ``worker_cpu_ms_per_call``: CPU time of this process and of the
  worker processes per call during the run (steadier than calls/s on a shared machine);
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

Targets (issue 4): >= 300 calls/s on 2 cores, and >= 15x the docker-exec baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import SampleRoute, reset_active_dispatcher, reset_route, set_active_dispatcher, set_route

from ._fleet import BenchFleet, LoopLag, percentile_ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=64, help="concurrent samples (one sandbox each)")
    parser.add_argument("--stages", type=int, default=10, help="turns per sample")
    parser.add_argument("--stage", type=int, default=4, help="parallel bash calls per turn")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (hosts)")
    parser.add_argument("--concurrency", type=int, default=128, help="pool threads per worker")
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")
    parser.add_argument("--task-events", action="store_true",
                        help="workers send Celery task events (as when Flower watches the fleet)")
    parser.add_argument("--baseline-stages", type=int, default=1, help="turns per sample for the docker-exec baseline")
    parser.add_argument("--rounds", type=int, default=3, help="Celery and embedded phases alternate this many times")
    parser.add_argument("--no-embedded", dest="embedded", action="store_false",
                        help="skip the embedded baseline (same samples x stages through the in-process dispatcher)")


def _sandbox_config(kind: str, samples: int) -> dict[str, Any]:
    if kind == "docker":
        return {"type": "docker", "pool_size": 0, "max_sandboxes": samples + 8}
    return {"type": "local"}


async def _phase(routes: list[SampleRoute], dispatcher: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every sample's ``--stages`` stages of ``--stage`` bash calls through ``execute_tools``, all samples at once."""
    from orchestrator.model import ChatMessageAssistant, ChatMessageUser, execute_tools
    from orchestrator.tool import ToolCall, bash

    tools = [bash()]
    stage_latencies: list[float] = []
    failures: list[str] = []

    async def sample(route: SampleRoute, stages: int) -> None:
        token = set_route(route)
        try:
            for turn in range(stages):
                calls = [ToolCall(id=f"t{turn}c{i}", function="bash", arguments={"cmd": "true"}) for i in range(args.stage)]
                messages = [ChatMessageUser(content="go"), ChatMessageAssistant(content="", tool_calls=calls)]
                start = time.perf_counter()
                result = await execute_tools(messages, tools)
                stage_latencies.append(time.perf_counter() - start)
                failures.extend(m.error.message for m in result.messages if m.error is not None)  # type: ignore[attr-defined]
        finally:
            reset_route(token)

    lag = LoopLag()
    active = set_active_dispatcher(dispatcher)
    try:
        await sample(routes[0], 1)  # warm the path
        stage_latencies.clear()
        lag.start()
        cpu = time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(sample(r, args.stages) for r in routes))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        lag_p99 = await lag.stop()
    finally:
        reset_active_dispatcher(active)
    return {"calls": len(routes) * args.stages * args.stage, "wall_s": wall, "latencies": stage_latencies,
            "loop_lag_p99_ms": lag_p99, "orchestrator_cpu_s": cpu, "failures": failures}


def _pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of ``_phase`` as one: calls over wall time, percentiles over every stage, the
    worst loop lag, CPU summed."""
    calls, wall = sum(r["calls"] for r in rounds), sum(r["wall_s"] for r in rounds)
    latencies = [t for r in rounds for t in r["latencies"]]
    failures = [f for r in rounds for f in r["failures"]]
    out: dict[str, Any] = {"calls": calls, "calls_per_s": round(calls / wall, 1), "wall_s": round(wall, 3),
                           "p50_ms": percentile_ms(latencies, 0.5), "p99_ms": percentile_ms(latencies, 0.99),
                           "loop_lag_p99_ms": max(r["loop_lag_p99_ms"] for r in rounds),
                           "orchestrator_cpu_s": sum(r["orchestrator_cpu_s"] for r in rounds), "errors": len(failures)}
    if failures:
        out["first_error"] = failures[0]
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch.celery import CeleryDispatcher, CeleryDispatcherConfig
    from orchestrator.dispatch.inprocess import InProcessDispatcher

    slots = -(-args.samples // args.workers) + 4
    config = _sandbox_config(args.sandbox, args.samples)
    async with BenchFleet(workers=args.workers, concurrency=args.concurrency, slots=slots, task_events=args.task_events) as fleet:
        dispatcher = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.url))
        local = InProcessDispatcher()
        opening = time.perf_counter()
        routes: list[SampleRoute] = list(await asyncio.gather(*(
            dispatcher.open_sandbox(SandboxSpec(eval_id="bench", sample_id=f"fan-{i}", config=config))
            for i in range(args.samples))))
        open_s = time.perf_counter() - opening
        local_routes: list[SampleRoute] = list(await asyncio.gather(*(
            local.open_sandbox(SandboxSpec(eval_id="bench-embedded", sample_id=f"emb-{i}", config=config))
            for i in range(args.samples)))) if args.embedded else []
        celery_rounds: list[dict[str, Any]] = []
        embedded_rounds: list[dict[str, Any]] = []
        batches: list[tuple[int, int]] = []
        cpu_workers, redis = 0.0, None
        try:
            for _ in range(max(1, args.rounds)):
                workers_before, redis_before = fleet.worker_cpu_seconds(), fleet.redis_counters()
                published = len(dispatcher.published)
                celery_rounds.append(await _phase(routes, dispatcher, args))
                batches += list(dispatcher.published)[published:]
                cpu_workers += fleet.worker_cpu_seconds() - workers_before
                delta = fleet.redis_counters().minus(redis_before)
                redis = delta if redis is None else redis.plus(delta)
                if args.embedded:
                    embedded_rounds.append(await _phase(local_routes, local, args))
        finally:
            await asyncio.gather(*(local.close_sandbox(r) for r in local_routes))
            await local.aclose()
        baseline = None
        if args.sandbox == "docker":
            baseline = await _docker_exec_baseline(fleet, routes, args)
        await asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes))
        await dispatcher.aclose()
    assert redis is not None
    celery = _pooled(celery_rounds)
    embedded = None
    if embedded_rounds:
        pooled = _pooled(embedded_rounds)
        cpu = pooled.pop("orchestrator_cpu_s")
        embedded = {"workload": "fanout", "implementation": "embedded (in-process dispatcher)", **pooled,
                    "cpu_ms_per_call": round(cpu / pooled["calls"] * 1000, 3)}
    calls = celery["calls"]
    out: dict[str, Any] = {
        "workload": "fanout",
        "sandbox": args.sandbox,
        "task_events": args.task_events,
        "samples": args.samples,
        "stages": args.stages,
        "stage": args.stage,
        "workers": args.workers,
        "rounds": len(celery_rounds),
        **{k: v for k, v in celery.items() if k != "orchestrator_cpu_s"},
        # CPU per call, less noisy than calls/s on a shared machine (sandboxes' own CPU not included).
        "orchestrator_cpu_ms_per_call": round(celery["orchestrator_cpu_s"] / calls * 1000, 3),
        "worker_cpu_ms_per_call": round(cpu_workers / calls * 1000, 3),
        # Every command Redis ran meanwhile (INFO commandstats), heartbeats and the INFO itself included.
        "redis_commands_per_call": round(redis.commands / calls, 2),
        "redis_bytes_in_per_call": round(redis.bytes_in / calls),
        "redis_bytes_out_per_call": round(redis.bytes_out / calls),
        "redis_cpu_ms_per_call": round(redis.cpu_s / calls * 1000, 4),
        "redis_commands_by_type_per_call": redis.per(calls),
        # Stages dispatched in one loop tick (or while a publish was in flight) share a message per queue.
        "calls_per_message": round(sum(c for _, c in batches) / max(1, sum(m for m, _ in batches)), 2),
        "open_sandboxes_s": round(open_s, 2),
        "embedded": embedded,
        "baseline": baseline,
    }
    if embedded and embedded["calls_per_s"]:
        out["vs_embedded"] = round(celery["calls_per_s"] / embedded["calls_per_s"], 2)
        # Same calls in both: Celery calls/s over embedded calls/s is embedded wall time over Celery's.
        out["vs_embedded_by_round"] = [round(e["wall_s"] / c["wall_s"], 2) for c, e in zip(celery_rounds, embedded_rounds)]
    if baseline:
        out["speedup"] = round(celery["calls_per_s"] / baseline["calls_per_s"], 1) if baseline["calls_per_s"] else None
    return out


async def _docker_exec_baseline(fleet: BenchFleet, routes: list[SampleRoute], args: argparse.Namespace) -> dict[str, Any]:
    """The same stages as one ``docker exec`` per call (Engine API), same concurrency, on the same containers."""
    import docker

    from workers.sandbox.docker import labels

    client = docker.APIClient(version="auto", timeout=120, max_pool_size=args.samples * args.stage)
    pool = ThreadPoolExecutor(max_workers=args.samples * args.stage, thread_name_prefix="bench-docker-exec")
    loop = asyncio.get_running_loop()
    try:
        found = await loop.run_in_executor(pool, lambda: client.containers(filters={"label": f"{labels.EVAL_ID}=bench"}))
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
