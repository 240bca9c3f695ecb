"""Shared pieces of the broker-boundary attacks: a production-like fleet, raw publishing, legit calls."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator._wire import CallOutcome
from tests.distributed._helpers import one, request
from tests.support.fleet import RedisServer, WorkerProcess, ensure_fleet_secret, _wait
from workers.fleet import DEST_HEADER, ISSUED_HEADER, MAC_HEADER, Keyring, load_keyring, message_mac, names
from workers.app import create_app

WRONG_KEYRING = Keyring([b"not-the-fleet-secret-0123456789"])


class BrokerFleet:
    """One Redis and one production-like worker (no --allow-local), shared by a test module."""

    def __init__(self) -> None:
        ensure_fleet_secret()
        self.redis = RedisServer().start()
        self.worker: WorkerProcess | None = None

    def start(self, **worker_kwargs: Any) -> "BrokerFleet":
        self.worker = WorkerProcess(self.redis.url, allow_local=False, concurrency=8, **worker_kwargs).start()
        return self

    @property
    def queue(self) -> str:
        assert self.worker is not None
        return names.host_queue(self.worker.host)

    def cleanup(self) -> None:
        if self.worker is not None:
            self.worker.cleanup()
        self.redis.cleanup()


@pytest.fixture(scope="module")
def broker_fleet() -> Iterator[BrokerFleet]:
    f = BrokerFleet().start()
    yield f
    f.cleanup()


@pytest.fixture
async def dispatcher(broker_fleet: BrokerFleet):  # type: ignore[no-untyped-def]
    from orchestrator.dispatch import CeleryDispatcher

    d = CeleryDispatcher(broker_fleet.redis.url)
    yield d
    await d.aclose()


def send_raw(url: str, name: str, args: list[Any], queue: str, keyring: Keyring | None, task_id: str | None = None) -> str:
    """Publish a task exactly as Celery would, signed with ``keyring`` (None: unsigned)."""
    app = create_app(url, keyring=keyring)
    task_id = task_id or uuid.uuid4().hex
    try:
        app.send_task(name, args=args, task_id=task_id, queue=queue)
    finally:
        app.close()
    return task_id


def captured(client: Any, url: str, name: str, args: list[Any], queue: str, task_id: str | None = None) -> dict[str, Any]:
    """A message signed with the fleet secret for ``queue``, as an eavesdropper captures it: published to
    a parking queue no worker reads, popped, and its destination (under the MAC) set to ``queue``."""
    import json

    keyring = load_keyring()
    parked = names.host_queue(f"nobody-{uuid.uuid4().hex[:6]}")
    send_raw(url, name, args, parked, keyring, task_id=task_id)
    envelope = json.loads(client.rpop(parked))
    headers = envelope["headers"]
    headers[DEST_HEADER] = queue
    headers[MAC_HEADER] = message_mac(keyring, headers["task"], headers["id"], envelope["body"],
                                      headers[ISSUED_HEADER], queue)
    return envelope


async def legit_call_works(dispatcher: Any, fleet: BrokerFleet) -> CallOutcome:
    """A genuine call, routed to the worker's own queue, after whatever the attack pushed there."""
    from orchestrator.dispatch import SampleRoute

    outcome = await one(dispatcher, request("add", {"x": 2, "y": 3}), route=SampleRoute(queue=fleet.queue))
    assert outcome.error is None and outcome.fatal is None, outcome
    assert outcome.result in (5, "5")
    assert fleet.worker is not None and fleet.worker.alive()
    return outcome


def wait_for_log(worker: WorkerProcess, text: str, timeout: float = 20.0) -> None:
    _wait(lambda: text in worker.output(), timeout, f"{text!r} in the worker's log")


def drain(coro: Any, bound: float = 60.0) -> Any:
    return asyncio.wait_for(coro, bound)
