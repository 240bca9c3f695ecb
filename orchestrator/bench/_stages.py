"""``toolfleet bench fanout --broker URL``: many samples at once, each running stages of parallel bash calls, on a
running fleet.

Opens ``--samples`` sandboxes on the fleet through the ``CeleryDispatcher`` (placement spreads them),
then every sample runs ``--stages`` turns of ``--stage`` parallel ``bash true`` calls through
``execute_tools`` (planner, dispatcher, splice — the whole orchestrator path), all samples at once,
``--rounds`` times; each figure pools the rounds:

- ``calls_per_s``: tool calls completed per second of wall time;
- ``p50_ms`` / ``p99_ms``: per-stage latency (a turn's whole parallel stage);
- ``loop_lag_p99_ms``: this process's event-loop lag during the run;
- ``orchestrator_cpu_ms_per_call``: this process's CPU time per call;
- ``redis_commands_per_call`` / ``redis_bytes_in_per_call`` / ``redis_bytes_out_per_call`` /
  ``redis_cpu_ms_per_call``: what the broker ran and moved per call meanwhile (its INFO deltas,
  heartbeats and anything else on that Redis included; None where INFO is refused);
- ``calls_per_message``: calls per ``toolfleet.stage`` message (stages of several samples dispatched
  together share one message per worker queue).

Nothing is started here (a checkout's ``toolfleet bench fanout`` starts its own fleet and runs these
same rounds on it, alternating with an embedded baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from orchestrator.dispatch import SampleRoute, reset_active_dispatcher, reset_route, set_active_dispatcher, set_route

from ._connect import add_broker_argument, fleet_dispatcher, open_sandboxes
from ._redis_info import RedisCounters, redis_counters
from ._timing import LoopLag, percentile_ms


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=64, help="concurrent samples (one sandbox each)")
    parser.add_argument("--stages", type=int, default=10, help="turns per sample")
    parser.add_argument("--stage", type=int, default=4, help="parallel bash calls per turn")
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every sample's stages")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_broker_argument(parser)
    add_measure_arguments(parser)


def sandbox_config(kind: str, samples: int) -> dict[str, Any]:
    """Docker sandboxes with no warm pool (each is opened, as a sample's is), room for all of them."""
    if kind == "docker":
        return {"type": "docker", "pool_size": 0, "max_sandboxes": samples + 8}
    return {"type": "local"}


async def phase(routes: list[SampleRoute], dispatcher: Any, stages: int, stage: int) -> dict[str, Any]:
    """Every sample's ``stages`` stages of ``stage`` bash calls through ``execute_tools``, all samples at once."""
    from orchestrator.model import ChatMessage, ChatMessageAssistant, ChatMessageTool, ChatMessageUser, execute_tools
    from orchestrator.tool import ToolCall, bash

    tools = [bash()]
    stage_latencies: list[float] = []
    failures: list[str] = []

    async def sample(route: SampleRoute, turns: int) -> None:
        token = set_route(route)
        try:
            for turn in range(turns):
                calls = [ToolCall(id=f"t{turn}c{i}", function="bash", arguments={"cmd": "true"}) for i in range(stage)]
                messages: list[ChatMessage] = [ChatMessageUser(content="go"),
                                               ChatMessageAssistant(content="", tool_calls=calls)]
                start = time.perf_counter()
                result = await execute_tools(messages, tools)
                stage_latencies.append(time.perf_counter() - start)
                failures.extend(m.error.message for m in result.messages
                                if isinstance(m, ChatMessageTool) and m.error is not None)
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
        await asyncio.gather(*(sample(r, stages) for r in routes))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        lag_p99 = await lag.stop()
    finally:
        reset_active_dispatcher(active)
    return {"calls": len(routes) * stages * stage, "wall_s": wall, "latencies": stage_latencies,
            "loop_lag_p99_ms": lag_p99, "orchestrator_cpu_s": cpu, "failures": failures}


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of ``phase`` as one: calls over wall time, percentiles over every stage, the
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


class FleetRounds:
    """Rounds of ``phase`` through a fleet's dispatcher, with what its Redis ran (INFO deltas) and the
    stage messages published during each round only."""

    def __init__(self, dispatcher: Any, routes: list[SampleRoute], broker: str, stages: int, stage: int) -> None:
        self.dispatcher, self.routes, self.broker = dispatcher, routes, broker
        self.stages, self.stage = stages, stage
        self.rounds: list[dict[str, Any]] = []
        self.redis: RedisCounters | None = None
        self.batches: list[tuple[int, int]] = []  # (messages, calls) per publish
        self._info_refused = False

    async def round(self) -> dict[str, Any]:
        before = await redis_counters(self.broker)
        published = len(self.dispatcher.published)
        result = await phase(self.routes, self.dispatcher, self.stages, self.stage)
        self.batches += list(self.dispatcher.published)[published:]
        after = await redis_counters(self.broker)
        if before is None or after is None:
            self._info_refused = True
        else:
            delta = after.minus(before)
            self.redis = delta if self.redis is None else self.redis.plus(delta)
        self.rounds.append(result)
        return result

    def figures(self) -> dict[str, Any]:
        fleet = pooled(self.rounds)
        calls = fleet["calls"]
        redis = None if self._info_refused else self.redis
        return {
            **{k: v for k, v in fleet.items() if k != "orchestrator_cpu_s"},
            # CPU per call, less noisy than calls/s on a shared machine (sandboxes' own CPU not included).
            "orchestrator_cpu_ms_per_call": round(fleet["orchestrator_cpu_s"] / calls * 1000, 3),
            # Every command Redis ran meanwhile (INFO commandstats), heartbeats and the INFO itself included.
            "redis_commands_per_call": round(redis.commands / calls, 2) if redis else None,
            "redis_bytes_in_per_call": round(redis.bytes_in / calls) if redis else None,
            "redis_bytes_out_per_call": round(redis.bytes_out / calls) if redis else None,
            "redis_cpu_ms_per_call": round(redis.cpu_s / calls * 1000, 4) if redis else None,
            "redis_commands_by_type_per_call": redis.per(calls) if redis else None,
            # Stages dispatched in one loop tick (or while a publish was in flight) share a message per queue.
            "calls_per_message": round(sum(c for _, c in self.batches) / max(1, sum(m for m, _ in self.batches)), 2),
        }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch._preflight import redact

    dispatcher = await fleet_dispatcher(args.broker)
    try:
        routes, open_s = await open_sandboxes(dispatcher, args.samples, sandbox_config(args.sandbox, args.samples),
                                              "bench", "fan")
        try:
            rounds = FleetRounds(dispatcher, routes, args.broker, args.stages, args.stage)
            for _ in range(max(1, args.rounds)):
                await rounds.round()
        finally:
            await asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes))
    finally:
        await dispatcher.aclose()
    return {"workload": "fanout", "broker": redact(args.broker), "sandbox": args.sandbox, "samples": args.samples,
            "stages": args.stages, "stage": args.stage, "rounds": len(rounds.rounds), **rounds.figures(),
            "open_sandboxes_s": round(open_s, 2)}
