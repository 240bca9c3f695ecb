"""Execute one ``CallRequest`` next to the sandbox: rebuild, deserialise, call, classify.

This is the whole execution engine. Embedded mode runs it in-process; a Celery task body runs the
same function on a worker — so the two modes cannot drift.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from orchestrator._errors import ControlFlowSignal, ToolfleetError
from orchestrator._wire import CallOutcome, CallRequest, FatalError
from orchestrator.tool._classify import classify_exception
from orchestrator.tool._content import ContentImage, ContentText
from orchestrator.tool._registry import ToolNotRegisteredError, rebuild_tool
from orchestrator.tool._tool_call import ToolCallError
from orchestrator.tool._tool_def import ToolDef, deserialize_arguments, tool_def
from orchestrator.tool._tool_info import parse_function
from orchestrator.util._sandbox import (
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxTimeoutError,
    SandboxUnavailableError,
    _current,
    _named,
    bind_sandbox,
)
from orchestrator.util._sandbox_recorder import ExecList, RecordingSandbox, recorded_services
from orchestrator.util._timers import LongDeadlines, arm

HOST = socket.gethostname()


def _timeout_partial(exc: BaseException) -> str | None:
    """The partial result Inspect shows beside a timeout or output-limit error."""
    if isinstance(exc, SandboxTimeoutError):
        return exc.truncated_output or None
    if isinstance(exc, OutputLimitExceededError):
        return exc.truncated_output or ""
    return None


def _wire_result(value: Any) -> Any:
    """Coerce a tool's return value into the wire's result union (JSON-safe)."""
    if value is None or isinstance(value, (str, int, float, bool, ContentText, ContentImage)):
        return value
    if isinstance(value, list):
        return [v if isinstance(v, (str, ContentText, ContentImage)) else str(v) for v in value]
    return str(value)


def _format_bytes(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def _enforce_result_cap(result: Any, cap: int) -> None:
    """The same payload cap in both modes: a result larger than the wire allows is a ``limit`` error."""
    if isinstance(result, str):
        if len(result) * 4 <= cap or len(result.encode("utf-8")) <= cap:  # cheap check first
            return
    elif isinstance(result, list):
        if len(json.dumps([r.model_dump() if hasattr(r, "model_dump") else r for r in result])) <= cap:
            return
    else:
        return
    raise OutputLimitExceededError(_format_bytes(cap))


async def execute_call(
    request: CallRequest,
    tool: Callable[..., Any] | None = None,
    env: SandboxEnvironment | None = None,
    bind: bool = True,
) -> CallOutcome:
    """Run one call. Never raises for tool errors: they come back in the outcome.

    ``tool`` is the live instance when executing in-process; otherwise it is rebuilt from the
    registry by name. ``env`` is bound as the current sandbox when ``bind`` (in-process callers
    that already carry the sample's context pass ``bind=False``: their context's sandbox is used).
    Either way the sandbox the tool sees records each exec into the outcome's ``sandbox_execs``.
    """
    started = time.time()
    execs: ExecList | None = None
    result: Any = None
    error: ToolCallError | None = None
    fatal: FatalError | None = None
    exception: BaseException | None = None
    try:
        if tool is None:
            if request.tool is None:
                raise ToolNotRegisteredError(f"Tool '{request.function}' can only run in the orchestrator process.")
            # A fresh instance per call (instances never share state across calls or samples); its
            # signature's reflection is cached per code object, so no ToolDef (a deep copy) is built.
            rebuilt = rebuild_tool(request.tool)
            runnable = rebuilt.tool if isinstance(rebuilt, ToolDef) else rebuilt
            kwargs = deserialize_arguments(parse_function(runnable), request.arguments)
        else:
            definition = tool_def(tool)
            runnable = definition.tool
            kwargs = definition.deserialize(request.arguments)
        box = env if bind else _current.get()
        if box is not None and not getattr(box, "records_execs_remotely", False):
            execs = ExecList()
            recorded = RecordingSandbox(box, execs)
            with bind_sandbox(recorded, recorded_services(box, recorded, execs) if bind else _named.get()):
                value = await _call_with_timeout(runnable, kwargs, request)
        elif bind:  # no sandbox, or one whose execs are recorded where it runs (it has no services here)
            with bind_sandbox(box):
                value = await _call_with_timeout(runnable, kwargs, request)
        else:
            value = await _call_with_timeout(runnable, kwargs, request)
        result = _wire_result(value)
        _enforce_result_cap(result, request.max_result_bytes)
    except ToolNotRegisteredError as exc:
        fatal = FatalError(type="ToolNotRegisteredError", message=str(exc))
    except _ToolTimedOut as exc:
        error = ToolCallError(type="timeout", message=exc.message)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is fatal
        result = None
        error = None if isinstance(exc, ToolTimeoutError) else classify_exception(exc, request.function)
        if error is None:
            fatal = FatalError(type=type(exc).__name__, message=str(exc), traceback=traceback.format_exc())
            exception = exc  # in-process: keep the original for the traceback
        else:
            result = _timeout_partial(exc)
    # Built once at the end: setting fields one by one on a pydantic model costs more than the call.
    if execs is not None and execs.items:
        return CallOutcome(call_id=request.call_id, result=result, error=error, fatal=fatal, started=started,
                           completed=time.time(), host=HOST, exception=exception, sandbox_execs=execs.items,
                           sandbox_execs_dropped=execs.dropped)
    return CallOutcome(call_id=request.call_id, result=result, error=error, fatal=fatal, started=started,
                       completed=time.time(), host=HOST, exception=exception)


async def execute_request(request: CallRequest, tool: Callable[..., Any] | None = None,
                          lookup: Callable[[str], SandboxEnvironment] | None = None) -> CallOutcome:
    """Execute a request whose sandbox is named by handle (resolved by ``lookup``: a ``SandboxHost``'s,
    else the process's default registry)."""
    if request.sandbox is None:
        return await execute_call(request, tool=tool, env=None)
    try:
        env = (lookup or lookup_sandbox)(request.sandbox)
    except SandboxUnavailableError as exc:
        now = time.time()
        return CallOutcome(call_id=request.call_id, error=classify_exception(exc, request.function), started=now,
                           completed=now, host=HOST)
    return await execute_call(request, tool=tool, env=env)


def lookup_sandbox(handle: str) -> SandboxEnvironment:
    """The live sandbox for a handle in this process (``SandboxUnavailableError`` if gone)."""
    from workers.sandbox import _registry

    return _registry.get(handle)


class _ToolTimedOut(ControlFlowSignal):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolTimeoutError(ToolfleetError, TimeoutError):
    """Raised out of the sample when a tool with ``timeout_behavior="raise"`` times out."""


# Every call has a deadline in every mode: one without a timeout of its own gets this one (the same
# bound the distributed fleet applies, ``max_call_seconds``), so nothing a model asks can run forever.
DEFAULT_CALL_DEADLINE = 3600.0


async def _call_with_timeout(func: Callable[..., Any], kwargs: dict[str, Any], request: CallRequest) -> Any:
    limit = request.timeout if request.timeout is not None else DEFAULT_CALL_DEADLINE
    try:
        async with asyncio.timeout(None) as scope:
            if request.timeout is not None:
                arm(scope, limit)  # the tool's own timeout, to the millisecond
                return await func(**kwargs)
            # The default deadline, checked once a second: no timer per call.
            deadlines = LongDeadlines.of_running_loop(limit)
            deadlines.add(scope)
            try:
                return await func(**kwargs)
            finally:
                deadlines.discard(scope)
    except TimeoutError:
        if not scope.expired():
            raise  # the tool's own timeout (e.g. a sandbox command), not the per-tool one
        t = limit
        shown = int(t) if float(t).is_integer() else t
        message = f"Tool '{request.function}' timed out after {shown} seconds."
        if request.timeout_behavior == "raise":
            raise ToolTimeoutError(message) from None
        raise _ToolTimedOut(message) from None
