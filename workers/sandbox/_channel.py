"""Host side of the agent channel: length-prefixed frames multiplexed by request id.

The same class talks to an agent in a container (over the hijacked ``docker exec`` socket, whose
stdout/stderr are multiplexed with Docker's 8-byte headers: ``demux=True``) and to a local agent
subprocess (plain pipes). Everything is asyncio: no thread per call, the loop is never blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from orchestrator._errors import ToolfleetError

log = structlog.get_logger("toolfleet.sandbox")

AGENT_PATH = Path(__file__).parent / "_agent" / "agent.py"
HEADER = struct.Struct(">IBI")
U32 = struct.Struct(">I")
RUN, KILL, PING, RESULT, PONG, CONNECT, CONNECTED = 1, 2, 3, 4, 5, 8, 9
DOCKER_HEADER = 8
HELLO_TIMEOUT = 20.0  # python3 startup in a cold, CPU-limited container
# The agent is inside the sandbox, so its frames are untrusted: a frame may be at most what its
# request can legitimately produce (two capped streams plus a status), else the channel is closed.
SMALL_FRAME = 64 * 1024
FRAME_SLACK = 64 * 1024


class ChannelClosed(ToolfleetError, ConnectionError):
    """The agent (or its container) went away; pending calls fail with this."""


@dataclass
class RawResult:
    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    oom: bool
    error: dict[str, Any] | None = None
    # The agent's time for the command, from taking up the request to its result (None where the
    # agent predates it or the command never started): a round trip minus this is the channel's cost.
    agent_seconds: float | None = None


def _seconds(value: Any) -> float | None:
    """A duration the agent reports, admitted only as a finite non-negative number (it is untrusted)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"):
        return float(value)
    return None


