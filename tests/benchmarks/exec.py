"""``toolfleet bench exec``: tool-call round trips into one docker sandbox, against ``docker exec``.

Measured in one run, on the same container:
- ``p50_ms``/``p99_ms``: sequential ``bash`` tool calls running ``true`` through
  ``workers.executor.execute_call`` (what the in-process dispatcher awaits), over ``calls`` calls;
- ``calls_per_s``: the same calls with ``concurrency`` in flight;
- ``acquire_p50_ms``: ``create()`` from a warm pool; ``cold_start_p50_ms``: ``create()`` with no pool
  (container create + start + exec agent hello);
- ``exec_true_p50_ms``: ``env.exec(["true"])`` with no bash and no tool layer: the channel's own cost;
- ``spawn_floor_p50_ms``: the same command spawned from inside the sandbox with no channel at all,
  back to back, in blocks alternating with the calls' (so both see the same load); ``vs_spawn_floor``
  is ``p50_ms`` over it;
- ``in_sandbox_p50_ms``: the same command through ``env.exec_raw`` (no tool layer), timed by the
  agent from taking up the request to its result; ``channel_p50_ms`` is each such call's round trip
  minus its in-sandbox time: what the channel and the host add to a call, whatever the spawn costs.
  On a storage driver such as fuse-overlayfs a spawn that follows a pause (any round trip) is slower
  than one right after another, so the back-to-back floor is below what any channel can reach;
  ``vs_in_sandbox`` (``p50_ms`` over ``in_sandbox_p50_ms``) compares like with like;
- ``channel``: how the calls reached the agent — ``unix`` (its socket, direct) or ``stream`` (the exec stream, through
the daemon);
- ``baseline``: the same command (``bash --login -c true``, same user) as one ``docker exec`` per
  call through the Engine API (exec_create + exec_start + exec_inspect), same counts;
- ``python``: ``python`` tool calls (``print(1)``) through the executor: ``warm_p50_ms`` with the
  agent's warm spares and ``THINK_S`` between calls (a model's turn; the spare is replaced
  meanwhile), ``back_to_back_p50_ms`` with no pause, ``cold_p50_ms`` with spares disabled.
  ``bash`` calls are never warm (a deferred command string cannot behave exactly like
  ``bash --login -c CMD``; see ``workers/sandbox/_agent/agent.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator._wire import CallRequest
from orchestrator.tool._registry import tool_meta
from orchestrator.tool._tools import bash, python
from workers.executor import execute_call
from workers.sandbox import DEFAULT_IMAGE, DockerSandboxConfig, SandboxRequest, build_driver

# The floor: spawning the same command from inside the sandbox, no channel at all (same container,
# same limits). It tells what part of p50 is the process spawn itself on this machine. Prints every
# spawn's seconds (the blocks are pooled).
_FLOOR = """
import os, time
ts = []
for _ in range({n}):
    t = time.perf_counter()
    pid = os.posix_spawnp("bash", ["bash", "--login", "-c", "true"], os.environ)
    os.waitpid(pid, 0)
    ts.append(time.perf_counter() - t)
