"""``bash`` and ``python`` on every driver, through the executor."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.tool import ToolDef
from orchestrator.tool._tools import bash, python

from .helpers import call, ok

pytestmark = pytest.mark.timeout(120)


def test_options_and_descriptions():
    assert ToolDef(bash()).parallel and ToolDef(python()).parallel
    assert "time out after 45 seconds" in ToolDef(bash(timeout=45)).description
    assert "time out after 7 seconds" in ToolDef(python(timeout=7)).description
    assert "time out" not in ToolDef(bash()).description
    assert ToolDef(bash()).parameters.required == ["cmd"]
    assert ToolDef(python()).parameters.required == ["code"]


async def test_bash_result_is_stderr_then_stdout_and_nonzero_is_not_an_error(env):
    assert await ok(env, bash(), cmd="echo out; echo err >&2; exit 3") == "err\n\nout\n"
    assert await ok(env, bash(), cmd="echo only") == "only\n"


async def test_bash_is_a_login_shell(env):
    assert await ok(env, bash(), cmd="shopt -q login_shell && echo login") == "login\n"


async def test_python_runs_code_from_stdin(env):
    code = "import sys\nprint('a' * 3)\nprint('warn', file=sys.stderr)\nraise SystemExit(4)"
    assert await ok(env, python(), code=code) == "warn\n\naaa\n"
    result = await ok(env, python(), code="1/0")
    assert "ZeroDivisionError" in result


async def _count(env, marker: str) -> int:
    result = await env.exec(["sh", "-c", f"ps -eo args | grep -c '^sleep {marker}' || true"])
    return int(result.stdout.strip() or 0)


async def test_tool_timeout_kills_the_group_and_keeps_partial_output(env):
    outcome = await call(env, bash(timeout=1), cmd="echo partial; sleep 1000.61 & wait")
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert outcome.result == "partial\n"
    for _ in range(50):  # bounded: the group's kill reaches the background sleep
        if not await _count(env, "1000.61"):
            break
        await asyncio.sleep(0.1)
    assert await _count(env, "1000.61") == 0


async def test_per_call_timeout_stops_the_work(env):
    outcome = await call(env, bash(), timeout=1, cmd="sleep 1000.62 & wait")
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert outcome.error.message == "Tool 'bash' timed out after 1 seconds."
    for _ in range(50):
        if not await _count(env, "1000.62"):
            break
        await asyncio.sleep(0.1)
    assert await _count(env, "1000.62") == 0


async def test_python_timeout(env):
    outcome = await call(env, python(timeout=1), code="import time\nprint('x', flush=True)\ntime.sleep(100)")
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert outcome.result == "x\n"


async def test_truncation_is_reported(env):
    result = await ok(env, bash(), cmd="head -c 20000000 /dev/zero | tr '\\0' a")
    assert result.endswith("[output truncated: a stream exceeded the sandbox's per-command output cap]")


async def test_parallel_calls_share_the_sandbox(env):
    results = await asyncio.gather(*(ok(env, bash(), cmd=f"echo {i} > f{i}; cat f{i}") for i in range(6)))
    assert results == [f"{i}\n" for i in range(6)]


async def test_user_argument(env):
    me = (await ok(env, bash(), cmd="id -un")).strip()
    assert (await ok(env, bash(user=me), cmd="id -un")).strip() == me


async def test_python_tool_calls_take_a_warm_spare(env):
    """The tool's command is exactly the form the exec agent keeps warm (see test_warm.py)."""
    await ok(env, python(), code="pass")

    async def spares() -> set[int]:
        listing = await env.exec(["ps", "-eo", "pid=,args="])
        return {int(line.split()[0]) for line in listing.stdout.splitlines() if line.split()[1:] == ["python3", "-"]}

    for _ in range(100):  # bounded: spares start when the agent is idle
        if len(await spares()) >= 2:
            break
        await asyncio.sleep(0.1)
    spares_before = await spares()
    assert len(spares_before) == 2
    pid = int(await ok(env, python(), code="import os; print(os.getpid())"))
    assert pid in spares_before
