"""``toolfleet bench scale``: one fleet at scale — many worker processes, a thousand sandboxes open at once.

Starts its own redis-server (password, fleet secret, as shipped) and ``--workers`` ``toolfleet worker``
processes on this machine (or measures ``--broker``'s running fleet: ``workers`` is then its live hosts,
and the workers' memory and slots are null), then through one ``CeleryDispatcher``:

1. opens ``--sandboxes`` sandboxes (``local``: a real exec-agent process and a temp dir each;
   ``--open-concurrency`` opens in flight, as an eval runner admits samples) and keeps them all open;
2. every sample runs ``--calls`` one-call stages of ``bash true`` through ``execute_tools``, all samples
   at once;
3. closes them all.

Reports ``workers``, ``sandboxes_open`` (open at once, counted from the fleet's slot counters in
Redis once the dispatcher gave its leased slots back: sandboxes actually open),
``placement_p50_ms``/``placement_p99_ms`` (the dispatcher's slot reservation per open, asked until
held — Redis's answer read, or at once when served from a slot leased ahead —,
``workers/fleet/_placement.py``; the reservations asked together go in one script call, with the lease
asks) and where that time goes (``placement_leased_share``: the share of the opens' placements
served from a lease, without a round trip; ``placement_redis_*``: the script call's round trip;
``placement_batch_mean``: reservations per script call, lease asks included; ``placement_script_us``:
Redis's own time per script call; ``placement_resumed_*``: until the opening coroutine ran again,
this process's loop lag added; ``open_loop_lag_p99_ms``: that loop meanwhile; ``placement_steady_*``:
one placement at a time with every sandbox open, leases on as in the opens), ``open_per_s``,
``open_p99_ms``, ``calls_per_s``, ``errors``, ``redis_commands_per_call``
(INFO commandstats delta over the call phase; a script's inner commands count), ``redis_commands_per_open``
(and by type), Redis CPU per call and per open, an idle worker's Redis cost (``idle_redis_*``, watched
for ``IDLE_S`` before the opens), ``worker_peak_rss_mb`` (largest VmHWM of a worker process; sandbox
agents are separate processes), ``redis_used_mb``/``redis_peak_mb``, ``orchestrator_peak_rss_mb`` and
``slots_left_in_use`` (after every close and the leases given back: must be 0).

Targets: >= 1,000 sandboxes open at once on >= 8 workers, errors 0, placement p99 <= 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

from orchestrator._wire import SandboxSpec
from orchestrator.bench import LoopLag, command_usec, percentile_ms, redis_counters, redis_memory_mb
from orchestrator.dispatch import SampleRoute, reset_active_dispatcher, reset_route, set_active_dispatcher, set_route

from ._broker import add_broker_argument, fleet_or_broker

STEADY_PLACEMENTS = 200
IDLE_S = 5.0  # seconds the idle fleet is watched before the opens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=8, help="worker processes (hosts)")
    parser.add_argument("--sandboxes", type=int, default=1000, help="sandboxes open at once (one per sample)")
    parser.add_argument("--calls", type=int, default=3, help="one-call stages each sample runs")
    parser.add_argument("--open-concurrency", type=int, default=100, help="sandbox opens in flight")
    parser.add_argument("--concurrency", type=int, default=32, help="pool threads per worker")
    add_broker_argument(parser)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch.celery import CeleryDispatcher, CeleryDispatcherConfig
    from workers.fleet import names

    slots = -(-args.sandboxes // args.workers) + 8
    errors: list[str] = []
    fleet_options = {"workers": args.workers, "concurrency": args.concurrency, "slots": slots}
    async with fleet_or_broker(args.broker, **fleet_options) as (url, fleet):
        n_workers = args.workers if fleet else await _hosts(url, names)
        dispatcher = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=url, placement_wait=120))
        gate = asyncio.Semaphore(args.open_concurrency)
        open_latencies: list[float] = []

        async def open_one(i: int) -> SampleRoute | None:
            async with gate:
                start = time.perf_counter()
                try:
                    route = await dispatcher.open_sandbox(SandboxSpec(eval_id="bench-scale", sample_id=f"s{i}",
                                                                      config={"type": "local"}))
                except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                    errors.append(f"open: {exc}")
                    return None
                open_latencies.append(time.perf_counter() - start)
                return route

        idle_start = await _counters(url)
        await asyncio.sleep(IDLE_S)  # what an idle fleet costs Redis: heartbeats, consumers' polls
        redis_start = await _counters(url)
        idle = redis_start.minus(idle_start)
        cpu_open = time.process_time()
        open_lag = LoopLag()
        open_lag.start()
        start = time.perf_counter()
        opened = await asyncio.gather(*(open_one(i) for i in range(args.sandboxes)))
        open_wall = time.perf_counter() - start
        open_lag_p99 = await open_lag.stop()
        cpu_open = time.process_time() - cpu_open
        routes = [r for r in opened if r is not None]
        redis_opened = await _counters(url)
        placements, leased_hits = len(dispatcher.placement_seconds), dispatcher.placer.lease_hits
        await dispatcher.placer.release_leases()  # slots reserved ahead are not sandboxes
        sandboxes_open = await _slots_in_use(url, names)
        steady = await _steady_placements(dispatcher, STEADY_PLACEMENTS)
        redis_before_calls = await _counters(url)
        call_figures = await _calls(dispatcher, routes, args.calls, errors)
        redis_called = await _counters(url)
        memory = fleet.worker_memory_mb() if fleet else []
        redis_memory: dict[str, float | None] = {"used_mb": None, "peak_mb": None, **(await redis_memory_mb(url) or {})}
        script_us = await command_usec(url, "evalsha")
        await asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes))
        await dispatcher.placer.release_leases()
        left_open = await _slots_in_use(url, names)
        placement_s = list(dispatcher.placement_seconds)
        resumed_s = list(dispatcher.placement_resumed_seconds)
        batches = list(dispatcher.placer.batches)
        await dispatcher.aclose()
    calls = call_figures.pop("calls")
    out: dict[str, Any] = {
        "workload": "scale",
        "sandbox": "local",
        "workers": n_workers,
        "slots_per_worker": slots if fleet else None,
        "sandboxes": args.sandboxes,
        "sandboxes_open": sandboxes_open,
        "open_concurrency": args.open_concurrency,
        "placement_p50_ms": percentile_ms(placement_s, 0.5) if placement_s else None,
        "placement_p99_ms": percentile_ms(placement_s, 0.99) if placement_s else None,
        # Served from a slot leased ahead (no round trip; the rest asked Redis, or waited for a lease ask).
        "placement_leased_share": round(leased_hits / placements, 3) if placements else None,
        # The same until the opening coroutine ran again: what this process's busy loop adds.
        "placement_resumed_p50_ms": percentile_ms(resumed_s, 0.5) if resumed_s else None,
        "placement_resumed_p99_ms": percentile_ms(resumed_s, 0.99) if resumed_s else None,
        # Where a placement's time goes: Redis (one pipelined script per burst of reservations) vs
        # this process's event loop (how late a 10 ms timer fires while the opens run).
        "placement_redis_p50_ms": percentile_ms([b[0] for b in batches], 0.5) if batches else None,
        "placement_redis_p99_ms": percentile_ms([b[0] for b in batches], 0.99) if batches else None,
        "placement_batch_mean": round(sum(b[1] for b in batches) / len(batches), 1) if batches else None,
        "open_loop_lag_p99_ms": open_lag_p99,
        # One more placement (reserve + release) at a time with every sandbox open and nothing else
        # running; and what the script costs Redis itself (INFO commandstats, µs per EVALSHA).
        "placement_steady_p50_ms": percentile_ms(steady, 0.5),
        "placement_steady_p99_ms": percentile_ms(steady, 0.99),
        "placement_script_us": script_us,
        "open_per_s": round(len(routes) / open_wall, 1),
        "open_p50_ms": percentile_ms(open_latencies, 0.5) if open_latencies else None,
        "open_p99_ms": percentile_ms(open_latencies, 0.99) if open_latencies else None,
        "calls": calls,
        **call_figures,
        "errors": len(errors),
        "orchestrator_cpu_ms_per_open": round(cpu_open / max(1, len(routes)) * 1000, 3),
        "idle_redis_commands_per_worker_s": round(idle.commands / IDLE_S / max(1, n_workers), 1),
        "idle_redis_cpu_ms_per_worker_s": round(idle.cpu_s * 1000 / IDLE_S / max(1, n_workers), 3),
        "redis_commands_per_open": round(redis_opened.minus(redis_start).commands / max(1, len(routes)), 2),
        "redis_commands_by_type_per_open": redis_opened.minus(redis_start).per(len(routes)),
        # Commands a Lua script runs count as commands too (INFO commandstats counts them).
        "redis_commands_per_call": round(redis_called.minus(redis_before_calls).commands / max(1, calls), 2),
        "redis_bytes_per_call": round((lambda d: (d.bytes_in + d.bytes_out) / max(1, calls))(
            redis_called.minus(redis_before_calls))),
        "redis_cpu_ms_per_call": round(redis_called.minus(redis_before_calls).cpu_s / max(1, calls) * 1000, 4),
        "redis_cpu_ms_per_open": round(redis_opened.minus(redis_start).cpu_s / max(1, len(routes)) * 1000, 4),
        "worker_peak_rss_mb": max((m["peak_rss_mb"] for m in memory), default=None),
        "worker_rss_mb": [m["rss_mb"] for m in memory] if fleet else None,
        "redis_used_mb": redis_memory["used_mb"],
        "redis_peak_mb": redis_memory["peak_mb"],
        "orchestrator_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "slots_left_in_use": left_open,
    }
    if errors:
        out["first_error"] = errors[0][:300]
    return out


async def _steady_placements(dispatcher: Any, n: int) -> list[float]:
    from workers.fleet import release_eval, release_slots

    placer = dispatcher.placer
    redis = placer.redis
    out = []
    for _ in range(n):
        start = time.perf_counter()
        host = await placer.reserve(eval_id="bench-scale-steady")
        out.append(time.perf_counter() - start)
        await release_eval(redis, "bench-scale-steady")
        await release_slots(redis, host.host)
    return out


async def _counters(url: str) -> Any:
    counters = await redis_counters(url)
    if counters is None:
        raise RuntimeError("the broker refuses INFO: the scale figures are Redis's own counters")
    return counters


async def _hosts(url: str, names: Any) -> int:
    """The live hosts of a running fleet."""
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        return int(await client.scard(names.HOSTS_SET))
    finally:
        await client.aclose()


async def _slots_in_use(url: str, names: Any) -> int:
    """Sandboxes the fleet holds now, by its own slot counters (one slot per local sandbox)."""
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        hosts = [h.decode() if isinstance(h, bytes) else h for h in await client.smembers(names.HOSTS_SET)]
        values = await client.mget([names.slots_used_key(h) for h in hosts]) if hosts else []
        return sum(int(v or 0) for v in values)
    finally:
        await client.aclose()


async def _calls(dispatcher: Any, routes: list[SampleRoute], calls: int, errors: list[str]) -> dict[str, Any]:
    from orchestrator.model import ChatMessage, ChatMessageAssistant, ChatMessageTool, ChatMessageUser, execute_tools
    from orchestrator.tool import ToolCall, bash

    tools = [bash()]
    latencies: list[float] = []

    async def sample(route: SampleRoute) -> None:
        token = set_route(route)
        try:
            for turn in range(calls):
                messages: list[ChatMessage] = [ChatMessageUser(content="go"), ChatMessageAssistant(
                    content="", tool_calls=[ToolCall(id=f"t{turn}", function="bash", arguments={"cmd": "true"})])]
                start = time.perf_counter()
                result = await execute_tools(messages, tools)
                latencies.append(time.perf_counter() - start)
                errors.extend(f"call: {m.error.message}" for m in result.messages
                              if isinstance(m, ChatMessageTool) and m.error is not None)
        finally:
            reset_route(token)

    lag = LoopLag()
    active = set_active_dispatcher(dispatcher)
    try:
        lag.start()
        cpu = time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(sample(r) for r in routes))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        lag_p99 = await lag.stop()
    finally:
        reset_active_dispatcher(active)
    done = len(routes) * calls
    return {"calls": done, "calls_per_s": round(done / wall, 1) if wall > 0 else None,
            "call_p50_ms": percentile_ms(latencies, 0.5) if latencies else None,
            "call_p99_ms": percentile_ms(latencies, 0.99) if latencies else None,
            "orchestrator_cpu_ms_per_call": round(cpu / max(1, done) * 1000, 3), "loop_lag_p99_ms": lag_p99}