class AgentChannel:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        demux: bool,
        on_close: Callable[[], None] | None = None,
        keep: Any = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._demux = demux
        self._on_close = on_close
        self._keep = keep  # objects whose lifetime must match the channel's (e.g. the SDK socket)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._frame_limits: dict[int, int] = {}
        self._closed: BaseException | None = None
        self._agent_stderr = bytearray()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        self.info: dict[str, Any] = {}
        self.transport = "stream"  # "unix": a direct channel (see docker._exec)
        self.switched = False  # the agent may answer elsewhere now (a CONNECT was sent, not refused)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def hello(self, timeout: float = HELLO_TIMEOUT) -> dict[str, Any]:
        """Ping the agent; fails with ChannelClosed if it never answers (e.g. no python3)."""
        _, payload = await self._request(PING, b"", timeout)
        self.info = json.loads(payload)
        return self.info

    async def connect_to(self, path: str, timeout: float = 10.0) -> None:
        """Ask the agent to move to the host's socket at ``path`` (protocol 5; see ``docker._direct``)."""
        if int(self.info.get("version", 0)) < 5:
            raise ChannelClosed("the agent predates host-side direct channels")
        self.switched = True  # until the agent says it stayed: a lost answer leaves it unknown
        _, payload = await self._request(CONNECT, json.dumps({"path": path}).encode(), timeout)
        answer = json.loads(payload)
        if not answer.get("ok"):
            self.switched = False
            raise ChannelClosed(f"the agent cannot reach the host's socket: {answer.get('error')}")

    def anchor(self, other: AgentChannel) -> None:
        """Keep ``other`` open as long as this channel, and close it with this one."""
        self._keep = other

    def close(self) -> None:
        """Close without waiting (e.g. as the anchor a direct channel keeps alive)."""
        if self._closed is None:
            self._fail(ChannelClosed("agent channel closed by the host"), None)
        self._task.cancel()

    async def run(
        self,
        argv: list[str],
        input: bytes | None,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout: float | None,
        cap: int,
        spares: int = 0,
    ) -> RawResult:
        # `spares`: how many warm processes the agent keeps for this command if it is the python
        # tool's form (protocol 3; older agents ignore the field and spawn cold).
        body = {"argv": argv, "cwd": cwd, "env": env, "timeout": timeout, "cap": cap, "input": input is not None}
        if spares:
            body["spares"] = spares
        spec = json.dumps(body).encode()
        payload = U32.pack(len(spec)) + spec + (input or b"")
        # The agent enforces `timeout`; the host bound only guards against a wedged agent.
        bound = None if timeout is None else timeout + 30.0
        _, frame = await self._request(RUN, payload, bound, frame_limit=2 * cap + FRAME_SLACK)
        try:
            (jlen,) = U32.unpack_from(frame)
            status = json.loads(frame[4 : 4 + jlen])
            out_end = 4 + jlen + int(status["stdout_len"])
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            self._fail(ChannelClosed(f"agent protocol error: malformed result ({exc!r})"), exc)
            raise self._closed from exc  # type: ignore[misc]  # _fail() just set it
        if self.info is not None and status.get("oom_kills") is not None:
            self.info["oom_kills"] = status["oom_kills"]
        return RawResult(
            returncode=status["returncode"],
            stdout=frame[4 + jlen : out_end],
            stderr=frame[out_end:],
            truncated=status["truncated"],
            timed_out=status["timed_out"],
            oom=status.get("oom", False),
            error=status.get("error"),
            agent_seconds=_seconds(status.get("agent_seconds")),
        )

    async def _request(
        self, kind: int, payload: bytes, bound: float | None, frame_limit: int = SMALL_FRAME,
    ) -> tuple[int, bytes]:
        if self._closed is not None:
            raise ChannelClosed(str(self._closed)) from self._closed
        req_id = next(self._ids) & 0xFFFFFFFF
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        self._frame_limits[req_id] = frame_limit
        try:
            self._writer.write(HEADER.pack(req_id, kind, len(payload)) + payload)
            if len(payload) > 65536:
                await self._writer.drain()
            return await asyncio.wait_for(fut, bound)
        except (asyncio.CancelledError, TimeoutError):
            # Stop the work, not just the waiting: the agent kills the command's process group.
            if kind == RUN and self._closed is None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    self._writer.write(HEADER.pack(req_id, KILL, 0))
            raise
        except ChannelClosed:
            raise
        except (ConnectionError, RuntimeError) as exc:
            raise ChannelClosed(f"agent channel write failed: {exc}") from exc
        finally:
            # The frame limit stays until the answer arrives: a cancelled RUN still gets its result.
            self._pending.pop(req_id, None)

    async def _read_loop(self) -> None:
        buf = bytearray()
        try:
            while True:
                if self._demux:
                    head = await self._reader.readexactly(DOCKER_HEADER)
                    stream, size = head[0], int.from_bytes(head[4:8], "big")
                    data = await self._reader.readexactly(size)
                    if stream != 1:
                        self._note_stderr(data)
                        continue
                else:
                    data = await self._reader.read(1 << 20)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", None)
                buf += data
                self._dispatch(buf)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(ChannelClosed(f"agent channel closed{self._stderr_hint()}"), exc)
        except asyncio.CancelledError:
            self._fail(ChannelClosed("agent channel closed by the host"), None)
            raise
        except Exception as exc:  # noqa: BLE001 - a protocol error must not leave callers hanging
            self._fail(ChannelClosed(f"agent protocol error: {exc!r}"), exc)

    def _dispatch(self, buf: bytearray) -> None:
        offset = 0
        while len(buf) - offset >= HEADER.size:
            req_id, kind, length = HEADER.unpack_from(buf, offset)
            if length > self._frame_limits.get(req_id, SMALL_FRAME):
                raise ValueError(f"a {length}-byte frame exceeds what request {req_id} can produce")
            end = offset + HEADER.size + length
            if len(buf) < end:
                break
            self._frame_limits.pop(req_id, None)
            fut = self._pending.get(req_id)
            if fut is not None and not fut.done():
                fut.set_result((kind, bytes(buf[offset + HEADER.size : end])))
            offset = end
        if offset:
            del buf[:offset]

    def _note_stderr(self, data: bytes) -> None:
        # The agent only writes to stderr when it crashes; keep a bounded tail for the error message.
        self._agent_stderr += data
        del self._agent_stderr[:-4096]

    def _stderr_hint(self) -> str:
        text = self._agent_stderr.decode("utf-8", "replace").strip()
        return f": {text[-500:]}" if text else ""

    def _fail(self, error: ChannelClosed, cause: BaseException | None) -> None:
        if self._closed is not None:
            return
        if cause is not None:
            error.__cause__ = cause
        self._closed = error
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._close_transport()
        if self._on_close is not None:
            self._on_close()

    def _close_transport(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self._writer.close()
        close = getattr(self._keep, "close", None)
        if close is not None:
            with contextlib.suppress(OSError):
                close()

    async def aclose(self) -> None:
        self.close()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):  # closing anyway
            await asyncio.wait_for(self._task, 5.0)