print(" ".join(repr(t) for t in ts))
"""
COLD_STARTS = 5
ACQUIRES = 10
WARMUP = 20
BLOCK = 50
THINK_S = 0.1
PYTHON_CALLS = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=300, help="calls per measurement (p50/p99 and calls/s)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight for calls/s")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="sandbox image (build: toolfleet setup images)")
    parser.add_argument("--cpus", type=float, default=DockerSandboxConfig().cpus, help="the sandbox's CPU limit")


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


async def _latencies(one: Callable[[], Awaitable[None]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await one()
        out.append(time.perf_counter() - start)
    return out


async def _throughput(one: Callable[[], Awaitable[None]], n: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def guarded() -> None:
        async with gate:
            await one()

    start = time.perf_counter()
    await asyncio.gather(*(guarded() for _ in range(n)))
    return round(n / (time.perf_counter() - start), 1)


def _figures(lat: list[float], calls_per_s: float) -> dict[str, Any]:
    return {"p50_ms": _ms(lat, 0.5), "p99_ms": _ms(lat, 0.99), "calls_per_s": calls_per_s, "calls": len(lat)}


async def run(args: argparse.Namespace | int | None = None, concurrency: int = 16, *, calls: int = 300,
              image: str = DEFAULT_IMAGE, cpus: float | None = None) -> dict[str, Any]:
    if isinstance(args, argparse.Namespace):
        calls, concurrency, image, cpus = args.calls, args.concurrency, args.image, args.cpus
    elif isinstance(args, int):
        calls = args
    cpus = DockerSandboxConfig().cpus if cpus is None else cpus

    # Cold start: no pool, so create() pays for container create + start + agent hello.
    cold_driver: Any = build_driver(DockerSandboxConfig(image=image, pool_size=0, cpus=cpus))  # the Docker driver
    cold: list[float] = []
    try:
        await cold_driver.start()
        for i in range(COLD_STARTS):
            start = time.perf_counter()
            env = await cold_driver.create(SandboxRequest(eval_id="bench", sample_id=f"cold-{i}"))
            cold.append(time.perf_counter() - start)
            await cold_driver.destroy(env)
    finally:
        await cold_driver.aclose()

    driver: Any = build_driver(DockerSandboxConfig(image=image, pool_size=2, max_sandboxes=ACQUIRES + 4, cpus=cpus))
    try:
        await driver.start()
        acquire: list[float] = []
        for i in range(ACQUIRES):
            await driver.pool.wait_full(120)
            start = time.perf_counter()
            env = await driver.create(SandboxRequest(eval_id="bench", sample_id=f"warm-{i}"))
            acquire.append(time.perf_counter() - start)
            if i < ACQUIRES - 1:
                await driver.destroy(env)

        fast = _tool_call(env, bash(), "bash", {"cmd": "true"}, expect="")

        api = driver.api.api
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-docker-exec")
        loop = asyncio.get_running_loop()

        def docker_exec() -> None:
            exec_id = api.exec_create(env.container_id, ["bash", "--login", "-c", "true"], user=driver.exec_user)["Id"]
            api.exec_start(exec_id)
            for _ in range(100):  # the exit code can trail the end of the stream slightly
                code = api.exec_inspect(exec_id)["ExitCode"]
                if code is not None:
                    break
                time.sleep(0.005)
            if code != 0:
                raise RuntimeError(f"baseline docker exec failed ({code})")

        async def baseline_one() -> None:
            await loop.run_in_executor(pool, docker_exec)

        try:
            await _latencies(fast, WARMUP)
            await _latencies(baseline_one, 5)
            # Alternating blocks: on a shared machine all see the same background load, while a
            # docker exec's teardown (runc, shim) rarely overlaps a fast-path call.
            fast_lat, base_lat, floor_lat = [], [], []
            raw_lat: list[float] = []
            split: list[tuple[float, float]] = []  # (in-sandbox, channel) seconds of each raw call
            raw = _raw_call(env, raw_lat, split)
            await _latencies(raw, 5)
            raw_lat.clear()
            split.clear()
            for done in range(0, calls, BLOCK):
                n = min(BLOCK, calls - done)
                fast_lat += await _latencies(fast, n)
                await _latencies(raw, n)
                floor_lat += await _floor(env, n)
                await asyncio.sleep(0.2)
                base_lat += await _latencies(baseline_one, n)
                await asyncio.sleep(0.2)
            fast_rate = await _throughput(fast, calls, concurrency)
            base_rate = await _throughput(baseline_one, calls, concurrency)
            async def bare_true() -> None:
                await env.exec(["true"])

            bare_lat = await _latencies(bare_true, calls)
            channel = env._channels[None].transport  # "unix" (direct) or "stream" (through the daemon)
            py = await _python_figures(env, min(calls, PYTHON_CALLS))
        finally:
            pool.shutdown(wait=False)
    finally:
        await driver.aclose()

    ours = _figures(fast_lat, fast_rate)
    floor_p50 = _ms(floor_lat, 0.5)
    in_sandbox_p50 = _ms([s for s, _ in split], 0.5) if split else None
    baseline = {"workload": "exec", "implementation": "docker exec (Engine API)", **_figures(base_lat, base_rate)}
    return {
        "workload": "exec",
        **ours,
        "concurrency": concurrency,
        "sandbox_cpus": cpus,
        "channel": channel,
        "acquire_p50_ms": _ms(acquire, 0.5),
        "cold_start_p50_ms": _ms(cold, 0.5),
        "speedup_p50": round(baseline["p50_ms"] / ours["p50_ms"], 1) if ours["p50_ms"] else None,
        "exec_true_p50_ms": _ms(bare_lat, 0.5),
        "spawn_floor_p50_ms": floor_p50,
        "vs_spawn_floor": round(ours["p50_ms"] / floor_p50, 3) if floor_p50 else None,
        "in_sandbox_p50_ms": in_sandbox_p50,
        "vs_in_sandbox": round(ours["p50_ms"] / in_sandbox_p50, 3) if in_sandbox_p50 else None,
        "raw_exec_p50_ms": _ms(raw_lat, 0.5),
        "channel_p50_ms": _ms([c for _, c in split], 0.5) if split else None,
        "mean_ms": round(statistics.fmean(fast_lat) * 1000, 3),
        "python": py,
        "baseline": baseline,
    }


async def _floor(env: Any, n: int) -> list[float]:
    """``n`` back-to-back spawns of the command inside the sandbox (no channel): their seconds."""
    result = await env.exec(["python3", "-c", _FLOOR.format(n=n)], timeout=300)
    if not result.success:
        raise RuntimeError(f"bench floor failed: {result.stderr[-500:]}")
    return [float(t) for t in result.stdout.split()]


def _raw_call(env: Any, lat: list[float], split: list[tuple[float, float]]) -> Callable[[], Awaitable[None]]:
    """One ``exec_raw`` of the command (no tool layer), keeping its round trip and, when the agent
    reports it, its (in-sandbox, channel) split."""

    async def one() -> None:
        start = time.perf_counter()
        raw = await env.exec_raw(["bash", "--login", "-c", "true"])
        round_trip = time.perf_counter() - start
        lat.append(round_trip)
        if raw.returncode != 0:
            raise RuntimeError(f"bench exec failed ({raw.returncode}): {raw.stderr[-500:]!r}")
        if raw.agent_seconds is not None:
            split.append((raw.agent_seconds, round_trip - raw.agent_seconds))

    return one


def _tool_call(env: Any, tool: Any, function: str, arguments: dict[str, Any],
               expect: str) -> Callable[[], Awaitable[None]]:
    """One call of ``tool`` through the executor into ``env``, checked against its expected result."""
    ref = tool_meta(tool).ref  # type: ignore[union-attr]

    async def one() -> None:
        request = CallRequest(call_id=uuid.uuid4().hex, function=function, tool=ref, arguments=arguments,
                              sandbox=env.sandbox_id)
        outcome = await execute_call(request, tool=tool, env=env)
        if outcome.error is not None or outcome.fatal is not None or outcome.result != expect:
            raise RuntimeError(f"bench call failed: {outcome}")

    return one


async def _python_figures(env: Any, n: int) -> dict[str, Any]:
    one = _tool_call(env, python(), "python", {"code": "print(1)"}, expect="1\n")

    figures: dict[str, Any] = {"calls": n, "think_s": THINK_S}
    for name, spares in (("cold_p50_ms", 0), ("warm_p50_ms", env.warm_spares)):
        env.warm_spares = spares
        await one()  # the first call with a (cwd, env) starts that key's spares
        lat: list[float] = []
        for _ in range(n):
            await asyncio.sleep(THINK_S)  # the model's turn: not timed
            start = time.perf_counter()
            await one()
            lat.append(time.perf_counter() - start)
        figures[name] = _ms(lat, 0.5)
        figures[name.replace("p50", "p99")] = _ms(lat, 0.99)
    figures["back_to_back_p50_ms"] = _ms(await _latencies(one, n), 0.5)
    figures["speedup_p50"] = round(figures["cold_p50_ms"] / figures["warm_p50_ms"], 1)
    return figures


if __name__ == "__main__":  # python -m tests.benchmarks.exec [--calls N --concurrency N --cpus N]
    import json

    cli = argparse.ArgumentParser(prog="python -m tests.benchmarks.exec")
    add_arguments(cli)
    print(json.dumps(asyncio.run(run(cli.parse_args()))))
