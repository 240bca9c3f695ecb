"""``subtask``: run an async function as a named unit of work in its own span (mirrors Inspect's).

The function runs in a child task, so context it sets (models, limits, policies) does not leak
back to the caller; its span is typed ``subtask`` and an info event records its input and result.
Inspect also gives a subtask its own ``Store``; toolfleet has no ``Store`` type, so ``store=`` is
refused rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

SUBTASK_SOURCE = "subtask"


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
                **{p: a for p, a in zip(inspect.signature(func).parameters, args)}, **kwargs}

            async def body() -> Any:
                from orchestrator.log import span, transcript  # lazy: util must not import log at load

                with span(name=label, type="subtask"):
                    result = await func(*args, **kwargs)
                    transcript().info({"subtask": label, "type": type, "input": _jsonable(logged),
                                       "result": _jsonable(result)}, source=SUBTASK_SOURCE)
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
