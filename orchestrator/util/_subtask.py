"""``subtask``: run an async function as a named unit of work in its own span (mirrors Inspect's).

The function runs in a child task, so context it sets (models, limits, policies) does not leak
back to the caller; its span is typed ``subtask`` and an info event records its input and result.
Inspect also gives a subtask its own ``Store``; toolfleet has no ``Store`` type, so ``store=`` is
refused rather than silently ignored.

The span and the event go to the sample's transcript, which ``orchestrator.log`` owns; log sits above
util (its events name tools, which use util), so it plugs itself in here when it loads
(``SUBTASK_TRACE.install``). Before that nothing has a transcript to read, and nothing is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

SUBTASK_SOURCE = "subtask"


SpanFactory = Callable[[Any, str], contextlib.AbstractContextManager[Any]]  # (name, type) -> a span
InfoRecorder = Callable[[dict[str, Any], str], None]  # (data, source)


class SubtaskTrace:
    """Where subtasks record themselves: a span around the call, then an info event."""

    def __init__(self) -> None:
        self.span: SpanFactory = lambda name, type: contextlib.nullcontext()
        self.info: InfoRecorder = lambda data, source: None

    def install(self, span: SpanFactory, info: InfoRecorder) -> None:
        self.span, self.info = span, info


SUBTASK_TRACE = SubtaskTrace()


def subtask(name: str | Callable[..., Any], store: Any = None, type: str | None = None,
            input: dict[str, Any] | None = None) -> Any:
    """Decorate an async function as a subtask (``@subtask`` or ``@subtask("name")``)."""
    if store is not None:
        raise NotImplementedError("subtask(store=...) is not supported: toolfleet has no Store type.")

    def wrap(func: Callable[..., Any], subtask_name: str | None) -> Callable[..., Any]:
        label = subtask_name or getattr(func, "__name__", "subtask")

        @functools.wraps(func)
        async def run_subtask(*args: Any, **kwargs: Any) -> Any:
            if not inspect.iscoroutinefunction(func):
                raise TypeError(f"'{label}' is not declared as an async callable.")
            logged = input if input is not None else {
                **dict(zip(inspect.signature(func).parameters, args, strict=False)), **kwargs}

            async def body() -> Any:
                with SUBTASK_TRACE.span(label, "subtask"):
                    result = await func(*args, **kwargs)
                    SUBTASK_TRACE.info({"subtask": label, "type": type, "input": _jsonable(logged),
                                        "result": _jsonable(result)}, SUBTASK_SOURCE)
                return result

            return await asyncio.create_task(body())

        return run_subtask

    if isinstance(name, str):
        return lambda func: wrap(func, name)
    return wrap(name, None)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else repr(value)
