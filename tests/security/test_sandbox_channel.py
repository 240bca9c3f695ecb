"""Sandbox → host, the exec channel (SECURITY.md): nothing in a sandbox can make the host connect to,
or resolve, a path of the sandbox's choosing, and nothing the agent sends can make the host hold
more than the call can legitimately produce."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile

import pytest

from tests.sandbox.fixtures import sandbox_factory  # noqa: F401  (fixture)
from workers.sandbox import ExecAgentLostError
from workers.sandbox._channel import HEADER, RESULT, AgentChannel, ChannelClosed
from workers.sandbox.docker._direct import CONTAINER_DIR, SOCKET_NAME

pytestmark = pytest.mark.docker


class Bait:
    """A host unix socket an attacker would love the host to connect to; counts connections."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="toolfleet-bait-")
        os.chmod(self.dir, 0o755)  # noqa: S103 - traversable, as the real listener's directory
        self.path = os.path.join(self.dir, "bait.sock")
        self.hits = 0
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Bait:
        async def hit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.hits += 1
            writer.close()

        self.server = await asyncio.start_unix_server(hit, path=self.path)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


# Everything the sandbox user (and the sandbox's root) can try: swap the mounted socket, and plant
# absolute symlinks wherever the old protocol put or might put an agent socket — then kill the agent
# so that a fresh one is started while the links are in place (the race workers/sandbox/docker/_direct.py closes).
PLANT = r"""
ln -sf {bait} {mounted} 2>/dev/null && echo swapped-socket
rm -f {mounted} 2>/dev/null && echo removed-socket
for d in /dev/shm /tmp "$HOME"; do
  for i in 0 1 2 3 4 5 6 7; do
    mkdir -p "$d/toolfleet-agent-x$i" 2>/dev/null; ln -sf {bait} "$d/toolfleet-agent-x$i/channel" 2>/dev/null
  done
  ln -sf {bait} "$d/channel" 2>/dev/null; ln -sf {bait} "$d/agent.sock" 2>/dev/null
done
echo planted
"""


@pytest.mark.parametrize("user", [None, "root"])
async def test_planted_symlinks_and_a_respawn_race_never_redirect_the_host(sandbox_factory, user):  # noqa: F811 - the imported fixture
    env = await sandbox_factory("docker")
    mounted = f"{CONTAINER_DIR}/{SOCKET_NAME}"
    async with Bait() as bait:
        planted = await env.exec(["sh", "-c", PLANT.format(bait=bait.path, mounted=mounted)], user=user)
        assert "planted" in planted.stdout
        assert "swapped-socket" not in planted.stdout and "removed-socket" not in planted.stdout  # read-only mount
        for _ in range(3):  # the agent dies (same user) and is started again, links in place
            with pytest.raises(ExecAgentLostError):
                await env.exec(["sh", "-c", "pkill -9 -f toolfleet-agent; pkill -9 python3; sleep 5"], user=user,
                               timeout=30)
            assert (await env.exec(["echo", "ok"], user=user)).stdout == "ok\n"
        assert env._channels[user].transport == "unix"  # still the fast path, through the host's own socket
        assert bait.hits == 0


async def test_a_sandbox_process_connecting_to_the_host_socket_is_turned_away(sandbox_factory):  # noqa: F811 - the imported fixture
    """Anything but the agent the host is waiting for gets EOF at once; the real channel is untouched."""
    env = await sandbox_factory("docker")
    listener = env.driver.listener
    assert listener is not None
    impostor = (
        "import socket, struct\n"  # noqa: UP031 - a script's source: % leaves its braces alone
        "s = socket.socket(socket.AF_UNIX); s.connect('%s'); s.settimeout(20)\n"
        "try:\n"
        "    s.sendall(struct.pack('>IBI', 1, 3, 0))\n"  # a PING, as if it were the host talking to an agent
        "    print('eof' if s.recv(100) == b'' else 'answered')\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    print('eof')\n" % f"{CONTAINER_DIR}/{SOCKET_NAME}"
    )
    before = listener.rejected
    result = await env.exec(["python3", "-c", impostor], timeout=60)
    assert result.stdout.strip() == "eof", result.stderr
    assert listener.rejected == before + 1
    assert (await env.exec(["echo", "fine"])).stdout == "fine\n"


async def test_an_oversized_frame_from_the_agent_closes_the_channel_without_buffering_it():
    """The agent runs inside the sandbox: a frame longer than its request can produce is a protocol
    error at once (not 4 GiB read into the host's memory)."""
    host, hostile = await _socket_pair()
    channel = AgentChannel(*host, demux=False)
    hostile_reader, hostile_writer = hostile
    try:
        running = asyncio.ensure_future(channel.run(["true"], None, None, None, 30.0, 1024))
        await hostile_reader.readexactly(HEADER.size)  # the RUN request's header
        hostile_writer.write(HEADER.pack(1, RESULT, 0xFFFFFFF0) + b"x" * 65536)
        await hostile_writer.drain()
        with pytest.raises(ChannelClosed, match="protocol error"):
            await asyncio.wait_for(running, 30)
        assert channel.closed
    finally:
        hostile_writer.close()
        await channel.aclose()


async def _socket_pair():
    import socket

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return await asyncio.open_connection(sock=a), await asyncio.open_connection(sock=b)


def test_frame_header_layout_matches_the_agent():
    from workers.sandbox._agent import agent

    assert agent.HEADER.format == HEADER.format and struct.calcsize(HEADER.format) == 9
