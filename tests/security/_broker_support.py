"""Shared pieces of the broker-boundary attacks: a production-like fleet, raw publishing, legit calls."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator._wire import CallOutcome
from tests.distributed._helpers import one, request
from tests.support.fleet import RedisServer, WorkerProcess, _wait, ensure_fleet_secret
from tests.support.waits import until
from workers.app import create_app
from workers.fleet import DEST_HEADER, ISSUED_HEADER, MAC_HEADER, Keyring, load_keyring, message_mac, names

WRONG_KEYRING = Keyring([b"not-the-fleet-secret-0123456789"])


class BrokerFleet:
    """One Redis and one production-like worker (no --allow-local), shared by a test module (or, with
    ``redis``, a worker of its own on another fleet's Redis)."""

    def __init__(self, redis: RedisServer | None = None) -> None:
        ensure_fleet_secret()
        self._owns_redis = redis is None
        self.redis = redis if redis is not None else RedisServer().start()
        self.worker: WorkerProcess | None = None

    def start(self, **worker_kwargs: Any) -> BrokerFleet:
        self.worker = WorkerProcess(self.redis.url, allow_local=False, concurrency=8, **worker_kwargs).start()
        return self

    @property
    def queue(self) -> str:
        assert self.worker is not None
        return names.host_queue(self.worker.host)

    def cleanup(self) -> None:
        if self.worker is not None:
            self.worker.cleanup()
        if self._owns_redis:
            self.redis.cleanup()


@pytest.fixture(scope="module")
def broker_fleet() -> Iterator[BrokerFleet]:
    f = BrokerFleet().start()
    yield f
    f.cleanup()


@pytest.fixture
def fresh_fleet(broker_fleet: BrokerFleet) -> Iterator[BrokerFleet]:
    """A worker of this test's own on the module's Redis, for a test that reads a rejection in the
    worker's log: the worker logs at most one rejection a second per reason (the rest are counted on
    its next line), so a rejection right after another test's, for the same reason, is not logged."""
    f = BrokerFleet(broker_fleet.redis).start()
    yield f
    f.cleanup()


@pytest.fixture
async def dispatcher(broker_fleet: BrokerFleet):
    from orchestrator.dispatch import CeleryDispatcher

    d = CeleryDispatcher(broker_fleet.redis.url)
    yield d
    await d.aclose()


def send_raw(url: str, name: str, args: list[Any], queue: str, keyring: Keyring | None,
             task_id: str | None = None) -> str:
    """Publish a task exactly as Celery would, signed with ``keyring`` (None: unsigned)."""
    app = create_app(url, keyring=keyring)
    task_id = task_id or uuid.uuid4().hex
    try:
        app.send_task(name, args=args, task_id=task_id, queue=queue)
    finally:
        app.close()
    return task_id


def captured(client: Any, url: str, name: str, args: list[Any], queue: str,
             task_id: str | None = None) -> dict[str, Any]:
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


def log_mark(worker: WorkerProcess) -> int:
    """How many lines the worker's log has now: take it before an action, then wait for what follows."""
    return len(_log_lines(worker))


def log_since(worker: WorkerProcess, mark: int) -> list[str]:
    """The worker's log lines written after ``mark`` (from ``log_mark``)."""
    return _log_lines(worker)[mark:]


def wait_for_log(worker: WorkerProcess, text: str, since: int, timeout: float = 20.0) -> list[str]:
    """Wait (bounded) for a line containing ``text`` written after ``since``; the lines that match."""
    def matching() -> list[str]:
        return [line for line in log_since(worker, since) if text in line]

    _wait(matching, timeout, f"{text!r} in the worker's log after its line {since}")
    return matching()


async def rejections(worker: WorkerProcess, since: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    """The rejections the worker logged after ``since`` (waiting, bounded, for the first), as
    ``{"reason", "queue", "detail"}``; a line that counts suppressed rejections keeps that count."""
    def logged() -> list[dict[str, Any]]:
        found = []
        for line in log_since(worker, since):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == "worker.message_rejected":
                kept = {k: entry.get(k) for k in ("reason", "queue", "detail")}
                if entry.get("suppressed_since_last"):
                    kept["suppressed_since_last"] = entry["suppressed_since_last"]
                found.append(kept)
        return found

    return await until(logged, f"a rejection in the worker's log after its line {since}", timeout)


def _log_lines(worker: WorkerProcess) -> list[str]:
    return Path(worker.log.name).read_text(errors="replace").splitlines()


def drain(coro: Any, bound: float = 60.0) -> Any:
    return asyncio.wait_for(coro, bound)
