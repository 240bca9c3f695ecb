"""Exec semantics every driver must share (parametrised: local, docker over its direct channel, and
docker over the exec stream — the channel a worker uses when it cannot reach the container's filesystem)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import psutil
import pytest

from orchestrator.util import ExecResult, SandboxTimeoutError, SandboxUnavailableError
from workers.sandbox import registry
from workers.sandbox._driver import DEFAULT_OUTPUT_CAP

from .fixtures import DRIVERS

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=[*DRIVERS, pytest.param("docker-stream", id="docker-stream", marks=pytest.mark.docker)])
async def env(request, sandbox_factory):
    if request.param == "docker-stream":
        return await sandbox_factory("docker", direct_channel=False)
    return await sandbox_factory(request.param)


async def test_exit_codes_and_streams_kept_apart(env):
    result = await env.exec(["bash", "-c", "echo out; echo err >&2; echo out2; exit 7"])
    assert result == ExecResult(returncode=7, stdout="out\nout2\n", stderr="err\n", truncated=False)
    assert (await env.exec(["true"])).returncode == 0
    assert (await env.exec(["bash", "-c", "kill -9 $$"])).returncode == 137  # shell convention: 128 + signal


async def test_each_command_reports_its_time_in_the_sandbox(env):
    """The agent times a command from taking up its request to its result: within the round trip."""
    start = time.perf_counter()
    raw = await env.exec_raw(["sleep", "0.3"])
    round_trip = time.perf_counter() - start
    assert raw.returncode == 0
    assert raw.agent_seconds is not None and 0.3 <= raw.agent_seconds <= round_trip
    assert (await env.exec_raw(["definitely-not-a-command-xyz"])).agent_seconds is None  # never ran


async def test_missing_command_is_127(env):
    result = await env.exec(["definitely-not-a-command-xyz"])
    assert result.returncode == 127
    assert "definitely-not-a-command-xyz" in result.stderr


async def test_stdin_input_and_closed_stdin(env):
    assert (await env.exec(["cat"], input="hello\nworld")).stdout == "hello\nworld"
    data = bytes(range(256)) * 1000
    result = await env.exec_raw(["cat"], input=data)
    assert result.stdout == data
    # Without input, stdin is closed: `cat` sees EOF at once instead of hanging.
    assert (await env.exec(["cat"], timeout=20)).stdout == ""
    assert (await env.exec(["bash", "-c", "read x || echo eof"], timeout=20)).stdout == "eof\n"


async def test_cwd_and_env(env):
    await env.exec(["mkdir", "-p", "sub/dir"])
    home = (await env.exec(["pwd"])).stdout.strip()
    assert (await env.exec(["pwd"], cwd=f"{home}/sub/dir")).stdout.strip() == f"{home}/sub/dir"
    result = await env.exec(["bash", "-c", 'echo "$A|$B"'], env={"A": "1", "B": "two words"})
    assert result.stdout == "1|two words\n"
    assert "PATH" in (await env.exec(["env"], env={"X": "y"})).stdout  # env adds to, not replaces, the default


async def test_user(env):
    me = (await env.exec(["id", "-un"])).stdout.strip()
    assert (await env.exec(["id", "-un"], user=me)).stdout.strip() == me
    if me == "root" or os.geteuid() == 0:
        other = "sandbox" if me == "root" else "root"
        if (await env.exec(["id", "-u", other])).returncode == 0:
            assert (await env.exec(["id", "-un"], user=other)).stdout.strip() == other


async def test_concurrent_calls_run_concurrently(env):
    """Each call waits for all the others to have started: a serialised sandbox would time out."""
    n = 8
    tag = uuid.uuid4().hex[:8]
    script = f'touch /tmp/{tag}.$0; while [ $(ls /tmp/{tag}.* | wc -l) -lt {n} ]; do sleep 0.05; done; echo ok'
    results = await asyncio.gather(*(env.exec(["sh", "-c", script, str(i)], timeout=30) for i in range(n)))
    assert [r.stdout for r in results] == ["ok\n"] * n


def _survivors(marker: str, env) -> int:
    # Local: look at this host's processes. Docker: ask inside the container.
    return sum(1 for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or []))


async def _count_in_sandbox(env, marker: str) -> int:
    result = await env.exec(["sh", "-c", f"ps -eo args | grep -c '^sleep {marker}' || true"])
    return int(result.stdout.strip() or 0)


async def test_timeout_kills_the_whole_process_group_and_keeps_partial_output(env):
    marker = "1000.4242"
    with pytest.raises(SandboxTimeoutError) as info:
        await env.exec(["bash", "-c", f"echo partial; echo e >&2; sleep {marker} & wait"], timeout=1)
    assert info.value.stdout == "partial\n"
    assert info.value.stderr == "e\n"
    for _ in range(50):  # bounded: the group's kill reaches the background sleep
        if not await _count_in_sandbox(env, marker) and not _survivors(f"sleep {marker}", env):
            break
        await asyncio.sleep(0.1)
    assert await _count_in_sandbox(env, marker) == 0
    assert _survivors(f"sleep {marker}", env) == 0


async def test_cancelling_a_call_kills_its_process_group(env):
    marker = "1000.5353"
    task = asyncio.ensure_future(env.exec(["bash", "-c", f"sleep {marker} & wait"]))
    for _ in range(100):
        if await _count_in_sandbox(env, marker):
            break
        await asyncio.sleep(0.1)
    assert await _count_in_sandbox(env, marker) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if not await _count_in_sandbox(env, marker):
            break
        await asyncio.sleep(0.1)
    assert await _count_in_sandbox(env, marker) == 0


async def test_100_mib_of_output_is_capped_at_the_source_with_bounded_memory(env):
    me = psutil.Process()
    before = me.memory_info().rss
    result = await env.exec(["sh", "-c", "head -c 104857600 /dev/zero; echo done >&2"], timeout=120)
    grown = me.memory_info().rss - before
    assert result.truncated
    head, marker, tail = result.stdout.partition("\n[... ")
    assert marker and len(head) + len(tail.split("...]\n", 1)[1]) == DEFAULT_OUTPUT_CAP  # head and tail kept
    assert f"{104857600 - DEFAULT_OUTPUT_CAP} bytes omitted" in tail
    assert result.stderr == "done\n"  # the other stream is unaffected
    assert grown < 80 * 1024 * 1024, f"worker RSS grew by {grown / 2**20:.0f} MiB for 100 MiB of output"


async def test_binary_output(env):
    blob = bytes(range(256)) * 64 + b"\x00\x01\x02\x03\xff\xfe" * 100  # includes frame-header-like bytes
    await env.write_file("blob.bin", blob)
    raw = await env.exec_raw(["cat", "blob.bin"])
    assert raw.stdout == blob
    assert await env.read_file("blob.bin", text=False) == blob
    text = await env.exec(["cat", "blob.bin"])  # text results decode with replacement
    assert "\ufffd" in text.stdout
    with pytest.raises(UnicodeDecodeError):  # strict text where a caller asks for it
        await env.read_file("blob.bin")


async def test_files(env):
    await env.write_file("dir/a.txt", "héllo\n")
    assert await env.read_file("dir/a.txt") == "héllo\n"
    big = bytes(range(256)) * (48 * 1024)  # 12 MiB: files are not held to the per-command output cap
    await env.write_file("dir/big.bin", big)
    assert await env.read_file("dir/big.bin", text=False) == big
    with pytest.raises(FileNotFoundError):
        await env.read_file("nope.txt")
    with pytest.raises(IsADirectoryError):
        await env.read_file("dir")
    with pytest.raises(IsADirectoryError):
        await env.write_file("dir", "x")
    if (await env.exec(["id", "-u"])).stdout.strip() != "0":
        await env.exec(["sh", "-c", "echo secret > locked.txt; chmod 000 locked.txt"])
        with pytest.raises(PermissionError):
            await env.read_file("locked.txt")


async def test_registry_resolves_live_sandboxes(env, sandbox_factory):
    assert registry.get(env.sandbox_id) is env
    driver = sandbox_factory.drivers[-1]
    await driver.destroy(env)
    with pytest.raises(SandboxUnavailableError):
        registry.get(env.sandbox_id)
    with pytest.raises(SandboxUnavailableError):
        await env.exec(["true"])
    await driver.destroy(env)  # idempotent



async def test_background_processes_do_not_outlive_the_sandbox(env, sandbox_factory):
    marker = "1000.8383"
    result = await env.exec(["bash", "-c", f"sleep {marker} > /dev/null 2>&1 & echo started"], timeout=30)
    assert result.stdout == "started\n"
    assert await _count_in_sandbox(env, marker) == 1  # a backgrounded process keeps running meanwhile
    await sandbox_factory.drivers[-1].destroy(env)
    for _ in range(50):
        if not _survivors(f"sleep {marker}", env):
            break
        await asyncio.sleep(0.1)
    assert _survivors(f"sleep {marker}", env) == 0


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_a_command_gets_default_signals_even_when_its_worker_ignores_them(sandbox_factory):
    """A worker started as a background job (nohup, `&`) inherits SIGHUP/SIGINT/SIGQUIT ignored, and so
    does a local sandbox's agent: its commands still start with them at their defaults (bash_session's
    interrupt is a SIGINT), as in a fresh shell."""
    import signal

    ignored = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)}
    try:
        env = await sandbox_factory("local")  # its agent starts now, inheriting the ignores
    finally:
        for s, handler in ignored.items():
            signal.signal(s, handler)
    status = (await env.exec(["cat", "/proc/self/status"])).stdout
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    assert mask & ((1 << (signal.SIGHUP - 1)) | (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGQUIT - 1))) == 0
