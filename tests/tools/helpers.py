"""Call a sandbox tool the way the engine does: a ``CallRequest`` through ``workers.executor.execute_call``."""

from __future__ import annotations

import uuid
from typing import Any

from orchestrator._wire import CallOutcome, CallRequest
from orchestrator.tool._registry import tool_meta
from workers.executor import execute_call


async def call(env: Any, tool: Any, timeout: float | None = None, **arguments: Any) -> CallOutcome:
    meta = tool_meta(tool)
    assert meta is not None and meta.ref is not None, "sandbox tools must be rebuildable from the registry"
    request = CallRequest(
        call_id=uuid.uuid4().hex, function=meta.name, tool=meta.ref, arguments=arguments,
        sandbox=env.sandbox_id, timeout=timeout,
    )
    request = CallRequest.model_validate_json(request.model_dump_json())  # it must survive the wire
    return await execute_call(request, env=env)  # rebuilt from the registry, as on a worker


async def ok(env: Any, tool: Any, **arguments: Any) -> Any:
    outcome = await call(env, tool, **arguments)
    assert outcome.error is None and outcome.fatal is None, (outcome.error, outcome.fatal)
    return outcome.result


async def error(env: Any, tool: Any, **arguments: Any) -> tuple[str, str]:
    outcome = await call(env, tool, **arguments)
    assert outcome.fatal is None, outcome.fatal
    assert outcome.error is not None, f"expected an error, got result {outcome.result!r}"
    return outcome.error.type, outcome.error.message
