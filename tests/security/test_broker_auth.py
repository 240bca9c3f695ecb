"""Attacks on the broker → worker boundary by someone who can write to Redis but lacks the fleet secret.

Each test performs the attack against a real redis-server and a real ``toolfleet worker`` process
(started as in production: no ``--allow-local``), then checks that it failed safely: the attack did
not run, the worker logged the rejection once and is still up, and the next genuine call works.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from orchestrator._wire import CallRequest
from orchestrator.tool._registry import ToolRef
from tests.support import sample_tools
from workers.fleet import MAC_HEADER, SECRET_ENV, SECRET_FILE_ENV, load_keyring, names, outcome_mac
from workers.app import create_app

from ._broker_support import WRONG_KEYRING, broker_fleet, captured, dispatcher, legit_call_works, send_raw, wait_for_log  # noqa: F401

pytestmark = pytest.mark.celery


def _record_payload(path: Path, label: str) -> dict:
    return CallRequest(call_id=uuid.uuid4().hex, function="record",
                       tool=ToolRef(name="record", module=sample_tools.__name__),
                       arguments={"path": str(path), "label": label}).model_dump(mode="json")


@pytest.mark.parametrize("keyring", [None, WRONG_KEYRING], ids=["unsigned", "wrong-secret"])
async def test_forged_call_is_not_run(broker_fleet, dispatcher, keyring, tmp_path) -> None:  # noqa: F811
    evidence = tmp_path / "ran"
    payload = _record_payload(evidence, "forged")
    task_id = send_raw(broker_fleet.redis.url, names.TASK_CALL, [payload], broker_fleet.queue, keyring,
                       task_id=payload["call_id"])
    await legit_call_works(dispatcher, broker_fleet)  # queued after the forgery: the worker has dealt with it
    wait_for_log(broker_fleet.worker, "unauthenticated")
    assert not evidence.exists()
    assert broker_fleet.redis.client().get(names.result_key(task_id)) is None


async def test_tampered_message_is_not_run(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811
    """A genuinely signed message whose body was changed on the way (same MAC, other arguments)."""
    client = broker_fleet.redis.client()
    legit = tmp_path / "legit"
    evil = tmp_path / "evil"
    payload = _record_payload(legit, "legit")
    envelope = captured(client, broker_fleet.redis.url, names.TASK_CALL, [payload], broker_fleet.queue)
    assert envelope["headers"].get(MAC_HEADER)
    import base64

    original_envelope = json.dumps(envelope)
    body = base64.b64decode(envelope["body"]).decode().replace(str(legit), str(evil))
    envelope["body"] = base64.b64encode(body.encode()).decode()
    client.lpush(broker_fleet.queue, json.dumps(envelope))
    await legit_call_works(dispatcher, broker_fleet)
    assert not evil.exists() and not legit.exists()
    client.lpush(broker_fleet.queue, original_envelope)  # the control: the same message, untouched, runs
    from tests.support.fleet import _wait

    _wait(legit.exists, 30, "the untampered message to run")
    assert not evil.exists()


@pytest.mark.parametrize("item", [
    b"this is not json", b"\xff\xfe\x00garbage", b"[]", b"42", b'{"body": "x"}',
    b'{"properties": {"delivery_tag": 7}, "headers": {}}', b'{"properties": {"delivery_tag": "t"}, "body": 5}',
], ids=["text", "bytes", "list", "number", "no-properties", "bad-tag", "bad-body"])
async def test_junk_queue_item_costs_nothing(broker_fleet, dispatcher, item) -> None:  # noqa: F811
    """Today's 'Unrecoverable error: JSONDecodeError': one LPUSH used to stop the worker."""
    client = broker_fleet.redis.client()
    for queue in (broker_fleet.queue, names.SHARED_QUEUE):
        client.lpush(queue, item)
    await legit_call_works(dispatcher, broker_fleet)
    await legit_call_works(dispatcher, broker_fleet)
    assert broker_fleet.worker.alive()
    assert "Unrecoverable error" not in broker_fleet.worker.output()


async def test_many_junk_items_are_logged_without_flooding_the_log(broker_fleet, dispatcher) -> None:  # noqa: F811
    client = broker_fleet.redis.client()
    client.lpush(broker_fleet.queue, *[b"junk %d" % i for i in range(500)])
    await legit_call_works(dispatcher, broker_fleet)
    lines = [line for line in broker_fleet.worker.output().splitlines() if "message_rejected" in line]
    assert 1 <= len(lines) < 100


@pytest.mark.parametrize("keyring", [None, "fleet"], ids=["unsigned", "signed-with-the-fleet-secret"])
async def test_celery_builtin_tasks_are_refused(broker_fleet, dispatcher, keyring) -> None:  # noqa: F811
    """``celery.accumulate`` (and every other non-toolfleet name) is refused even when signed."""
    ring = load_keyring() if keyring == "fleet" else None
    task_id = send_raw(broker_fleet.redis.url, "celery.accumulate", [1, 2], broker_fleet.queue, ring)
    await legit_call_works(dispatcher, broker_fleet)
    wait_for_log(broker_fleet.worker, "task name not accepted")
    assert broker_fleet.redis.client().get(names.result_key(task_id)) is None


