"""Docker-specific exec plumbing: starting the in-container agent and the universal fallback path.

Fast path: the agent source is passed to ``python3 -c`` in ONE ``exec_create``/``exec_start``
(stdin attached, tty off), so it works on read-only root filesystems and needs no ``put_archive``.
Universal path (images without python3): one ``docker exec`` per call through ``/bin/sh`` with the
same semantics — GNU/busybox ``timeout -s KILL`` kills the whole process group (``timeout`` puts
itself and the command in their own group), output is capped while reading (bytes beyond the cap
are dropped as they arrive), stdin is attached only when input is given.
"""

from __future__ import annotations

import asyncio
import time

import structlog
from docker.errors import DockerException

from .._channel import AGENT_PATH, AgentChannel, ChannelClosed, RawResult
from ._api import DockerAPI, read_docker_frame
from ._direct import CONTAINER_DIR, SOCKET_NAME, HostListener

_AGENT_SOURCE = AGENT_PATH.read_bytes()
# The agent's source is the first thing written to its stdin (a short bootstrap reads exactly that
# many bytes), so `ps` in the sandbox shows one short line. `exec` keeps the pid; exit 127 with a
# message when the image has no python3.
# Unbuffered reads (os.read) so that no byte after the source is swallowed by a stdin buffer: the
# agent reads fd 0 directly.
_BOOTSTRAP = (
    "import os,sys\nn=int(sys.argv[1]);b=b''\nwhile len(b)<n:\n c=os.read(0,n-len(b))\n if not c:sys.exit(1)\n b+=c\n"
    "exec(compile(b,'toolfleet-agent','exec'))"
)
_AGENT_LAUNCH = (
    'command -v python3 >/dev/null 2>&1 || { echo "toolfleet: no python3 in this image" >&2; exit 127; }; '
    'exec python3 -I -u -c "$0" "$1"'
)
log = structlog.get_logger("toolfleet.sandbox")
FALLBACK_GRACE = 5.0  # host-side bound beyond a command's own timeout
DIRECT_TIMEOUT = 10.0  # connecting to and greeting the agent's socket (a loaded host can be slow)


async def open_agent(
    api: DockerAPI, container_id: str, user: str | None, listener: HostListener | None = None,
) -> AgentChannel:
    """Start the agent in the container (as ``user``) and wait for its hello.

    With ``listener`` (the driver's host socket, bind-mounted into the container) the channel moves
    to that socket, bypassing the daemon's stream copying; the exec stream stays open as the agent's
    lifetime anchor. The host only accepts there, from this agent's pid (see ``_direct``).
    Where that fails the exec stream is the channel.
    """
    channel, exec_id = await _start_agent(api, container_id, user)
    if listener is None:
        return channel
    pid = 0
    try:
        pid = int((await api.call(api.api.exec_inspect, exec_id)).get("Pid") or 0)
        if not pid:
            raise ChannelClosed("the Engine did not report the agent's pid")
        accepted = listener.expect(pid)
        await channel.connect_to(f"{CONTAINER_DIR}/{SOCKET_NAME}", DIRECT_TIMEOUT)
        reader, writer = await asyncio.wait_for(accepted, DIRECT_TIMEOUT)
        return await _greet(channel, reader, writer)
    except (ChannelClosed, TimeoutError, OSError, DockerException, ValueError) as exc:
        if pid:
            listener.forget(pid)
        if channel.closed:
            raise ChannelClosed(f"exec agent died while opening its direct channel ({exc})") from exc
        if not channel.switched:
            # The agent could not connect (e.g. a remote Engine: no such socket there): it is fine
            # on the stream.
            log.debug("sandbox.direct_channel_unavailable", container=container_id[:12], error=str(exc))
            return channel
        # The agent switched but the host did not get (or keep) the connection: it now answers on a
        # dead socket. Start a fresh one on the exec stream.
        log.info("sandbox.direct_channel_failed", container=container_id[:12], error=str(exc))
        await channel.aclose()
        return (await _start_agent(api, container_id, user))[0]


