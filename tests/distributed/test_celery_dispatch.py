"""The Celery dispatcher's protocol against a real Redis and a real `toolfleet worker` process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
from tests.support.waits import until
from workers.fleet import names

from ._helpers import dispatch, local_spec, one, request, starts

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]


@pytest.fixture
async def celery_dispatcher(session_worker):
    d = CeleryDispatcher(session_worker.broker_url)
    yield d
    await d.aclose()


async def test_parallel_stage_resolves_every_call_in_order(celery_dispatcher) -> None:
    futures = dispatch(celery_dispatcher, [request("add", {"x": i, "y": 1}) for i in range(8)])
    outcomes = await asyncio.wait_for(asyncio.gather(*futures), 30)
    assert [o.result for o in outcomes] == [i + 1 for i in range(8)]
    assert all(o.host is not None and not o.replayed for o in outcomes)


async def test_unregistered_tool_is_refused_naming_its_module(celery_dispatcher) -> None:
    outcome = await one(celery_dispatcher, request("not_a_tool", module="mypkg.tools"))
    assert outcome.fatal is not None and outcome.fatal.type == "ToolNotRegisteredError"
    assert "not_a_tool" in outcome.fatal.message and "--import mypkg.tools" in outcome.fatal.message


async def test_malformed_request_is_refused_not_run(celery_dispatcher) -> None:
    task_id = uuid.uuid4().hex
    [raw] = await _expect(celery_dispatcher, task_id)
    celery_dispatcher.app.send_task(names.TASK_CALL, args=[{"call_id": task_id, "function": 42}], task_id=task_id,
                                    queue=names.SHARED_QUEUE)
    meta = await asyncio.wait_for(raw, 30)
    assert meta["status"] == "SUCCESS"
    assert meta["result"]["fatal"]["type"] == "InvalidCallRequest"


async def test_oversized_arguments_are_refused_before_sending(session_worker) -> None:
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=session_worker.broker_url, max_payload_bytes=1024))
    try:
        outcome = await one(d, request("text_of_size", {"n": 1, "char": "x" * 2000}))
    finally:
        await d.aclose()
    assert outcome.error is not None and outcome.error.type == "limit"
    assert "payload limit of 1024 bytes" in outcome.error.message


async def test_oversized_payload_is_refused_by_the_worker(celery_dispatcher) -> None:
    task_id = uuid.uuid4().hex
    [raw] = await _expect(celery_dispatcher, task_id)
    big = request("text_of_size", {"n": 1, "char": "x" * (9 * 1024 * 1024)}, call_id=task_id)
    payload = big.model_dump(mode="json")
    await asyncio.to_thread(celery_dispatcher.app.send_task, names.TASK_CALL, args=[payload], task_id=task_id,
                            queue=names.SHARED_QUEUE)
    meta = await asyncio.wait_for(raw, 60)
    assert meta["result"]["error"]["type"] == "limit" and "payload limit" in meta["result"]["error"]["message"]


async def test_a_redelivered_call_is_answered_from_memory_not_run_again(
    celery_dispatcher, session_worker, tmp_path) -> None:
    log = str(tmp_path / "log")
    req = request("record", {"path": log, "label": "once"})
    first = await one(celery_dispatcher, req)
    assert first.result == "once" and not first.replayed
    # Redeliver the same task (same call id = same task id), as the broker does after a lost ack.
    redelivered = await _send_again(celery_dispatcher, req.model_dump(mode="json"), req.call_id)
    assert redelivered["result"] == "once" and redelivered["replayed"] is True
    assert starts(log, "once") == 1


async def test_a_duplicate_of_a_running_call_waits_for_it_instead_of_running(celery_dispatcher, tmp_path) -> None:
    log = str(tmp_path / "log")
    req = request("record", {"path": log, "label": "slow", "delay": 1.0})
    [fut] = dispatch(celery_dispatcher, [req])
    for _ in range(200):  # bounded: until the first copy has started
        if starts(log, "slow"):
            break
        await asyncio.sleep(0.02)
    duplicate = _send_again(celery_dispatcher, req.model_dump(mode="json"), req.call_id)
    first, second = await asyncio.wait_for(asyncio.gather(fut, duplicate), 30)
    assert first.result == "slow" and second["result"] == "slow" and second["replayed"] is True
    assert starts(log, "slow") == 1


async def test_sandbox_results_are_subscribed_while_pending_and_unsubscribed_once_resolved(fleet, tmp_path) -> None:
    """Sandbox opens and closes wait for their Celery result on ``celery-task-meta-<id>`` (calls use the
    dispatcher's reply channel instead): Redis lists each channel while its task is pending, and none
    once every task has resolved. A one-thread worker holds the tasks back: an open whose setup waits
    for a gate file, and behind it a close."""
    fleet.worker(concurrency=1)
    client = fleet.redis.client()
    gate, started = tmp_path / "gate", tmp_path / "started"
    held = SandboxSpec(eval_id=f"e-subs-{uuid.uuid4().hex[:8]}", sample_id="held", config={"type": "local"},
                       setup=f"touch {started}; while [ ! -e {gate} ]; do sleep 0.05; done")
    d = CeleryDispatcher(fleet.redis.url)
    opening = closing = None
    try:
        await d.start()
        assert _meta_channels(client) == set()  # the dispatcher's own channels are not per task
        first = await asyncio.wait_for(d.open_sandbox(local_spec("first")), 30)
        await until(lambda: not _meta_channels(client), "the first open's channel to be unsubscribed")
        opening = asyncio.ensure_future(d.open_sandbox(held))
        await until(started.exists, "the held open's setup to run")
        closing = asyncio.ensure_future(d.close_sandbox(first))  # queued behind the held open
        await until(lambda: len(d._listener.pending_ids()) == 2, "the close to be sent")
        pending = {names.result_key(t) for t in d._listener.pending_ids()}
        await until(lambda: _meta_channels(client) == pending, "Redis to list both pending tasks' channels")
        gate.touch()
        second = await asyncio.wait_for(opening, 30)
        await asyncio.wait_for(closing, 30)
        await until(lambda: not _meta_channels(client), "the resolved tasks' channels to be unsubscribed")
        assert d._listener.pending_ids() == []
        await asyncio.wait_for(d.close_sandbox(second), 30)
        await until(lambda: not _meta_channels(client), "the last close's channel to be unsubscribed")
    finally:
        gate.touch()
        for task in (opening, closing):
            if task is not None and not task.done():
                task.cancel()
        await d.aclose()


def _meta_channels(client) -> set[str]:  # type: ignore[no-untyped-def]
    """The Celery result channels someone is subscribed to, as Redis itself reports (PUBSUB CHANNELS)."""
    return {c.decode() for c in client.pubsub_channels(f"{names.RESULT_PREFIX}*")}


def _celery(broker: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLFLEET_BROKER": broker}
    return subprocess.run([sys.executable, "-m", "celery", "-A", "workers.app", *args], env=env,
                          capture_output=True, text=True, timeout=60)


async def test_celery_inspect_sees_the_fleet_and_its_running_calls(celery_dispatcher, session_worker, tmp_path) -> None:
    node = names.worker_nodename(session_worker.host)
    ping = await asyncio.to_thread(_celery, session_worker.broker_url, "inspect", "ping", "-d", node, "--timeout", "10")
    assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr
    log = str(tmp_path / "log")
    [fut] = dispatch(celery_dispatcher, [request("record", {"path": log, "label": "seen", "delay": 20.0})])
    for _ in range(200):
        if starts(log, "seen"):
            break
        await asyncio.sleep(0.02)
    active = await asyncio.to_thread(_celery, session_worker.broker_url, "inspect", "active", "-d", node, "--json",
                                     "--timeout", "10")
    assert active.returncode == 0, active.stderr
    running = json.loads(active.stdout)[node]
    assert any(t.get("name") == names.TASK_STAGE for t in running), active.stdout
    fut.cancel()  # the worker stops it (toolfleet_cancel control command)


class _EventTap:
    """Celery's own event receiver (what Flower runs), capturing in a thread until stopped."""

    def __init__(self, broker: str) -> None:
        from workers.app import create_app

        self.app = create_app(broker)
        self.events: list[dict] = []
        self._receiver = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.app.connection_for_read() as conn:
            self._receiver = self.app.events.Receiver(conn, handlers={"*": self.events.append})
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def start(self) -> _EventTap:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(10)
        self.app.close()

    def task_events(self, task_id: str) -> dict[str, dict]:
        return {e["type"]: e for e in list(self.events) if e.get("uuid") == task_id}


async def test_task_events_for_flower_are_off_until_switched_on_as_flower_does(
    celery_dispatcher, session_worker) -> None:
    broker, node = session_worker.broker_url, names.worker_nodename(session_worker.host)
    tap = _EventTap(broker).start()
    try:
        for _ in range(100):  # the tap is live once it hears the worker's heartbeat (every 2 s)
            if any(e.get("type") == "worker-heartbeat" for e in list(tap.events)):
                break
            await asyncio.sleep(0.1)
        assert any(e.get("type") == "worker-heartbeat" for e in list(tap.events))
        # Off by default (they cost the worker ~15% CPU a call): calls go through, no task events.
        for _ in range(3):
            quiet = request("noop")
            await one(celery_dispatcher, quiet)
        # The worker's next heartbeat comes after whatever it sent about those calls: once it is heard,
        # any task event of theirs would have been too.
        heard = _heartbeats(tap)
        await until(lambda: _heartbeats(tap) > heard, "a worker heartbeat sent after the quiet calls")
        assert tap.task_events(quiet.call_id) == {}
        # Flower's start-up sends `enable_events`; then every call shows up with what it is.
        enabled = await asyncio.to_thread(_celery, broker, "control", "enable_events", "-d", node, "--timeout", "10")
        assert enabled.returncode == 0 and "enabled" in enabled.stdout.lower(), enabled.stdout + enabled.stderr
        for _ in range(60):  # bounded: the receiver subscribes asynchronously
            seen = request("noop")
            await one(celery_dispatcher, seen)
            await asyncio.sleep(0.5)
            events = tap.task_events(seen.call_id)
            if "task-succeeded" in events and "task-received" in events:
                break
        assert {"task-received", "task-succeeded"} <= set(events), events
        assert events["task-received"]["name"] == names.TASK_STAGE
        assert json.loads(events["task-received"]["args"]) == [
            {"function": "noop", "call_id": seen.call_id, "sample_id": seen.sample_id, "sandbox": None}]
    finally:
        await asyncio.to_thread(_celery, broker, "control", "disable_events", "-d", node, "--timeout", "10")
        await asyncio.to_thread(tap.stop)


def _heartbeats(tap: _EventTap) -> int:
    return sum(1 for e in list(tap.events) if e.get("type") == "worker-heartbeat")


# --- helpers ------------------------------------------------------------------------------------

async def _expect(d: CeleryDispatcher, task_id: str):  # type: ignore[no-untyped-def]
    await d.start()
    return await d._listener.expect([task_id])


async def _send_again(d: CeleryDispatcher, payload: dict, call_id: str) -> dict:
    """Deliver another copy of a call and return that copy's answer.

    The copy carries the same call id but travels under a fresh task id: Celery never overwrites a
    stored SUCCESS, so this is how a test can read the second delivery's own answer.
    """
    task_id = uuid.uuid4().hex
    [raw] = await _expect(d, task_id)
    assert payload["call_id"] == call_id
    await asyncio.to_thread(d.app.send_task, names.TASK_CALL, args=[payload], task_id=task_id, queue=names.SHARED_QUEUE)
    meta = await asyncio.wait_for(raw, 30)
    return meta["result"]


async def test_every_consumed_message_is_acked(celery_dispatcher, redis_server, tmp_path) -> None:
    """Acks are batched on the worker (one ZREM + HDEL per loop tick): all of them reach Redis, so no
    finished message waits in the unacked set to be redelivered after the visibility timeout."""
    client = redis_server.client()
    log = str(tmp_path / "log")
    [slow] = dispatch(celery_dispatcher, [request("record", {"path": log, "label": "slow", "delay": 1.0})])
    for _ in range(200):  # bounded: until it runs
        if starts(log, "slow"):
            break
        await asyncio.sleep(0.02)
    assert client.hlen("unacked") >= 1  # a running call's message is reserved, not acked (late ack)
    await asyncio.wait_for(slow, 30)
    await asyncio.wait_for(asyncio.gather(*dispatch(celery_dispatcher, [request("noop") for _ in range(12)])), 30)
    await one(celery_dispatcher, request("noop"))
    for _ in range(100):  # bounded: the last ack goes out at the worker's next loop tick
        if client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0:
            break
        await asyncio.sleep(0.05)
    assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0


async def test_stages_dispatched_together_share_one_message_and_each_splices_in_order(celery_dispatcher) -> None:
    """Stages of several samples dispatched in one loop tick go out as one message per queue; the
    worker answers each call on the reply channel and every stage still gets its own outcomes."""
    before = len(celery_dispatcher.published)
    stages = [dispatch(celery_dispatcher, [request("add", {"x": 10 * s
                                                           + i, "y": 1}) for i in range(3)]) for s in range(4)]
    outcomes = [await asyncio.wait_for(asyncio.gather(*futures), 30) for futures in stages]
    assert [[o.result for o in stage] for stage in outcomes] == [[10 * s + i + 1 for i in range(3)] for s in range(4)]
    assert list(celery_dispatcher.published)[before:] == [(1, 12)]


@pytest.mark.parametrize(("linger", "publishes"), [(0.0, [(1, 2), (1, 2)]), (0.05, [(1, 4)])])
async def test_a_busy_dispatcher_lingers_so_later_stages_share_the_message(session_worker, linger, publishes) -> None:
    """From ``busy_calls`` calls in flight (0 here: always), a stage waits up to ``stage_linger`` for
    others; with no linger, a stage dispatched a tick later goes in a message of its own."""
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=session_worker.broker_url, stage_linger=linger,
                                                       busy_calls=0))
    try:
        await d.start()
        first = dispatch(d, [request("add", {"x": i, "y": 1}) for i in range(2)])
        await asyncio.sleep(0.01)  # a later tick (its timer fires before the linger's, however late the loop is)
        second = dispatch(d, [request("add", {"x": i, "y": 2}) for i in range(2)])
        results = [o.result for o in await asyncio.wait_for(asyncio.gather(*first, *second), 30)]
        assert results == [1, 2, 2, 3]
        assert list(d.published) == publishes
    finally:
        await d.aclose()


