"""``bash(background=True)`` and long-running processes, with Inspect's semantics, on every driver.

Inspect's option changes only the model-facing description (guidance to start long work detached and
poll it, naming the timeout when one is set); the tool is otherwise the same. What makes the guidance
true is the sandbox: a command started in the background returns at once, keeps running between calls,
its output can be read later, and the call that started it stays bounded.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orchestrator.tool import ToolDef
from tests.support.waits import until
from workers.tools import bash

from .helpers import call, ok

pytestmark = pytest.mark.timeout(120)


def test_background_changes_only_the_description():
    plain, guided = ToolDef(bash()), ToolDef(bash(background=True))
    assert "background" not in plain.description
    assert "nohup" in guided.description and "$!" in guided.description and "tail" in guided.description
    assert "seconds" not in guided.description  # no timeout: none is mentioned
    assert "longer than 30 seconds is killed" in ToolDef(bash(timeout=30, background=True)).description
    # Same name, parameters and parallelism: only the words differ.
    assert guided.name == plain.name == "bash"
    assert guided.parameters.model_dump() == plain.parameters.model_dump()
    assert guided.parallel and plain.parallel


def test_background_is_a_rebuildable_parameter():
    from orchestrator.tool._registry import rebuild_tool, tool_meta

    meta = tool_meta(bash(timeout=9, background=True))
    assert meta is not None and meta.ref is not None and meta.ref.params == {"timeout": 9, "background": True}
    assert "longer than 9 seconds" in ToolDef(rebuild_tool(meta.ref)).description  # as a worker rebuilds it


async def test_a_detached_command_returns_at_once_keeps_running_and_its_output_is_readable(env):
    tool = bash(timeout=20, background=True)
    tag = uuid.uuid4().hex[:8]
    gate, log = f"/tmp/gate-{tag}", f"/tmp/job-{tag}.log"
    # The job cannot finish before this test opens its gate: a call that waited for it would end in
    # the tool's 20 s timeout (an error), never in its output.
    script = f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo tick; echo done"
    try:
        out = await ok(env, tool, cmd=f"nohup sh -c '{script}' > {log} 2>&1 & echo \"PID $!\"")
        pid = int(out.strip().split()[-1])
        assert (await ok(env, tool, cmd=f"kill -0 {pid} && echo running")).strip() == "running"  # a later call
        started = await until(lambda: ok(env, tool, cmd=f"cat {log}"), "the job's first line")
        assert started == "started\n"  # a later call reads its progress; it is not done
        await ok(env, tool, cmd=f"touch {gate}")
        done = await until(lambda: _if_done(env, tool, log), "the job to finish on its own")
        assert done.splitlines() == ["started", "tick", "done"]
        check = f"ps -o stat= -p {pid} | grep -qv Z && echo running || echo gone"  # an unreaped zombie is gone too
        for _ in range(50):
            if (await ok(env, tool, cmd=check)).strip() == "gone":
                break
            await asyncio.sleep(0.1)
        assert (await ok(env, tool, cmd=check)).strip() == "gone"
        await ok(env, tool, cmd=f"rm -f {gate} {log}")
    finally:
        await ok(env, tool, cmd=f"[ -e {log} ] && touch {gate}; true")  # a job left behind ends


async def _if_done(env, tool, log: str) -> str | None:  # type: ignore[no-untyped-def]
    text = await ok(env, tool, cmd=f"cat {log}")
    return text if "done" in text else None


async def test_a_background_child_holding_the_output_pipe_does_not_hold_the_call(env):
    # The model forgot the redirection: the child keeps the call's stdout open. The call still returns
    # (bounded: the shell has exited), with what was printed, and the child keeps running.
    pid_file = f"/tmp/bg-{uuid.uuid4().hex[:8]}.pid"
    out = await asyncio.wait_for(
        ok(env, bash(background=True), cmd=f"echo started; sleep 1000.71 & echo $! > {pid_file}"), 60)
    assert out == "started\n"
    alive = await ok(env, bash(),
                     cmd=f"kill -0 $(cat {pid_file}) && echo alive; kill $(cat {pid_file}); rm -f {pid_file}")
    assert alive.strip() == "alive"


async def test_the_timeout_still_bounds_a_foreground_command(env):
    outcome = await call(env, bash(timeout=1, background=True), cmd="echo partial; sleep 1000.72")
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert outcome.result == "partial\n"
