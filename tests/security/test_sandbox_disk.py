"""Sandbox → host, disk and files (SECURITY.md): a sandbox cannot fill the host's disk, the editor
never reads a device or follows a relative path, and every call has a deadline."""

from __future__ import annotations

import asyncio

import docker
import pytest

import workers.executor
from orchestrator.tool._tools import bash, text_editor
from tests.sandbox.fixtures import sandbox_factory  # noqa: F401  (fixture)
from tests.tools.helpers import call

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("where", ["$HOME", "/tmp", "/var/tmp"])
async def test_filling_the_disk_is_enospc_in_the_sandbox_only(sandbox_factory, where):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker", disk_limit="64m", mem_limit="512m")
    assert env.driver.disk.mechanism in ("storage_opt", "tmpfs")
    fill = f"dd if=/dev/zero of={where}/fill bs=1M count=200 2>&1; echo rc=$?"
    result = await env.exec(["bash", "-c", fill], timeout=120)
    assert "No space left on device" in result.stdout and "rc=0" not in result.stdout
    # The host's disk did not take the write: the container's own layer stayed small.
    [listed] = docker.from_env(timeout=30).api.containers(all=True, filters={"id": env.container_id}, size=True)
    size_rw = listed.get("SizeRw") or 0
    assert size_rw < 32 * 1024 * 1024
    # Only the sandbox is affected: freeing space makes it usable again.
    assert (await env.exec(["bash", "-c", f"rm {where}/fill && echo freed"])).stdout == "freed\n"


async def test_the_capped_home_keeps_the_images_files(sandbox_factory):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    listing = (await env.exec(["bash", "--login", "-c", "ls -A ~; touch ~/mine && echo writable"])).stdout
    assert ".profile" in listing and "writable" in listing


async def test_the_capped_home_keeps_the_images_files_for_another_configured_user(sandbox_factory):  # noqa: F811 - the imported fixture
    # Root without capabilities may not write in the image user's home: its owner unpacks the files.
    env = await sandbox_factory("docker", user="root")
    listing = (await env.exec(["ls", "-A", "/home/sandbox"])).stdout
    assert ".profile" in listing and (await env.exec(["id", "-u"])).stdout == "0\n"


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/tmp/zero-link", "/tmp/fifo"])
async def test_the_editor_refuses_non_regular_files(sandbox_factory, path):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    await env.exec(["sh", "-c", "ln -sf /dev/zero /tmp/zero-link; mkfifo /tmp/fifo"])
    for command, args in (("view", {}), ("str_replace", {"old_str": "a", "new_str": "b"}),
                          ("insert", {"insert_line": 0, "new_str": "x"}), ("create", {"file_text": "x"})):
        outcome = await call(env, text_editor(timeout=120), command=command, path=path, **args)
        assert outcome.fatal is None and outcome.error is not None, (command, outcome.result)
        assert outcome.error.type == "unknown", (command, outcome.error)
        assert "not a regular file" in outcome.error.message or "already exists" in outcome.error.message


@pytest.mark.parametrize("path", ["notes.txt", "./notes.txt", "../etc/passwd", "~/notes.txt", ""])
async def test_the_editor_refuses_relative_paths(sandbox_factory, path):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    for command, args in (("view", {}), ("create", {"file_text": "x"})):
        outcome = await call(env, text_editor(), command=command, path=path, **args)
        assert outcome.error is not None and "not an absolute path" in outcome.error.message
    assert "notes.txt" not in (await env.exec(["ls", "-A"])).stdout  # nothing was written anywhere


async def test_a_call_without_a_timeout_still_has_a_deadline(sandbox_factory, monkeypatch):  # noqa: F811 - the imported fixture
    """Embedded mode: a tool without ``timeout`` gets the default deadline (shortened here to run fast),
    and its command is killed, not just abandoned."""
    env = await sandbox_factory("docker")
    monkeypatch.setattr(workers.executor, "DEFAULT_CALL_DEADLINE", 2.0)
    outcome = await call(env, bash(), cmd="echo started > /tmp/marker; sleep 600")
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert "timed out after 2 seconds" in outcome.error.message
    ps = ""
    for _ in range(100):
        ps = (await env.exec(["sh", "-c", "ps -eo args | grep -c '^sleep 600' || true"])).stdout.strip()
        if ps == "0":
            break
        await asyncio.sleep(0.05)
    assert ps == "0"


async def test_the_editor_refuses_a_huge_file_before_reading_it(sandbox_factory):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    await env.exec(["truncate", "-s", "2G", "/tmp/huge"])  # sparse: no space used, 2 GiB to read
    outcome = await call(env, text_editor(timeout=120), command="view", path="/tmp/huge")
    assert outcome.error is not None and "too large for the editor" in outcome.error.message
