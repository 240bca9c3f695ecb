"""The Celery dispatcher's publisher: every broker write from one dedicated thread.

kombu's producer blocks, so publishing runs in a single worker thread and the event loop only
awaits it. A stage goes out as one task per destination queue (a Celery ``group`` of them when it
spans several queues); a broker outage is retried up to ``timeout`` seconds, re-declaring the queue bindings a restarted
Redis lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from celery import Celery, group
from kombu.entity import Exchange, Queue

log = structlog.get_logger("toolfleet.dispatch")

T = TypeVar("T")


@dataclass(frozen=True)
class TaskMessage:
    task_id: str
    name: str
    args: list[Any]
    queue: str
    argsrepr: str | None = None  # what Flower and `celery inspect` show (None: Celery's saferepr of args)


class Publisher:
    def __init__(self, app: Celery, timeout: float) -> None:
        self.app = app
        self._timeout = timeout
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="toolfleet-publish")
        self._declared: set[str] = set()  # queues declared since the broker (re)started; publisher thread only

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def stage(self, messages: list[TaskMessage]) -> None:
        """One task, or one group when the stage spans several queues."""
        await self._run(self._with_retry, lambda: self._publish_stage(messages))

    async def broadcast(self, command: str, arguments: dict[str, Any], destination: list[str] | None) -> None:
        await self._run(lambda: self.app.control.broadcast(command, arguments=arguments, destination=destination,
                                                           reply=False))

    def broker_restarted(self) -> None:
        self._declared.clear()  # the bindings went with the old Redis (a set swap is atomic enough across threads)

    async def aclose(self) -> None:
        await self._run(self.app.close)
        self._thread.shutdown(wait=False)

    # --- the publisher thread ------------------------------------------------------------------

    def _with_retry(self, publish: Callable[[], None]) -> None:
        """Retry through a broker outage (bounded by ``timeout``)."""
        deadline = time.monotonic() + self._timeout
        delay = 0.05
        while True:
            try:
                return publish()
            except Exception as exc:  # kombu/redis raise many kinds; give up only at the bound
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("dispatch.publish_retry", error=str(exc))
                self._declared.clear()  # a restarted Redis lost the queue bindings too
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _declare(self, queues: set[str]) -> None:
        """Make sure the queues' bindings exist before publishing to them.

        kombu's Redis transport silently drops a message whose exchange has no binding, and a
        restarted Redis has none until the workers reconnect; declaring here closes that gap.
        """
        missing = queues - self._declared
        if not missing:
            return
        with self.app.producer_or_acquire() as producer:
            for name in sorted(missing):
                Queue(name, Exchange(name, type="direct"), routing_key=name).declare(channel=producer.channel)
        self._declared |= missing

    def _publish_stage(self, messages: list[TaskMessage]) -> None:
        self._declare({m.queue for m in messages})
        # declare=[]: the queues were just declared (once per broker start); kombu would otherwise
        # re-bind and look up each queue on every message.
        signatures = [
            self.app.signature(m.name, args=m.args, task_id=m.task_id, queue=m.queue, declare=[],
                               **({"argsrepr": m.argsrepr, "kwargsrepr": "{}"} if m.argsrepr is not None else {}))
            for m in messages
        ]
        if len(signatures) == 1:
            signatures[0].apply_async()
        else:
            group(signatures).apply_async()
