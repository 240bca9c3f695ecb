"""The Docker SDK behind a bounded thread pool, plus the hijacked-stream helpers.

Every SDK call blocks (HTTP over the Engine socket), so each runs on this pool via
``run_in_executor``; the event loop never waits on Docker. Backend errors are translated at the
boundary by the callers (``raise ... from exc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker
from docker.errors import DockerException

T = TypeVar("T")


class DockerAPI:
    def __init__(self, base_url: str | None, threads: int) -> None:
        self._base_url = base_url
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="toolfleet-docker")
        self._threads = threads
        self._client: docker.DockerClient | None = None
        self._connecting = threading.Lock()  # drivers of several configs (and loops) share one client

    @property
    def api(self) -> docker.APIClient:
        assert self._client is not None, "DockerAPI.connect() first"
        return self._client.api

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def connect(self) -> None:
        """Connect once (later calls return at once)."""
        if self._client is not None:
            return

        def _connect() -> None:
            with self._connecting:
                if self._client is not None:
                    return
                # Pool one HTTP connection per worker thread (hijacked exec sockets take their own).
                kwargs: dict[str, Any] = {"max_pool_size": self._threads + 2, "timeout": 120}
                client = (docker.DockerClient(base_url=self._base_url, **kwargs) if self._base_url
                          else docker.from_env(**kwargs))
                client.ping()
                self._client = client

        await self.call(_connect)

    def widen(self, threads: int) -> None:
        """At least ``threads`` threads from now on: calls in flight finish on the old pool, which then ends."""
        if threads <= self._threads:
            return
        old, self._threads = self._pool, threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="toolfleet-docker")
        old.shutdown(wait=False)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def open_exec_stream(self, exec_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any]:
        """Start an exec with its streams hijacked; returns asyncio streams over the raw socket."""
        sock: Any = await self.call(self.api.exec_start, exec_id, socket=True)  # socket=True: a socket
        raw = getattr(sock, "_sock", sock)
        raw.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=raw, limit=1 << 20)
        return reader, writer, sock

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(DockerException):
                client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


async def read_docker_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One frame of Docker's multiplexed stream (tty=False): 8-byte header, then the payload."""
    head = await reader.readexactly(8)
    return head[0], await reader.readexactly(int.from_bytes(head[4:8], "big"))
