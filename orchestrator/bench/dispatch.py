"""``toolfleet bench dispatch``: one ``bash true`` round trip through Celery to a worker's sandbox.

Starts its own redis-server and one ``toolfleet worker``, opens one sandbox on it through the
``CeleryDispatcher`` (``--sandbox docker`` by default, ``local`` where there is no Docker), then:

- ``p50_ms`` / ``p99_ms``: sequential one-call stages (``CeleryDispatcher.dispatch``), ``--calls`` of them;
- ``calls_per_s``: parallel stages of ``--stage`` calls, ``--concurrency`` stages in flight;
- ``loop_lag_p99_ms``: the orchestrator's event-loop lag meanwhile;
- ``baseline``: the same task through plain Celery — ``send_task(...).get()`` per call and
  ``group(...).apply_async().get()`` per stage (Celery's own result waiting, which polls).

Targets (issue 4): p50 <= 5 ms, p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from orchestrator._wire import CallRequest, SandboxSpec
from orchestrator.dispatch import Dispatch, SampleRoute, reset_route, set_route
from orchestrator.tool._registry import tool_meta

from ._fleet import BenchFleet, LoopLag, percentile_ms

WARMUP = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=500, help="sequential round trips for p50/p99")
    parser.add_argument("--stage", type=int, default=4, help="parallel calls per stage for calls/s")
    parser.add_argument("--concurrency", type=int, default=16, help="stages in flight for calls/s")
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")
    parser.add_argument("--task-events", action="store_true",
                        help="workers send Celery task events (as when Flower watches the fleet)")
    parser.add_argument("--baseline-calls", type=int, default=100, help="plain-Celery round trips (it polls: slow)")


def _bash_request(route: SampleRoute) -> CallRequest:
    from orchestrator.tool._tools import bash

    ref = tool_meta(bash()).ref  # type: ignore[union-attr]
    return CallRequest(call_id=uuid.uuid4().hex, function="bash", tool=ref, arguments={"cmd": "true"},
                       sandbox=route.sandbox, sample_id=route.sample_id)


def _check(outcome: Any) -> None:
    if outcome.error is not None or outcome.fatal is not None:
        raise RuntimeError(f"bench call failed: {outcome.error or outcome.fatal}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch.celery import CeleryDispatcher, CeleryDispatcherConfig

    async with BenchFleet(workers=1, concurrency=max(16, args.stage * args.concurrency), task_events=args.task_events) as fleet:
        dispatcher = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.url))
        route = await dispatcher.open_sandbox(SandboxSpec(eval_id="bench", sample_id="dispatch",
                                                          config={"type": args.sandbox}))
        token = set_route(route)
        lag = LoopLag()
        try:
            async def one() -> None:
                [fut] = dispatcher.dispatch([Dispatch(_bash_request(route), None)])  # type: ignore[arg-type]
                _check(await asyncio.wait_for(fut, 60))

            async def stage() -> None:
                futures = dispatcher.dispatch([Dispatch(_bash_request(route), None) for _ in range(args.stage)])  # type: ignore[arg-type]
                for outcome in await asyncio.wait_for(asyncio.gather(*futures), 60):
                    _check(outcome)

            for _ in range(WARMUP):
                await one()
            lag.start()
            latencies = []
            for _ in range(args.calls):
                start = time.perf_counter()
                await one()
                latencies.append(time.perf_counter() - start)
            gate = asyncio.Semaphore(args.concurrency)

            async def gated() -> None:
                async with gate:
                    await stage()

            stages = max(1, args.calls // args.stage)
            start = time.perf_counter()
            await asyncio.gather(*(gated() for _ in range(stages)))
            rate = stages * args.stage / (time.perf_counter() - start)
            lag_p99 = await lag.stop()
            baseline = await asyncio.to_thread(_plain_celery, dispatcher, route, args.baseline_calls, args.stage)
        finally:
            reset_route(token)
            await dispatcher.close_sandbox(route)
            await dispatcher.aclose()
    return {
        "workload": "dispatch",
        "sandbox": args.sandbox,
        "task_events": args.task_events,
        "p50_ms": percentile_ms(latencies, 0.5),
        "p99_ms": percentile_ms(latencies, 0.99),
        "calls_per_s": round(rate, 1),
        "calls": len(latencies),
        "stage": args.stage,
        "concurrency": args.concurrency,
        "loop_lag_p99_ms": lag_p99,
        "baseline": baseline,
    }


def _plain_celery(dispatcher: Any, route: SampleRoute, calls: int, stage: int) -> dict[str, Any]:
    """The same task through Celery's own API, waiting with ``.get()`` (a thread: it blocks)."""
    from celery import Celery, group

    from workers.fleet import load_keyring, names
    from workers.app import KEYRING_OPTION, FleetRedisTransport

    # Stock Celery (its own Redis result backend and result consumer), not toolfleet's publisher-side
    # app; only its broker transport is the fleet's, because workers drop every task message that is
    # not signed with the fleet secret (an unsigned baseline never gets an answer).
    app = Celery("plain", broker=dispatcher.config.broker_url, backend=dispatcher.config.broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                    result_accept_content=["json"],
                    broker_transport=f"{FleetRedisTransport.__module__}:{FleetRedisTransport.__name__}",
                    broker_transport_options={KEYRING_OPTION: load_keyring()})
    single, grouped = [], []
    try:
        for _ in range(calls):
            payload = _bash_request(route).model_dump(mode="json")
            start = time.perf_counter()
            app.send_task(names.TASK_CALL, args=[payload], queue=route.queue).get(timeout=60)
            single.append(time.perf_counter() - start)
        for _ in range(max(1, calls // 10)):
            sigs = [app.signature(names.TASK_CALL, args=[_bash_request(route).model_dump(mode="json")], queue=route.queue)
                    for _ in range(stage)]
            start = time.perf_counter()
            group(sigs).apply_async().get(timeout=60)
            grouped.append(time.perf_counter() - start)
    finally:
        app.close()
    return {
        "workload": "dispatch",
        "implementation": "plain Celery (messages signed by the fleet transport): send_task().get() / GroupResult.get()",
        "p50_ms": percentile_ms(single, 0.5),
        "p99_ms": percentile_ms(single, 0.99),
        "group_p50_ms": percentile_ms(grouped, 0.5),
        "calls": len(single),
    }
