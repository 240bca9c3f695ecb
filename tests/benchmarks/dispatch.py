"""``toolfleet bench dispatch``: one ``bash true`` round trip through Celery to a worker's sandbox.

Starts its own redis-server and one ``toolfleet worker`` (or measures ``--broker``'s running fleet),
opens one sandbox on it through the ``CeleryDispatcher`` (``--sandbox docker`` by default, ``local``
where there is no Docker), then runs the fleet measurement an installed toolfleet runs
(``orchestrator/bench/_round_trip.py``):

- ``p50_ms`` / ``p99_ms``: sequential one-call stages (``CeleryDispatcher.dispatch``), ``--calls`` of them;
- ``calls_per_s``: parallel stages of ``--stage`` calls, ``--concurrency`` stages in flight;
- ``loop_lag_p99_ms``: the orchestrator's event-loop lag meanwhile;
- ``baseline``: the same task through plain Celery — ``send_task(...).get()`` per call and
  ``group(...).apply_async().get()`` per stage (Celery's own result waiting, which polls).

Targets: p50 <= 5 ms, p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from orchestrator.bench._connect import bash_request as _bash_request, fleet_dispatcher
from orchestrator.bench._round_trip import add_measure_arguments, open_route, round_trips
from orchestrator.bench._timing import percentile_ms
from orchestrator.dispatch import SampleRoute

from ._broker import add_broker_argument, fleet_or_broker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_measure_arguments(parser)
    add_broker_argument(parser)
    parser.add_argument("--task-events", action="store_true",
                        help="workers send Celery task events (as when Flower watches the fleet)")
    parser.add_argument("--baseline-calls", type=int, default=100, help="plain-Celery round trips (it polls: slow)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workers = {"concurrency": max(16, args.stage * args.concurrency),
               "extra_args": ("--task-events",) if args.task_events else ()}
    async with fleet_or_broker(args.broker, workers=1, **workers) as (url, _):
        dispatcher = await fleet_dispatcher(url)
        route = await open_route(dispatcher, args.sandbox)
        try:
            figures = await round_trips(dispatcher, route, args.calls, args.stage, args.concurrency)
            baseline = await asyncio.to_thread(_plain_celery, dispatcher, route, args.baseline_calls, args.stage)
        finally:
            await dispatcher.close_sandbox(route)
            await dispatcher.aclose()
    return {"workload": "dispatch", "sandbox": args.sandbox, "task_events": args.task_events, **figures,
            "baseline": baseline}


def _plain_celery(dispatcher: Any, route: SampleRoute, calls: int, stage: int) -> dict[str, Any]:
    """The same task through Celery's own API, waiting with ``.get()`` (a thread: it blocks)."""
    from celery import Celery, group

    from workers.app import KEYRING_OPTION, FleetRedisTransport
    from workers.fleet import load_keyring, names

    # Stock Celery (its own Redis result backend and result consumer), not toolfleet's publisher-side
    # app; only its broker transport is the fleet's, because workers drop every task message that is
    # not signed with the fleet secret (an unsigned baseline never gets an answer).
    app = Celery("plain", broker=dispatcher.config.broker_url, backend=dispatcher.config.broker_url,
                 set_as_current=False)
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
            sigs = [app.signature(names.TASK_CALL, args=[_bash_request(route).model_dump(mode="json")],
                                  queue=route.queue)
                    for _ in range(stage)]
            start = time.perf_counter()
            group(sigs).apply_async().get(timeout=60)
            grouped.append(time.perf_counter() - start)
    finally:
        app.close()
    return {
        "workload": "dispatch",
        "implementation": ("plain Celery (messages signed by the fleet transport): send_task().get() / "
                           "GroupResult.get()"),
        "p50_ms": percentile_ms(single, 0.5),
        "p99_ms": percentile_ms(single, 0.99),
        "group_p50_ms": percentile_ms(grouped, 0.5),
        "calls": len(single),
    }