async def test_a_thousand_concurrent_fair_share_releases_all_land(session_worker) -> None:
    """A thousand samples closing at once each give their eval's fair-share count back through the
    dispatcher's connections; none fails for want of a connection (it waits its turn), so the eval's
    count returns to what it holds."""
    from workers.fleet import release_eval

    d = CeleryDispatcher(session_worker.broker_url)
    eval_id = f"e-release-{uuid.uuid4().hex[:8]}"
    try:
        await d.start()
        redis = d._listener.redis
        await redis.hincrby(names.EVAL_SLOTS, eval_id, 1000)
        await asyncio.wait_for(asyncio.gather(*(release_eval(redis, eval_id) for _ in range(1000))), 60)
        assert await redis.hget(names.EVAL_SLOTS, eval_id) is None  # back to nothing: the entry went at zero
    finally:
        await d.aclose()


def test_celery_inspect_stats_reports_the_keyring_without_its_secret(session_worker) -> None:
    """``celery -A workers.app inspect stats`` (the operator's view): the worker's reply carries its
    broker transport options, keyring included, as JSON (it used to fail with an EncodeError)."""
    env = {**os.environ, "TOOLFLEET_BROKER": session_worker.broker_url}
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "workers.app", "inspect", "stats", "--json",
                           "--timeout", "10"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    replies = json.loads(done.stdout.strip().splitlines()[-1])
    [stats] = list(replies.values())
    keyring = stats["broker"]["transport_options"]["toolfleet_keyring"]
    assert keyring.startswith("Keyring(1 key, signs with "), keyring
    assert stats["broker"]["transport_options"]["toolfleet_replay"] == {"max_age": 900.0, "max_skew": 60.0}
    assert session_worker.secret not in done.stdout
