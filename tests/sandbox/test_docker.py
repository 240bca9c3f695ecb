"""Docker-only behaviour against the real daemon: hardening, labels, reaper, OOM, pool, fallback."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess

import docker
import pytest
from structlog.testing import capture_logs

from orchestrator.util import SandboxTimeoutError, SandboxUnavailableError
from workers.sandbox import CommandOutOfMemoryError, ExecAgentLostError, SandboxRequest, build_driver, sandbox_config
from workers.sandbox.docker._labels import EXPIRY, MANAGED, OWNER, OWNER_PID, container_labels

from .fixtures import BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


@pytest.fixture
def client(sandbox_image):
    c = docker.from_env(timeout=60)
    yield c
    c.close()


# --- hardening probes, run from inside the sandbox -----------------------------------------------


async def test_not_root_no_caps_no_new_privs(sandbox_factory):
    env = await sandbox_factory("docker")
    assert (await env.exec(["id", "-u"])).stdout.strip() != "0"
    status = (await env.exec(["cat", "/proc/self/status"])).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert int(fields["CapEff"].strip(), 16) == 0
    assert int(fields["CapBnd"].strip(), 16) == 0  # cap-drop ALL: not even root could regain any
    assert fields["NoNewPrivs"].strip() == "1"
    # Even as root inside, the capability bounding set is empty.
    root_status = (await env.exec(["cat", "/proc/self/status"], user="root")).stdout
    assert "CapEff:\t0000000000000000" in root_status


async def test_no_network_and_no_docker_socket(sandbox_factory):
    env = await sandbox_factory("docker")
    interfaces = (await env.exec(["ls", "/sys/class/net"])).stdout.split()
    assert interfaces == ["lo"]
    probe = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)"
    assert (await env.exec(["python3", "-c", probe], timeout=30)).returncode != 0
    assert (await env.exec(["sh", "-c", "test -e /var/run/docker.sock || test -e /run/docker.sock"])).returncode != 0


async def test_pids_limit_enforced(sandbox_factory):
    env = await sandbox_factory("docker", pids_limit=40)
    result = await env.exec(
        ["bash", "-c", "for i in $(seq 80); do sleep 30 & done 2>&1; echo started"], timeout=60
    )
    assert "Resource temporarily unavailable" in result.stderr + result.stdout
    await env.exec(["pkill", "-f", "sleep 30"])


async def test_sandbox_user_cannot_kill_the_container(sandbox_factory):
    env = await sandbox_factory("docker")
    # `kill -1` also kills the exec agent (same user): that call gets a model-visible error and the
    # agent is restarted; the container (its keep-alive runs as root) survives.
    with pytest.raises(ExecAgentLostError, match="agent was restarted"):
        await env.exec(["bash", "-c", "pkill sleep; kill -9 -1"], timeout=30)
    assert (await env.exec(["echo", "alive"])).stdout == "alive\n"


async def test_memory_limit_enforced_and_reported_as_oom(sandbox_factory):
    env = await sandbox_factory("docker", mem_limit="64m")
    assert env.fast_path  # the agent itself fits in a small sandbox
    hog = "x = bytearray(256 * 1024 * 1024); print('survived')"
    with pytest.raises(CommandOutOfMemoryError, match=r"Out of memory.*memory limit 64m"):
        await env.exec(["python3", "-c", hog], timeout=60)
    assert (await env.exec(["echo", "still usable"])).stdout == "still usable\n"


async def test_container_config_and_labels(sandbox_factory, client):
    env = await sandbox_factory("docker", spec=SandboxRequest(eval_id="ev-1", sample_id="sample-7"))
    assert env.fast_path and not env._channels[None].closed  # the image has python3: the agent runs
    attrs = client.api.inspect_container(env.container_id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Init"] is True
    assert host["PidsLimit"] > 0
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] > 0
    assert not any("docker.sock" in b for b in host.get("Binds") or [])
    labels = attrs["Config"]["Labels"]
    assert labels["toolfleet.eval_id"] == "ev-1"
    assert labels["toolfleet.sample_id"] == "sample-7"
    assert labels[OWNER] and labels[EXPIRY] and labels[MANAGED] == "1"


# --- lifecycle ------------------------------------------------------------------------------------


def _leak(client, sandbox_image: str, labels: dict[str, str]) -> str:
    container = client.containers.run(sandbox_image, ["sleep", "infinity"], detach=True, labels=labels,
                                       network_mode="none")
    return container.id


def _container_ids(client) -> set[str]:
    # The low-level list: containers.list() inspects each one and races with concurrent removals.
    return {c["Id"] for c in client.api.containers(all=True)}


async def test_reaper_removes_leaked_containers(sandbox_factory, client, sandbox_image):
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = _leak(client, sandbox_image, {**container_labels("e", "s", 3600), OWNER_PID: str(dead.pid)})
    expired = _leak(client, sandbox_image, {**container_labels("e", "s", 3600), EXPIRY: "1"})
    env = await sandbox_factory("docker")  # driver start reaps
    kept = _leak(client, sandbox_image, container_labels("e", "s", 3600))  # owned by this live process
    try:
        ids = _container_ids(client)
        assert orphan not in ids and expired not in ids
        assert env.container_id in ids and kept in ids
        client.api.kill(kept)  # an exited container of ours that no driver holds goes next
        for _ in range(100):  # bounded: until Docker reports it exited
            if client.api.inspect_container(kept)["State"]["Status"] == "exited":
                break
            await asyncio.sleep(0.1)
        assert client.api.inspect_container(kept)["State"]["Status"] == "exited"
        assert await sandbox_factory.drivers[-1].reap() >= 1
        ids = _container_ids(client)
        assert kept not in ids and env.container_id in ids
    finally:
        for cid in (orphan, expired, kept):
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(cid, force=True)


async def test_reaper_runs_periodically(sandbox_factory, client, sandbox_image):
    await sandbox_factory("docker", reap_interval=0.5)
    leaked = _leak(client, sandbox_image, {**container_labels("e", "s", 3600), EXPIRY: "1"})
    try:
        for _ in range(100):
            if leaked not in _container_ids(client):
                break
            await asyncio.sleep(0.2)
        assert leaked not in _container_ids(client)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(leaked, force=True)


async def test_destroy_removes_the_container(sandbox_factory, client):
    env = await sandbox_factory("docker")
    await sandbox_factory.drivers[-1].destroy(env)
    with pytest.raises(docker.errors.NotFound):
        client.api.inspect_container(env.container_id)


async def test_container_killed_underneath_is_reported_unavailable(sandbox_factory, client):
    env = await sandbox_factory("docker")
    client.api.remove_container(env.container_id, force=True)
    with pytest.raises(SandboxUnavailableError):
        await env.exec(["true"])


async def test_agent_death_fails_the_call_then_recovers(sandbox_factory):
    env = await sandbox_factory("docker")
    agent_pid = env._channels[None].info["pid"]
    with pytest.raises(ExecAgentLostError, match="exec agent was killed"):
        await env.exec(["kill", "-9", str(agent_pid)], timeout=30)
    assert (await env.exec(["echo", "back"])).stdout == "back\n"


async def test_pool_hands_out_prestarted_containers(sandbox_factory):
    config = sandbox_config({"type": "docker", "pool_size": 2})
    driver = build_driver(config)
    sandbox_factory.drivers.append(driver)
    await driver.start()
    await driver.pool.wait_full(120)
    pooled = list(driver.pool._ready)
    env = await driver.create(SandboxRequest(sample_id="s-1"))
    assert env in pooled
    assert (await env.exec(["echo", "hi"])).stdout == "hi\n"
    await driver.pool.wait_full(120)  # refilled in the background
    assert len(driver.pool) == 2


async def test_per_host_cap(sandbox_factory):
    from workers.sandbox import SandboxCapacityError

    await sandbox_factory("docker", max_sandboxes=1, acquire_timeout=1)
    driver = sandbox_factory.drivers[-1]
    with pytest.raises(SandboxCapacityError):
        await driver.create()


# --- the universal path ---------------------------------------------------------------------------


async def test_fallback_on_an_image_without_python3(sandbox_factory):
    with capture_logs() as logs:
        env = await sandbox_factory("docker", image=BASE_IMAGE)
    assert env.fast_path is False
    assert any(e["event"] == "sandbox.fast_path_unavailable" for e in logs)
    assert (await env.exec(["sh", "-c", "command -v python3"])).returncode != 0
    result = await env.exec(["sh", "-c", "echo out; echo err >&2; exit 5"])
    assert (result.returncode, result.stdout, result.stderr) == (5, "out\n", "err\n")
    assert (await env.exec(["cat"], input="piped")).stdout == "piped"
    assert (await env.exec(["cat"], timeout=20)).stdout == ""
    assert (await env.exec(["pwd"], cwd="/tmp")).stdout == "/tmp\n"
    assert (await env.exec(["sh", "-c", "echo $V"], env={"V": "x"})).stdout == "x\n"
    big = await env.exec(["head", "-c", str(30 * 1024 * 1024), "/dev/zero"], timeout=60)
    assert big.truncated and len(big.stdout) == env.output_cap  # head only on this path, still bounded
    with pytest.raises(SandboxTimeoutError) as info:
        await env.exec(["sh", "-c", "echo partial; sleep 1000.77 & wait"], timeout=1)
    assert info.value.stdout == "partial\n"
    await asyncio.sleep(0.5)
    ps = await env.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])
    assert "1000.77" not in ps.stdout
    await env.write_file("/tmp/f.bin", b"\x00\xff data")
    assert await env.read_file("/tmp/f.bin", text=False) == b"\x00\xff data"
    big_file = bytes(range(256)) * (48 * 1024)  # 12 MiB: above the exec cap, below the read_file limit
    await env.write_file("/tmp/big.bin", big_file)
    assert await env.read_file("/tmp/big.bin", text=False) == big_file


async def test_missing_image_is_a_clear_error(sandbox_image):
    from workers.sandbox import SandboxImageError

    driver = build_driver(sandbox_config({"type": "docker", "image": "toolfleet/does-not-exist:1", "pool_size": 0}))
    try:
        with pytest.raises(SandboxImageError, match=r"'toolfleet/does-not-exist:1' not found .*docker build -t"):
            await driver.create()
    finally:
        await driver.aclose()


@pytest.mark.parametrize(("image", "hint"), [
    ("toolfleet/sandbox:latest", "`toolfleet setup images`"),
    ("toolfleet/debian-base:bookworm", "`toolfleet setup images`"),
    ("acme/swe-task:7", "`docker build -t acme/swe-task:7 ...`"),
])
def test_missing_image_message_names_the_command_that_builds_it(image: str, hint: str) -> None:
    from workers.sandbox._errors import missing_image_message

    message = missing_image_message(image)
    assert hint in message and f"'{image}'" in message
    assert ("toolfleet setup" in message) == image.startswith("toolfleet/")


async def test_unknown_user_is_a_permission_error(sandbox_factory):
    env = await sandbox_factory("docker")
    with pytest.raises(PermissionError, match="no-such-user"):
        await env.exec(["true"], user="no-such-user")
    assert (await env.exec(["true"])).returncode == 0


async def test_the_default_image_speaks_utf8_from_its_locale_archive(sandbox_factory):
    """LANG=C.UTF-8 served from one locale archive (see the Dockerfile): multibyte-aware shells and
    Python, without glibc opening each LC_* file in every process it starts."""
    env = await sandbox_factory("docker")
    shell = await env.exec(["bash", "--login", "-c", 'X="héllo"; echo "${#X} $(locale charmap)"'])
    assert shell.stdout.strip() == "5 UTF-8", shell.stderr
    py = await env.exec(["python3", "-c",
                         "import locale, sys; print(locale.getpreferredencoding(), sys.stdout.encoding)"])
    assert py.stdout.split() == ["UTF-8", "utf-8"]
    assert (await env.exec(["localedef", "--list-archive"])).stdout.split() == ["C.utf8"]


# --- the agent's channel ------------------------------------------------------------------------


async def test_the_channel_goes_direct_when_the_engine_is_local(sandbox_factory):
    """A local Engine: every user's agent connects to the host's socket (bind-mounted read-only) and
    the exec stream only anchors its lifetime."""
    env = await sandbox_factory("docker")
    for user in (None, "root"):
        result = await env.exec(["sh", "-c", "echo out; echo err >&2; exit 4"], user=user)
        assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert {u: c.transport for u, c in env._channels.items()} == {None: "unix", "root": "unix"}


async def test_the_exec_stream_is_the_channel_when_direct_is_off(sandbox_factory):
    env = await sandbox_factory("docker", direct_channel=False)
    assert (await env.exec(["echo", "hi"])).stdout == "hi\n"
    assert [c.transport for c in env._channels.values()] == ["stream"]


async def test_closing_the_direct_channel_ends_the_agent(sandbox_factory):
    env = await sandbox_factory("docker")
    assert (await env.exec(["true"])).returncode == 0
    [channel] = env._channels.values()
    agent_pid = channel.info["pid"]
    await channel.aclose()  # the anchor (exec stream) closes with it: the agent sees EOF and exits
    for _ in range(100):
        alive = (await env.exec(["sh", "-c", f"kill -0 {agent_pid} 2>/dev/null && echo alive"], user="root")).stdout
        if not alive:
            break
        await asyncio.sleep(0.05)
    assert alive == ""
    assert (await env.exec(["echo", "again"])).stdout == "again\n"  # a new agent, on demand


async def test_a_failed_direct_connection_falls_back_to_the_stream(sandbox_factory):
    """The agent could not reach a host socket (here: a listener whose directory is not mounted in this
    container): it stays on the exec stream — a call never sees the failure."""
    from workers.sandbox.docker._direct import HostListener
    from workers.sandbox.docker._exec import open_agent

    env = await sandbox_factory("docker", direct_channel=False)
    elsewhere = HostListener()
    await elsewhere.start()
    try:
        channel = await open_agent(env.driver.api, env.container_id, env.driver.exec_user, listener=elsewhere)
    finally:
        await elsewhere.aclose()
    try:
        assert channel.transport == "stream"
        result = await channel.run(["echo", "ok"], None, None, None, 30.0, 1 << 20)
        assert (result.returncode, result.stdout) == (0, b"ok\n")
    finally:
        await channel.aclose()
