"""The overhead workload, runnable against toolfleet or Inspect AI (same shape, same timing).

Run as a script (``python _overhead_workload.py inspect REPS``) it measures Inspect's
``execute_tools`` in whatever interpreter runs it, so a separate virtualenv can provide the
baseline. It imports nothing from toolfleet at module level for that reason.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

CALLS = 100


def _timed(run_once: Callable[[], Any], reps: int) -> float:
    """Median microseconds per call over ``reps`` turns of ``CALLS`` calls (after a warm-up)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run_once())
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            loop.run_until_complete(run_once())
            samples.append((time.perf_counter() - t0) / CALLS * 1e6)
        return statistics.median(samples)
    finally:
        loop.close()


def _noop_factories(tool: Callable[..., Any], prefix: str) -> tuple[Any, Any]:
    @tool(name=f"{prefix}noop_serial")
    def noop_serial():
        async def execute(x: int) -> str:
            """Return ok.

            Args:
                x: ignored.
            """
            return "ok"

        return execute

    @tool(name=f"{prefix}noop_parallel", parallel=True)
    def noop_parallel():
        async def execute(x: int) -> str:
            """Return ok.

            Args:
                x: ignored.
            """
            return "ok"

        return execute

    return noop_serial(), noop_parallel()


def _measure(execute_tools: Any, user: Any, assistant: Any, tool_call: Any, tool: Any, prefix: str,
             reps: int, wrap: Callable[[], Any] | None = None) -> dict[str, float]:
    serial, parallel = _noop_factories(tool, prefix)

    def runner(name: str, tools: list[Any]) -> Callable[[], Any]:
        calls = [tool_call(id=f"c{i}", function=name, arguments={"x": i}) for i in range(CALLS)]
        messages = [user(content="go"), assistant(content="", tool_calls=calls)]

        async def once() -> None:
            if wrap is not None:
                with wrap():
                    result = await execute_tools(messages, tools)
            else:
                result = await execute_tools(messages, tools)
            assert len(result.messages) == CALLS

        return once

    return {
        "serial_us_per_call": _timed(runner(f"{prefix}noop_serial", [serial]), reps),
        "parallel_us_per_call": _timed(runner(f"{prefix}noop_parallel", [parallel]), reps),
    }


def measure_toolfleet(reps: int) -> dict[str, float]:
    from orchestrator.log import Transcript, bind_transcript
    from orchestrator.model import ChatMessageAssistant, ChatMessageUser, execute_tools
    from orchestrator.tool import ToolCall, tool

    return _measure(execute_tools, ChatMessageUser, ChatMessageAssistant, ToolCall, tool, "bench_", reps,
                    wrap=lambda: bind_transcript(Transcript()))


def measure_inspect(reps: int) -> dict[str, float]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, execute_tools
    from inspect_ai.tool import ToolCall, tool

    return _measure(execute_tools, ChatMessageUser, ChatMessageAssistant, ToolCall, tool, "bench_", reps)


if __name__ == "__main__":
    print(json.dumps(measure_inspect(int(sys.argv[2]) if len(sys.argv) > 2 else 20)))
