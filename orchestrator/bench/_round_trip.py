"""``toolfleet bench dispatch --broker URL``: one ``bash true`` round trip through a running fleet.

Opens one sandbox on the fleet through the ``CeleryDispatcher`` (``--sandbox docker`` by default;
``local`` needs workers started with ``--allow-local``), then:

- ``p50_ms`` / ``p99_ms``: sequential one-call stages (``CeleryDispatcher.dispatch``), ``--calls`` of them;
- ``calls_per_s``: parallel stages of ``--stage`` calls, ``--concurrency`` stages in flight;
- ``loop_lag_p99_ms``: this process's event-loop lag meanwhile.

Nothing is started here: the figures are the fleet's as it runs (a checkout's ``toolfleet bench
dispatch`` starts its own fleet and runs this same measurement on it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import Dispatch, SampleRoute, reset_route, set_route

from ._connect import add_broker_argument, bash_request, fleet_dispatcher
from ._timing import LoopLag, percentile_ms

WARMUP = 30
CALL_TIMEOUT_S = 60.0


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=500, help="sequential round trips for p50/p99")
    parser.add_argument("--stage", type=int, default=4, help="parallel calls per stage for calls/s")
    parser.add_argument("--concurrency", type=int, default=16, help="stages in flight for calls/s")
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_broker_argument(parser)
    add_measure_arguments(parser)


def _check(outcome: Any) -> None:
    if outcome.error is not None or outcome.fatal is not None:
        raise RuntimeError(f"bench call failed: {outcome.error or outcome.fatal}")


async def open_route(dispatcher: Any, sandbox: str) -> SampleRoute:
    route: SampleRoute = await dispatcher.open_sandbox(SandboxSpec(eval_id="bench", sample_id="dispatch",
                                                                   config={"type": sandbox}))
    return route


async def round_trips(dispatcher: Any, route: SampleRoute, calls: int, stage: int, concurrency: int,
                      warmup: int = WARMUP) -> dict[str, Any]:
    """The figures of one open sandbox: sequential round trips, then parallel stages, and the loop's lag."""
    token = set_route(route)
    lag = LoopLag()
    try:
        async def one() -> None:
            [fut] = dispatcher.dispatch([Dispatch(bash_request(route), None)])  # type: ignore[arg-type]  # no live tool: the worker rebuilds it
            _check(await asyncio.wait_for(fut, CALL_TIMEOUT_S))

        async def one_stage() -> None:
            futures = dispatcher.dispatch([Dispatch(bash_request(route), None) for _ in range(stage)])  # type: ignore[arg-type]  # no live tool: the worker rebuilds it
            for outcome in await asyncio.wait_for(asyncio.gather(*futures), CALL_TIMEOUT_S):
                _check(outcome)

        for _ in range(warmup):
            await one()
        lag.start()
        latencies = []
        for _ in range(calls):
            start = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - start)
        gate = asyncio.Semaphore(concurrency)

        async def gated() -> None:
            async with gate:
                await one_stage()

        stages = max(1, calls // stage)
        start = time.perf_counter()
        await asyncio.gather(*(gated() for _ in range(stages)))
        rate = stages * stage / (time.perf_counter() - start)
        lag_p99 = await lag.stop()
    finally:
        await lag.stop()
        reset_route(token)
    return {
        "p50_ms": percentile_ms(latencies, 0.5),
        "p99_ms": percentile_ms(latencies, 0.99),
        "calls_per_s": round(rate, 1),
        "calls": len(latencies),
        "stage": stage,
        "concurrency": concurrency,
        "loop_lag_p99_ms": lag_p99,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch._preflight import redact

    dispatcher = await fleet_dispatcher(args.broker)
    try:
        route = await open_route(dispatcher, args.sandbox)
        try:
            figures = await round_trips(dispatcher, route, args.calls, args.stage, args.concurrency)
        finally:
            await dispatcher.close_sandbox(route)
    finally:
        await dispatcher.aclose()
    return {"workload": "dispatch", "broker": redact(args.broker), "sandbox": args.sandbox, **figures}