async def _start_agent(api: DockerAPI, container_id: str, user: str | None) -> tuple[AgentChannel, str]:
    try:
        exec_id = (
            await api.call(
                api.api.exec_create, container_id,
                ["/bin/sh", "-c", _AGENT_LAUNCH, _BOOTSTRAP, str(len(_AGENT_SOURCE))],
                stdin=True, stdout=True, stderr=True, tty=False, user=user or "",
            )
        )["Id"]
        reader, writer, sock = await api.open_exec_stream(exec_id)
        writer.write(_AGENT_SOURCE)
    except Exception as exc:  # any SDK failure means "no channel"
        raise ChannelClosed(f"could not start the exec agent: {exc}") from exc
    channel = AgentChannel(reader, writer, demux=True, keep=sock)
    try:
        await channel.hello()
    except (ChannelClosed, TimeoutError) as exc:
        await channel.aclose()
        raise ChannelClosed(f"exec agent did not start ({exc})") from exc
    return channel, exec_id


async def _greet(anchor: AgentChannel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> AgentChannel:
    direct = AgentChannel(reader, writer, demux=False)
    try:
        await direct.hello(DIRECT_TIMEOUT)
    except (ChannelClosed, TimeoutError):
        await direct.aclose()
        raise
    direct.anchor(anchor)  # closing the direct channel closes the exec stream: the agent exits
    direct.transport = "unix"
    return direct


async def universal_exec(
    api: DockerAPI,
    container_id: str,
    argv: list[str],
    input: bytes | None,
    cwd: str | None,
    env: dict[str, str] | None,
    user: str | None,
    timeout: float | None,
    cap: int,
    has_timeout: bool,
) -> RawResult:
    cmd = ["timeout", "-s", "KILL", f"{timeout:g}", *argv] if (timeout is not None and has_timeout) else argv
    created = await api.call(
        api.api.exec_create, container_id, cmd, stdin=input is not None, stdout=True, stderr=True, tty=False,
        environment=env or None, workdir=cwd or None, user=user or "",
    )
    exec_id = created["Id"]
    reader, writer, sock = await api.open_exec_stream(exec_id)
    bufs = {1: bytearray(), 2: bytearray()}
    truncated = False
    host_timed_out = False
    started = time.monotonic()
    async def feed() -> None:
        # Written concurrently with reading: a command may print a lot before it reads its input.
        assert input is not None
        writer.write(input)
        await writer.drain()
        writer.write_eof()  # half-close: the command sees EOF on stdin

    feeder = asyncio.ensure_future(feed()) if input is not None else None
    try:
        bound = None if timeout is None else timeout + FALLBACK_GRACE
        try:
            async with asyncio.timeout(bound):
                while True:
                    try:
                        stream, data = await read_docker_frame(reader)
                    except asyncio.IncompleteReadError:
                        break
                    buf = bufs.get(stream)
                    if buf is None:
                        continue
                    room = cap - len(buf)
                    if room > 0:
                        buf += data[:room]
                    if len(data) > room:
                        truncated = True
        except TimeoutError:
            host_timed_out = True  # no `timeout` in the image: we stop waiting (documented gap)
    finally:
        if feeder is not None:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
        writer.close()
        sock.close()
    # The stream can end a moment before the daemon records the exit code: poll briefly (bounded).
    for _ in range(100):
        info = await api.call(api.api.exec_inspect, exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            break
        await asyncio.sleep(0.02)
    code = info.get("ExitCode")
    elapsed = time.monotonic() - started
    timed_out = host_timed_out or (
        timeout is not None and has_timeout and code in (124, 137) and elapsed >= timeout * 0.95
    )
    return RawResult(
        returncode=-1 if code is None else int(code),
        stdout=bytes(bufs[1]),
        stderr=bytes(bufs[2]),
        truncated=truncated,
        timed_out=timed_out,
        oom=False,
    )
