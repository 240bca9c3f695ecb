"""``toolfleet bench review``: what tool-result review adds to each call (in-process, embedded mode).

Turns of ``--calls`` trivial calls (serial, and parallel), median µs per call, for: no review policy;
one reviewer that continues; a chain of three (escalate, escalate, continue — the common "model
reviewer, then human" shape with nobody escalating for real). The difference to the first column is
the review cost per call: the policy walk, the reviewer's span and uncharged usage scope, the
``ReviewEvent``, and (parallel stages) a finishing task per call so reviews run concurrently.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=100, help="calls per turn")
    parser.add_argument("--reps", type=int, default=30, help="turns measured per configuration (median reported)")


def _measure(calls: int, reps: int) -> dict[str, Any]:
    from orchestrator.log import Transcript, bind_transcript
    from orchestrator.model import ChatMessageAssistant, ChatMessageUser, execute_tools
    from orchestrator.review import Review, ReviewPolicy
    from orchestrator.tool import ToolCall, tool

    @tool(name="bench_review_serial")
    def serial() -> Any:
        async def execute(x: int) -> str:
            """Return ok.

            Args:
                x: ignored.
            """
            return "ok"

        return execute

    @tool(name="bench_review_parallel", parallel=True)
    def parallel() -> Any:
        async def execute(x: int) -> str:
            """Return ok.

            Args:
                x: ignored.
            """
            return "ok"

        return execute

    def decide(decision: str) -> Any:
        async def review(message: str, call: Any, result: Any, output: Any, view: Any, history: Any) -> Review:
            return Review(decision=decision)

        return review

    policies: dict[str, list[ReviewPolicy] | None] = {
        "none": None,
        "continue": [ReviewPolicy(decide("continue"))],
        "chain3": [ReviewPolicy(decide("escalate")), ReviewPolicy(decide("escalate")),
                   ReviewPolicy(decide("continue"))],
    }

    def turn(name: str) -> list[Any]:
        tool_calls = [ToolCall(id=f"c{i}", function=name, arguments={"x": i}) for i in range(calls)]
        return [ChatMessageUser(content="go"), ChatMessageAssistant(content="", tool_calls=tool_calls)]

    async def timed(messages: list[Any], tools: list[Any], review: Any) -> float:
        samples = []
        for i in range(reps + 1):
            with bind_transcript(Transcript()):
                t0 = time.perf_counter()
                result = await execute_tools(messages, tools, review=review)
                elapsed = time.perf_counter() - t0
            assert len(result.messages) == calls
            if i:  # the first turn warms caches up
                samples.append(elapsed / calls * 1e6)
        return statistics.median(samples)

    async def main() -> dict[str, Any]:
        figures: dict[str, Any] = {}
        for mode, factory in (("serial", serial), ("parallel", parallel)):
            messages, tools = turn(f"bench_review_{mode}"), [factory()]
            for label, policy in policies.items():
                figures[f"{mode}_{label}_us_per_call"] = round(await timed(messages, tools, policy), 1)
            base = figures[f"{mode}_none_us_per_call"]
            figures[f"{mode}_review_cost_us_per_call"] = round(figures[f"{mode}_continue_us_per_call"] - base, 1)
        return figures

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Measured on a fresh loop in a thread, away from the CLI's loop (as the overhead workload does).
    figures = await asyncio.to_thread(_measure, args.calls, args.reps)
    return {"workload": "review", "calls_per_turn": args.calls, **figures}
