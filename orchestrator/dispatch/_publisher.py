"""The Celery dispatcher's publisher: every broker write from one dedicated thread.

kombu's producer blocks, so publishing runs in a single worker thread and the event loop only
awaits it. A stage goes out as one task per destination queue (a Celery ``group`` of them when it
spans several queues); a broker outage is retried up to ``timeout`` seconds, re-declaring the queue bindings a restarted
Redis lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from celery import Celery, group
from kombu.entity import Exchange, Queue

from orchestrator.util._retry import Backoff, RetryPolicy, retry

log = structlog.get_logger("toolfleet.dispatch")

T = TypeVar("T")

# Through a broker outage: 50 ms doubling to 1 s, for the publisher's ``timeout`` in all (kombu and
# redis raise many kinds of error: any is retried, until the bound).
OUTAGE_RETRY = RetryPolicy(max_retries=None, initial_delay=0.05, multiplier=2.0, max_delay=1.0, jitter=0.0)


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
        self._retry = OUTAGE_RETRY.model_copy(update={"max_elapsed": timeout})
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="toolfleet-publish")
        self._declared: set[str] = set()  # queues declared since the broker (re)started; publisher thread only

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def stage(self, messages: list[TaskMessage]) -> None:
        """One task, or one group when the stage spans several queues; retried through a broker outage
        (bounded by ``timeout``), each attempt in the publisher thread."""
        await retry(lambda: self._run(self._publish_stage, messages), Backoff(self._retry),
                    on_retry=self._publish_failed)

    async def broadcast(self, command: str, arguments: dict[str, Any], destination: list[str] | None) -> None:
        await self._run(lambda: self.app.control.broadcast(command, arguments=arguments, destination=destination,
                                                           reply=False))

    def broker_restarted(self) -> None:
        self._declared.clear()  # the bindings went with the old Redis (a set swap is atomic enough across threads)

    async def aclose(self) -> None:
        await self._run(self.app.close)
        self._thread.shutdown(wait=False)

    def _publish_failed(self, exc: BaseException, delay: float) -> None:
        log.warning("dispatch.publish_retry", error=str(exc))
        self._declared.clear()  # a restarted Redis lost the queue bindings too

    # --- the publisher thread ------------------------------------------------------------------

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
