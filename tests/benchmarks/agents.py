"""Many concurrent scripted react samples in one process: wall time, turns/s, peak RSS, event-loop lag.

Each sample is a ``react`` agent driven by the scripted model: ``--turns`` turns of ``--calls``
parallel trivial tool calls (executed in-process, embedded mode), then a submit. Every sample has
its own transcript and usage scope, as the eval runner gives it. Each N runs in a fresh subprocess
so the peak RSS reported is that N's alone.

Targets: 5,000 concurrent samples in one process, peak RSS <= 1.2 GB, event-loop lag
p99 <= 10 ms and max <= 250 ms. ``TOOLFLEET_LOOP_WATCHDOG=<ms>`` prints, on stderr, the stacks that
kept the loop busy for longer than that and the garbage collector's pauses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import time
from typing import Any

LAG_INTERVAL = 0.01  # seconds between event-loop lag probes
# Thousands of samples are concurrent because each waits on its model most of the time: a mean of
# 10 s per turn is typical of agentic LLM turns. With an instant model every sample is runnable at
# once and loop lag is N x the cost of one step whatever the design, so that is a throughput run.
DEFAULT_LATENCY = 10.0
DEFAULT_RAMP = 2.0
CHILD_TIMEOUT = 1800.0  # bound on one N's subprocess
ANSWER = "done"  # what every sample submits
WATCHDOG_ENV = "TOOLFLEET_LOOP_WATCHDOG"  # orchestrator.util._loop_watchdog.ENV_VAR (kept import-free here)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, nargs="+", default=[1000, 5000],
                        help="concurrent samples (one run per N)")
    parser.add_argument("--turns", type=int, default=10, help="tool-calling turns per sample (a submit turn follows)")
    parser.add_argument("--calls", type=int, default=2, help="parallel tool calls per turn")
    parser.add_argument("--latency", type=float, default=DEFAULT_LATENCY,
                        help="mean scripted-model latency in seconds (uniform +-50%%); 0 answers at once "
                             "(CPU-bound: measures throughput, and lag is then N x one step by construction)")
    parser.add_argument("--ramp", type=float, default=DEFAULT_RAMP,
                        help="seconds over which the N samples start (as an eval runner admits them)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for n in args.samples:
        runs.append(await _run_child(n, args.turns, args.calls, args.latency, args.ramp))
    return {"workload": "agents", "turns": args.turns, "calls_per_turn": args.calls,
            "model_latency_s": args.latency, "ramp_s": args.ramp, "runs": runs}


async def _run_child(samples: int, turns: int, calls: int, latency: float, ramp: float) -> dict[str, Any]:
    from tests.support.fleet import REPO_ROOT, child_env, python

    proc = await asyncio.create_subprocess_exec(
        *python("-m", "tests.benchmarks.agents", str(samples), str(turns), str(calls), str(latency), str(ramp)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO_ROOT, env=child_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=CHILD_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"agents bench: N={samples} did not finish within {CHILD_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"agents bench: N={samples} failed:\n{err.decode(errors='replace')[-4000:]}")
    if os.environ.get(WATCHDOG_ENV):  # the child's loop watchdog report
        print(err.decode(errors="replace"), file=sys.stderr, end="")
    return json.loads(out.decode().strip().splitlines()[-1])


# -- the measured process --------------------------------------------------------------------------


def _bench_tool() -> Any:
    from orchestrator.tool import tool

    @tool(name="bench_noop", parallel=True)
    def bench_noop() -> Any:
        async def execute(i: int) -> str:
            """Return ok.

            Args:
                i: Index of the call.
            """
            return "ok"

        return execute

    return bench_noop()


def _policy(turns: int, calls: int, latency: float) -> Any:
    from orchestrator.model import ChatMessageAssistant, ModelOutput, ModelUsage
    from orchestrator.tool import ToolCall

    usage = ModelUsage(input_tokens=100, output_tokens=20, total_tokens=120)

    rng = random.Random(0)

    async def slow_policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
        # A real model keeps a sample waiting; only then are thousands of samples truly concurrent.
        await asyncio.sleep(rng.uniform(0.5 * latency, 1.5 * latency))
        return policy(messages, tools)

    def policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
        done = sum(1 for m in messages if isinstance(m, ChatMessageAssistant))
        if done < turns:
            out = ModelOutput.for_tool_calls("bench", [
                ToolCall(id=f"t{done}c{i}", function="bench_noop", arguments={"i": i}) for i in range(calls)])
        else:
            out = ModelOutput.for_tool_call("bench", "submit", {"answer": ANSWER}, tool_call_id=f"t{done}s")
        out.usage = usage
        return out

    return slow_policy if latency > 0 else policy


async def _measure(samples: int, turns: int, calls: int, latency: float = 0.0, ramp: float = 0.0) -> dict[str, Any]:
    from orchestrator.agent import react, run
    from orchestrator.log import Transcript, bind_transcript
    from orchestrator.model import get_model, usage_scope

    model = get_model("scripted", policy=_policy(turns, calls, latency))
    api: Any = model.api  # the scripted provider counts its calls
    tool = _bench_tool()
    agent = react(tools=[tool], model=model)
    completed: list[int] = []

    async def sample(i: int) -> None:
        if ramp > 0:
            await asyncio.sleep(ramp * i / samples)
        with bind_transcript(Transcript()), usage_scope(f"sample-{i}"):
            state = await run(agent, f"sample {i}")
        # react joins the answer to the submit turn's text (answer_delimiter): the answer ends it.
        if not state.output.completion.endswith(ANSWER):
            raise RuntimeError(f"sample {i} ended without its answer: {state.output.completion!r}")
        completed.append(api.calls)

    lags: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            t0 = loop.time()
            await asyncio.sleep(LAG_INTERVAL)
            lags.append(max(0.0, loop.time() - t0 - LAG_INTERVAL))

    from orchestrator.util._loop_watchdog import watchdog_from_env

    watchdog = watchdog_from_env()  # TOOLFLEET_LOOP_WATCHDOG=<ms>: stacks of the stalls, on stderr
    prober = asyncio.create_task(probe())
    start = time.perf_counter()
    cpu_start = time.process_time()
    await asyncio.gather(*(sample(i) for i in range(samples)))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    stop.set()
    await prober
    if watchdog is not None:
        watchdog.stop()
        watchdog.report()
    generations = api.calls
    lags.sort()
    return {
        "samples": samples,
        "wall_s": round(wall, 3),
        "turns_per_s": round(generations / wall, 1),  # model turns (tool turns + the submit turn)
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "loop_lag_p99_ms": round(_percentile(lags, 0.99) * 1000, 2),
        "loop_lag_max_ms": round((lags[-1] if lags else 0.0) * 1000, 2),
        "loop_lag_median_ms": round(statistics.median(lags) * 1000, 2) if lags else 0.0,
        "cpu_s": round(cpu, 3),  # the machine may be shared: CPU time is the steadier cost figure
        "cpu_ms_per_turn": round(cpu / generations * 1000, 3),
        "tool_calls": samples * turns * calls,
    }


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


if __name__ == "__main__":
    n, t, c = (int(a) for a in sys.argv[1:4])
    lat = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    ramp_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    from orchestrator.util import tune_gc_for_many_samples

    tune_gc_for_many_samples()  # as `toolfleet eval` does
    print(json.dumps(asyncio.run(_measure(n, t, c, lat, ramp_s))))