async def test_forged_result_is_not_believed(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811
    """A result written to Redis without the secret never answers for a worker."""
    import asyncio

    from orchestrator.dispatch import SampleRoute
    from tests.distributed._helpers import dispatch, request

    marker = tmp_path / "slept"
    req = request("sleeper", {"seconds": 1.5, "marker": str(marker)})
    [fut] = dispatch(dispatcher, [req], SampleRoute(queue=broker_fleet.queue))
    await asyncio.sleep(0.3)  # the call is subscribed and running
    forged = json.dumps({"v": 1, "call_id": req.call_id, "result": "FORGED", "started": 0, "completed": 0})
    client = broker_fleet.redis.client()
    # Unsigned, then signed with another secret, on the dispatcher's reply channel and stored where a
    # re-check after a reconnect would read it.
    client.publish(dispatcher._reply, json.dumps([[req.call_id, "", forged]]))
    wrong = outcome_mac(WRONG_KEYRING, req.call_id, forged)
    client.publish(dispatcher._reply, json.dumps([[req.call_id, wrong, forged]]))
    client.set(names.outcome_key(req.call_id), json.dumps([req.call_id, wrong, forged]))
    await dispatcher._calls.recheck_outcomes([dispatcher._calls.pending[req.call_id]])
    outcome = await asyncio.wait_for(fut, 60)
    assert outcome.result == "done" and marker.exists()


async def test_unsigned_cancel_and_dangerous_control_commands_are_ignored(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811
    import asyncio

    from orchestrator.dispatch import SampleRoute
    from tests.distributed._helpers import dispatch, request

    app = create_app(broker_fleet.redis.url)
    node = names.worker_nodename(broker_fleet.worker.host)
    try:
        marker = tmp_path / "slept"
        req = request("sleeper", {"seconds": 1.0, "marker": str(marker)})
        [fut] = dispatch(dispatcher, [req], SampleRoute(queue=broker_fleet.queue))
        await asyncio.sleep(0.3)
        app.control.broadcast(names.CONTROL_CANCEL, arguments={"call_ids": [req.call_id]}, destination=[node])
        app.control.broadcast("shutdown", destination=[node])
        app.control.broadcast("pool_shrink", arguments={"n": 8}, destination=[node])
        # Control messages are handled in order: a ping answered means the shutdown was handled (ignored).
        assert app.control.ping(destination=[node], timeout=10.0)
        outcome = await asyncio.wait_for(fut, 60)
        assert outcome.error is None and outcome.result == "done" and marker.exists()
    finally:
        app.close()
    await legit_call_works(dispatcher, broker_fleet)
    assert broker_fleet.worker.alive()


async def test_secret_file_and_rotation(broker_fleet, tmp_path) -> None:  # noqa: F811
    """Mid-rotation (deploy/README.md): a worker with ``--secret-file`` holding NEW then OLD serves
    orchestrators holding OLD,NEW (step 1: they sign with OLD and accept results signed with NEW) or
    NEW (step 3), and nobody else."""
    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig, SampleRoute
    from tests.distributed._helpers import one, request
    from tests.support.fleet import WorkerProcess, ensure_fleet_secret

    old, new = ensure_fleet_secret(), "a-new-fleet-secret-" + uuid.uuid4().hex
    secret_file = tmp_path / "fleet-secret"
    secret_file.write_text(f"# newest first\n{new}\n{old}\n")
    worker = WorkerProcess(broker_fleet.redis.url, allow_local=False, secret="",
                           extra_args=("--secret-file", str(secret_file))).start()
    route = SampleRoute(queue=names.host_queue(worker.host))
    try:
        for secret, works in ((f"{old},{new}", True), (new, True), ("some-other-secret-" + uuid.uuid4().hex, False)):
            d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=broker_fleet.redis.url, secret=secret,
                                                               call_grace=0.0))
            try:
                outcome = await one(d, request("add", {"x": 1, "y": 1}, timeout=3.0), route=route, bound=30)
            finally:
                await d.aclose()
            if works:
                assert outcome.error is None and outcome.result in (2, "2"), outcome
            else:
                # Refused, and said so at once (issue 20): not a silent wait until the call's deadline.
                assert outcome.fatal is not None and outcome.fatal.type == "FleetMisconfigured", outcome
                assert "rejects this orchestrator's messages (unauthenticated)" in outcome.fatal.message
        assert worker.alive()
    finally:
        worker.cleanup()


def test_worker_refuses_to_start_without_a_secret(broker_fleet) -> None:  # noqa: F811
    import os
    import subprocess
    import sys

    from tests.support.fleet import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, SECRET_FILE_ENV)}
    proc = subprocess.run([sys.executable, "-m", "workers.cli", "--broker", broker_fleet.redis.url],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "No fleet secret" in proc.stderr
