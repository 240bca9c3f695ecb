"""Sandbox → host, the exec agent (issues 10.6 and 10.7): commands that kill processes, carry bytes no
process can take, run out of memory or print without end each cost at most that call — the model
sees a result or an error, the agent comes back, and the next call works."""

from __future__ import annotations

import json

import pytest

from orchestrator.tool._tools import bash, python
from tests.sandbox.fixtures import sandbox_factory  # noqa: F401  (fixture)
from tests.tools.helpers import call
from workers.sandbox import CommandOutOfMemoryError, ExecAgentLostError
from workers.sandbox._channel import RUN, U32

pytestmark = pytest.mark.docker


async def _still_works(env) -> None:
    assert (await env.exec(["echo", "next"])).stdout == "next\n"
    outcome = await call(env, bash(), cmd="echo tool-next")
    assert (outcome.error, outcome.result) == (None, "tool-next\n")


@pytest.mark.parametrize("cmd", ["kill -9 -1", "pkill -9 python3", "pkill -9 -u $(id -u)"])
async def test_killing_everything_is_a_model_visible_error_and_the_sample_goes_on(sandbox_factory, cmd):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    outcome = await call(env, bash(timeout=60), cmd=f"{cmd}; sleep 5")
    assert outcome.fatal is None
    assert outcome.error is not None and outcome.error.type == "unknown"
    assert "exec agent was killed" in outcome.error.message and "next command runs normally" in outcome.error.message
    await _still_works(env)


async def test_killing_the_agent_again_and_again_never_ends_the_sandbox(sandbox_factory):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    for _ in range(5):
        with pytest.raises(ExecAgentLostError):
            await env.exec(["sh", "-c", "kill -9 -1; sleep 5"], timeout=60)
    await _still_works(env)


@pytest.mark.parametrize(("tool", "arg", "text"), [
    (bash, "cmd", "echo a\x00b"),
    (bash, "cmd", "echo \ud83d"),
    (python, "code", "print('\ud83d')"),
])
async def test_unencodable_commands_are_parsing_errors(sandbox_factory, tool, arg, text):  # noqa: F811 - the imported fixture
    """In-process (embedded) the arguments reach the tool as the model wrote them (the wire itself
    cannot carry a lone surrogate): the sandbox layer turns them into a parsing error."""
    import uuid

    from orchestrator._wire import CallRequest
    from orchestrator.tool._registry import tool_meta
    from workers.executor import execute_call

    env = await sandbox_factory("docker")
    instance = tool()
    meta = tool_meta(instance)
    request = CallRequest(call_id=uuid.uuid4().hex, function=meta.name, tool=meta.ref, arguments={arg: text},
                          sandbox=env.sandbox_id)
    outcome = await execute_call(request, tool=instance, env=env)
    assert outcome.fatal is None
    assert outcome.error is not None and outcome.error.type == "parsing", outcome.error
    await _still_works(env)


@pytest.mark.parametrize("argv", [["echo", "a\x00b"], ["echo", "\ud83d"], ["echo", 7], "echo", []])
async def test_the_agent_itself_survives_a_request_no_process_can_take(sandbox_factory, argv):  # noqa: F811 - the imported fixture
    """Past the host's checks (a hostile or buggy host side): the agent answers with an error."""
    env = await sandbox_factory("docker")
    channel = await env._channel(None)
    spec = json.dumps({"argv": argv, "cwd": None, "env": None, "timeout": 30, "cap": 4096, "input": False}).encode()
    _kind, body = await channel._request(RUN, U32.pack(len(spec)) + spec, 60, frame_limit=1 << 16)
    (jlen,) = U32.unpack_from(body)
    status = json.loads(body[4 : 4 + jlen])
    assert status["returncode"] == 126 and status["error"]
    assert b"toolfleet exec agent" in body[4 + jlen :]
    assert not channel.closed
    await _still_works(env)


async def test_running_into_the_memory_limit_is_named_with_the_limit(sandbox_factory):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker", mem_limit="96m")
    hog = "x = bytearray(512 * 1024 * 1024); print('survived')"
    with pytest.raises(CommandOutOfMemoryError, match=r"OOM killer.*memory limit 96m"):
        await env.exec(["python3", "-c", hog], timeout=60)
    outcome = await call(env, python(timeout=60), code=hog)
    assert outcome.fatal is None and outcome.error is not None
    assert outcome.error.type == "unknown"
    assert "Out of memory" in outcome.error.message and "96m" in outcome.error.message
    await _still_works(env)


async def test_a_500_mb_print_is_captured_as_head_and_tail_within_the_cap(sandbox_factory):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    cap = env.output_cap
    assert cap <= 1024 * 1024
    script = "head -c 1000 /dev/zero | tr '\\0' H; head -c 500000000 /dev/zero; head -c 1000 /dev/zero | tr '\\0' T"
    raw = await env.exec_raw(["bash", "-c", script], timeout=300)
    assert raw.returncode == 0 and raw.truncated
    assert len(raw.stdout) < cap + 100
    assert raw.stdout.startswith(b"H" * 1000) and raw.stdout.endswith(b"T" * 1000)
    assert b"bytes omitted ...]" in raw.stdout
    # The agent never held more than its caps: its peak resident size stays far below what was printed.
    pid = env._channels[None].info["pid"]
    status = (await env.exec(["cat", f"/proc/{pid}/status"])).stdout
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
    assert peak_kb < 64 * 1024, status
    outcome = await call(env, bash(timeout=300), cmd="yes | head -c 500000000")
    assert outcome.error is None and isinstance(outcome.result, str)
    assert len(outcome.result.encode()) < 2 * cap + 1000 and "[output truncated" in outcome.result
