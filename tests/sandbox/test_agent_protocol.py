"""The agent's wire protocol against a real agent process: frames split anywhere, ids multiplexed."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from workers.sandbox._channel import AGENT_PATH, HEADER, KILL, PING, PONG, RESULT, RUN, U32

# slow: every test talks to the exec agent running as a child process
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def run_frame(req_id: int, argv: list[str], data: bytes | None = None, **spec: object) -> bytes:
    body = json.dumps({"argv": argv, "input": data is not None, **spec}).encode()
    payload = U32.pack(len(body)) + body + (data or b"")
    return HEADER.pack(req_id, RUN, len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    req_id, kind, length = HEADER.unpack(await reader.readexactly(HEADER.size))
    return req_id, kind, await reader.readexactly(length)


def parse_result(payload: bytes) -> tuple[dict, bytes, bytes]:
    (jlen,) = U32.unpack_from(payload)
    status = json.loads(payload[4 : 4 + jlen])
    out_end = 4 + jlen + status["stdout_len"]
    return status, payload[4 + jlen : out_end], payload[out_end:]


@pytest.fixture
async def agent(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-u", str(AGENT_PATH), cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True,
    )
    yield proc
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


async def test_frames_split_at_every_byte_and_interleaved_ids(agent):
    stream = (
        HEADER.pack(7, PING, 0)
        + run_frame(1, ["sh", "-c", "sleep 0.3; printf one"])
        + run_frame(2, ["cat"], b"\x00\xff" + HEADER.pack(9, RESULT, 3) + b"two")  # frame-like bytes as data
    )
    for i in range(len(stream)):  # the worst case: one byte per write
        agent.stdin.write(stream[i : i + 1])
        await agent.stdin.drain()
    frames = {}
    for _ in range(3):
        req_id, kind, payload = await asyncio.wait_for(read_frame(agent.stdout), 20)
        frames[req_id] = (kind, payload)
    assert frames[7][0] == PONG and json.loads(frames[7][1])["version"] >= 1
    status, out, err = parse_result(frames[2][1])
    assert (status["returncode"], out, err) == (0, b"\x00\xff" + HEADER.pack(9, RESULT, 3) + b"two", b"")
    status, out, _ = parse_result(frames[1][1])
    assert (status["returncode"], out) == (0, b"one")


async def test_kill_frame_stops_the_group(agent):
    agent.stdin.write(run_frame(3, ["sh", "-c", "echo started; sleep 1000 & wait"]))
    agent.stdin.write(HEADER.pack(3, KILL, 0))
    await agent.stdin.drain()
    req_id, kind, payload = await asyncio.wait_for(read_frame(agent.stdout), 20)
    status, _, _ = parse_result(payload)
    assert (req_id, kind, status["returncode"]) == (3, RESULT, 137)


async def test_host_going_away_stops_the_agent_and_its_commands(agent):
    agent.stdin.write(run_frame(4, ["sleep", "1000.9191"]))
    await agent.stdin.drain()
    agent.stdin.close()
    assert await asyncio.wait_for(agent.wait(), 20) == 0
    ps = await asyncio.create_subprocess_exec("pgrep", "-f", "sleep 1000.9191", stdout=asyncio.subprocess.PIPE)
    out, _ = await ps.communicate()
    assert out.strip() == b""
