"""``toolfleet bench flood``: calls that print far more than anyone should keep, through the broker.

Starts its own redis-server (with a password) and one ``toolfleet worker`` (fleet secret on), or
measures ``--broker``'s running fleet (the worker figures are then null and ``ok`` checks Redis only), opens
``--sandboxes`` sandboxes through the ``CeleryDispatcher``, then runs ``--calls`` ``bash`` calls that
each print ``--mb`` MB (``yes | head -c``), ``--in-flight`` at a time, through ``execute_tools`` (the
whole orchestrator path). Reports, per the issue's bound (worker RSS < 300 MB, Redis < 100 MB):

- ``worker_rss_mb`` / ``worker_peak_rss_mb``: the worker's resident memory after the flood and its
  peak during it (VmHWM), against ``worker_rss_before_mb`` with the sandboxes open;
- ``redis_used_mb`` / ``redis_peak_mb``: Redis ``used_memory`` after the flood and at its peak;
- ``model_sees_bytes``: what one call's tool message holds (the model's truncated view);
- ``ok``: both bounds held.

What bounds it: the sandbox command captures at most ``output_cap`` (10 MiB) per stream; the worker
cuts each outcome to ``--max-outcome-bytes`` (512 KiB) before its call memory or Redis keep it; the
call memory is bounded by bytes; the orchestrator deletes each result from Redis as it reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from orchestrator._wire import SandboxSpec
from orchestrator.bench import redis_memory_mb
from orchestrator.dispatch import SampleRoute, reset_active_dispatcher, reset_route, set_active_dispatcher, set_route

from ._broker import add_broker_argument, fleet_or_broker

WORKER_RSS_BOUND_MB = 300
REDIS_BOUND_MB = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=50, help="calls, each printing --mb MB")
    parser.add_argument("--mb", type=int, default=100, help="MB each call prints")
    parser.add_argument("--sandboxes", type=int, default=10, help="sandboxes the calls are spread over")
    parser.add_argument("--in-flight", type=int, default=50, help="calls running at once (at most the worker's pool)")
    parser.add_argument("--sandbox", choices=["docker", "local"], default="docker")
    add_broker_argument(parser)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.dispatch.celery import CeleryDispatcher, CeleryDispatcherConfig
    from orchestrator.model import ChatMessage, ChatMessageAssistant, ChatMessageTool, ChatMessageUser, execute_tools
    from orchestrator.tool import ToolCall, bash

    tools = [bash(timeout=600)]
    config: dict[str, Any] = {"type": args.sandbox}
    if args.sandbox == "docker":
        config["pool_size"] = 0
    cmd = f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {args.mb * 1_000_000}"
    unknown: dict[str, float | None] = {"rss_mb": None, "peak_rss_mb": None}
    async with fleet_or_broker(args.broker, concurrency=max(16, args.in_flight), slots=args.sandboxes
                               + 4) as (url, fleet):
        dispatcher = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=url))
        routes: list[SampleRoute] = list(await asyncio.gather(*(
            dispatcher.open_sandbox(SandboxSpec(eval_id="bench-flood", sample_id=f"flood-{i}", config=config))
            for i in range(args.sandboxes))))
        before = fleet.worker_memory_mb()[0] if fleet else unknown
        gate = asyncio.Semaphore(args.in_flight)
        sizes: list[int] = []
        errors: list[str] = []

        async def call(i: int) -> None:
            async with gate:
                token = set_route(routes[i % len(routes)])
                try:
                    messages: list[ChatMessage] = [ChatMessageUser(content="flood"), ChatMessageAssistant(
                        content="", tool_calls=[ToolCall(id=f"f{i}", function="bash", arguments={"cmd": cmd})])]
                    result = await execute_tools(messages, tools)
                finally:
                    reset_route(token)
                for m in result.messages:
                    sizes.append(len(str(m.content).encode()))
                    if isinstance(m, ChatMessageTool) and m.error is not None and m.error.type != "limit":
                        errors.append(m.error.message)

        active = set_active_dispatcher(dispatcher)
        start = time.perf_counter()
        try:
            await asyncio.gather(*(call(i) for i in range(args.calls)))
        finally:
            reset_active_dispatcher(active)
        wall = time.perf_counter() - start
        after = fleet.worker_memory_mb()[0] if fleet else unknown
        redis_mem: dict[str, float | None] = {"used_mb": None, "peak_mb": None, **(await redis_memory_mb(url) or {})}
        await asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes))
        await dispatcher.aclose()
    out: dict[str, Any] = {
        "workload": "flood",
        "sandbox": args.sandbox,
        "calls": args.calls,
        "mb_per_call": args.mb,
        "in_flight": args.in_flight,
        "wall_s": round(wall, 1),
        "worker_rss_before_mb": before["rss_mb"],
        "worker_rss_mb": after["rss_mb"],
        "worker_peak_rss_mb": after["peak_rss_mb"],
        "redis_used_mb": redis_mem["used_mb"],
        "redis_peak_mb": redis_mem["peak_mb"],
        "model_sees_bytes": max(sizes) if sizes else 0,
        "errors": len(errors),
        "ok": _within(after["peak_rss_mb"], WORKER_RSS_BOUND_MB) and _within(redis_mem["peak_mb"], REDIS_BOUND_MB)
        and not errors,
    }
    if errors:
        out["first_error"] = errors[0][:300]
    return out


def _within(value: float | None, bound: float) -> bool:
    """A figure under its bound; one this run could not read (another's fleet, INFO refused) does not fail it."""
    return value is None or value < bound
