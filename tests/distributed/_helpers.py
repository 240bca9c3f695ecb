"""Small helpers for the distributed tests: build wire requests for registered sample tools."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from orchestrator._wire import CallOutcome, CallRequest, SandboxSpec
from orchestrator.dispatch import Dispatch, SampleRoute, reset_route, set_route
from orchestrator.tool._registry import ToolRef
from orchestrator.tool._tool_def import tool_def
from tests.support import sample_tools

BOUND = 30.0  # a lost host's pending calls resolve within this many seconds (the dispatcher's liveness watch)


def request(function: str, arguments: dict[str, Any] | None = None, sandbox: str | None = None,
            timeout: float | None = None, call_id: str | None = None,
            module: str = sample_tools.__name__) -> CallRequest:
    return CallRequest(call_id=call_id or uuid.uuid4().hex, function=function,
                       tool=ToolRef(name=function, module=module), arguments=arguments or {},
                       sandbox=sandbox, timeout=timeout)


def bash_request(cmd: str, sandbox: str) -> CallRequest:
    from orchestrator.tool import bash

    ref = tool_def(bash()).ref
    return CallRequest(call_id=uuid.uuid4().hex, function="bash", tool=ref, arguments={"cmd": cmd}, sandbox=sandbox)


def dispatch(dispatcher, requests: list[CallRequest],
             route: SampleRoute | None = None) -> list[asyncio.Future[CallOutcome]]:
    token = set_route(route or SampleRoute())
    try:
        return dispatcher.dispatch([Dispatch(r, None) for r in requests])  # type: ignore[arg-type]
    finally:
        reset_route(token)


async def one(dispatcher, req: CallRequest, route: SampleRoute | None = None, bound: float = BOUND) -> CallOutcome:
    [fut] = dispatch(dispatcher, [req], route)
    return await asyncio.wait_for(fut, bound)


def local_spec(sample_id: str = "s1") -> SandboxSpec:
    return SandboxSpec(eval_id="e-dist", sample_id=sample_id, config={"type": "local"})


def starts(path: str, label: str | None = None) -> int:
    """How many times the ``record`` tool started (optionally for one label)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if line.startswith("start") and (label is None or line.split()[1] == label))
