"""The direct channel's host end: a unix socket the HOST listens on, bind-mounted read-only into sandboxes.

Why this shape (SECURITY.md, "Sandbox → host"): the host must never resolve a path inside a sandbox. A socket the agent
creates in the container's filesystem, reached through ``/proc/<pid>/root/...``, lets anything in the
sandbox swap a path component for a symlink that the host then follows in *its own* filesystem. Here
the host creates the directory (its own, mode 0755) and the socket in it, and only ever *accepts*:

- each container gets the directory bind-mounted read-only at ``CONTAINER_DIR``; nothing in the
  sandbox can add, remove or replace an entry there (connecting to the socket needs no write access);
- a connection is kept only if its peer (``SO_PEERCRED``, in this process's pid namespace) is the
  pid of an agent the host just asked to connect — the pid the Engine reports for that agent's exec.
  Anything else in the sandbox that connects is closed at once.

Where this process does not share the Docker daemon's filesystem or pid namespace (a remote Engine, a
worker in its own container), the agent cannot reach the socket or its pid does not match: the agent
then stays on the exec stream, which is just as safe and slower (see ``_exec.open_agent``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import tempfile
import uuid
from collections.abc import Mapping

import structlog

log = structlog.get_logger("toolfleet.sandbox")

CONTAINER_DIR = "/run/toolfleet-host"  # where sandboxes see the host's directory (read-only)
SOCKET_NAME = "agent.sock"
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _runtime_base() -> str:
    """A parent for the host directory: /run when root (tmpfs, cleared at boot), else the temp dir."""
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return "/run/toolfleet"
    return os.path.join(tempfile.gettempdir(), f"toolfleet-{os.geteuid()}")


def engine_is_local(docker_host: str | None) -> bool:
    """Only a local unix-socket Engine can see this host's directories (bind mounts are daemon-side paths)."""
    url = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return url.startswith("unix://")


class HostListener:
    """One listening socket per Docker Engine and event loop (``_engine``), shared by every driver
    there; ``expect(pid)`` hands over that agent's connection."""

    def __init__(self) -> None:
        self.directory = ""
        self.path = ""
        self._server: asyncio.AbstractServer | None = None
        self._waiting: dict[int, asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self.rejected = 0  # connections from anything but an expected agent

    async def start(self) -> None:
        base = _runtime_base()
        os.makedirs(base, mode=0o755, exist_ok=True)
        directory = os.path.join(base, uuid.uuid4().hex[:16])
        os.mkdir(directory, 0o755)
        os.chmod(directory, 0o755)  # noqa: S103 - umask-proof: sandbox users must traverse it
        path = os.path.join(directory, SOCKET_NAME)
        self._server = await asyncio.start_unix_server(self._accepted, path=path, limit=1 << 20)
        os.chmod(path, 0o666)  # noqa: S103 - any sandbox uid may connect; SO_PEERCRED decides who is kept
        self.directory, self.path = directory, path

    def bind(self) -> dict[str, Mapping[str, str]]:
        """The ``binds`` entry a container needs (read-only: the sandbox cannot change the directory)."""
        return {self.directory: {"bind": CONTAINER_DIR, "mode": "ro"}}

    def expect(self, pid: int) -> asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        fut: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[pid] = fut
        return fut

    def forget(self, pid: int) -> None:
        self._waiting.pop(pid, None)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            pid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))[0]
        except (OSError, AttributeError, struct.error):
            pid = 0
        fut = self._waiting.pop(pid, None) if pid else None
        if fut is None or fut.done():
            self.rejected += 1
            log.debug("sandbox.direct_connection_rejected", peer_pid=pid)
            writer.close()
            return
        fut.set_result((reader, writer))

    def close_now(self) -> None:
        """Close without awaiting (the listener's loop is gone): its socket and directory go."""
        if self._server is not None:
            try:
                self._server.close()  # on a closed loop this just closes the listening socket
            except (OSError, RuntimeError) as exc:
                log.debug("sandbox.listener_close_failed", error=str(exc))
            self._server = None
        self._waiting.clear()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    async def aclose(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        self._waiting.clear()
        if self._server is not None:
            self._server.close()
            self._server = None
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
