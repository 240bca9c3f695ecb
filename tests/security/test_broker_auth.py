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
from tests.distributed._helpers import starts
from tests.support import sample_tools
from tests.support.waits import until
from workers.app import create_app
from workers.fleet import MAC_HEADER, SECRET_ENV, SECRET_FILE_ENV, load_keyring, names, outcome_mac

from ._broker_support import (  # noqa: F401 - fixtures, requested by name
    WRONG_KEYRING,
    broker_fleet,
    captured,
    dispatcher,
    fresh_fleet,
    legit_call_works,
    log_mark,
    log_since,
    rejections,
    send_raw,
)

pytestmark = pytest.mark.celery


def _record_payload(path: Path, label: str) -> dict:
    return CallRequest(call_id=uuid.uuid4().hex, function="record",
                       tool=ToolRef(name="record", module=sample_tools.__name__),
                       arguments={"path": str(path), "label": label}).model_dump(mode="json")


@pytest.mark.parametrize("keyring", [None, WRONG_KEYRING], ids=["unsigned", "wrong-secret"])
async def test_forged_call_is_not_run(fresh_fleet, dispatcher, keyring, tmp_path) -> None:  # noqa: F811 - the imported fixture
    evidence = tmp_path / "ran"
    payload = _record_payload(evidence, "forged")
    mark = log_mark(fresh_fleet.worker)
    task_id = send_raw(fresh_fleet.redis.url, names.TASK_CALL, [payload], fresh_fleet.queue, keyring,
                       task_id=payload["call_id"])
    await legit_call_works(dispatcher, fresh_fleet)  # queued after the forgery: the worker has dealt with it
    assert await rejections(fresh_fleet.worker, mark) == [
        {"reason": "unauthenticated", "queue": fresh_fleet.queue, "detail": "task='toolfleet.call'"}]
    assert not evidence.exists()
    assert fresh_fleet.redis.client().get(names.result_key(task_id)) is None


async def test_tampered_message_is_not_run(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
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
async def test_junk_queue_item_costs_nothing(broker_fleet, dispatcher, item) -> None:  # noqa: F811 - the imported fixture
    """Today's 'Unrecoverable error: JSONDecodeError': one LPUSH used to stop the worker."""
    client = broker_fleet.redis.client()
    mark = log_mark(broker_fleet.worker)
    for queue in (broker_fleet.queue, names.SHARED_QUEUE):
        client.lpush(queue, item)
    await legit_call_works(dispatcher, broker_fleet)
    await legit_call_works(dispatcher, broker_fleet)
    assert broker_fleet.worker.alive()
    assert not [line for line in log_since(broker_fleet.worker, mark) if "Unrecoverable error" in line]


async def test_many_junk_items_are_logged_without_flooding_the_log(fresh_fleet, dispatcher) -> None:  # noqa: F811 - the imported fixture
    client = fresh_fleet.redis.client()
    mark = log_mark(fresh_fleet.worker)
    client.lpush(fresh_fleet.queue, *[b"junk %d" % i for i in range(500)])
    await legit_call_works(dispatcher, fresh_fleet)  # queued after the junk: all of it was consumed
    lines = [line for line in log_since(fresh_fleet.worker, mark) if "message_rejected" in line]
    assert 1 <= len(lines) < 100
    assert all('"reason": "not JSON"' in line for line in lines)


@pytest.mark.parametrize("keyring", [None, "fleet"], ids=["unsigned", "signed-with-the-fleet-secret"])
async def test_celery_builtin_tasks_are_refused(fresh_fleet, dispatcher, keyring) -> None:  # noqa: F811 - the imported fixture
    """``celery.accumulate`` (and every other non-toolfleet name) is refused even when signed."""
    ring = load_keyring() if keyring == "fleet" else None
    mark = log_mark(fresh_fleet.worker)
    task_id = send_raw(fresh_fleet.redis.url, "celery.accumulate", [1, 2], fresh_fleet.queue, ring)
    await legit_call_works(dispatcher, fresh_fleet)
    assert await rejections(fresh_fleet.worker, mark) == [
        {"reason": "task name not accepted", "queue": fresh_fleet.queue, "detail": "task='celery.accumulate'"}]
    assert fresh_fleet.redis.client().get(names.result_key(task_id)) is None


async def test_forged_result_is_not_believed(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    """A result written to Redis without the secret never answers for a worker."""
    import asyncio

    from orchestrator.dispatch import SampleRoute
    from tests.distributed._helpers import dispatch, request

    log, gate = str(tmp_path / "log"), tmp_path / "gate"
    req = request("gated", {"path": log, "label": "real", "gate": str(gate)})
    [fut] = dispatch(dispatcher, [req], SampleRoute(queue=broker_fleet.queue))
    await until(lambda: starts(log, "real") == 1, "the call to be running")  # it waits for the gate: pending
    forged = json.dumps({"v": 1, "call_id": req.call_id, "result": "FORGED", "started": 0, "completed": 0})
    client = broker_fleet.redis.client()
    # Unsigned, then signed with another secret, on the dispatcher's reply channel and stored where a
    # re-check after a reconnect would read it.
    client.publish(dispatcher._reply, json.dumps([[req.call_id, "", forged]]))
    wrong = outcome_mac(WRONG_KEYRING, req.call_id, forged)
    client.publish(dispatcher._reply, json.dumps([[req.call_id, wrong, forged]]))
    client.set(names.outcome_key(req.call_id), json.dumps([req.call_id, wrong, forged]))
    await dispatcher._calls.recheck_outcomes([dispatcher._calls.pending[req.call_id]])
    await legit_call_works(dispatcher, broker_fleet)  # a later answer on the same reply channel went through
    assert not fut.done()  # none of the forgeries answered the call
    gate.touch()
    outcome = await asyncio.wait_for(fut, 60)
    assert (outcome.result, outcome.error) == ("real", None)
    assert [line.split()[0] for line in Path(log).read_text().splitlines()] == ["start", "end"]


async def test_unsigned_cancel_and_dangerous_control_commands_are_ignored(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    """A running call (it waits for a gate file, so it is surely running when the commands arrive) is
    not stopped by an unsigned cancel, and the worker answers each command with its refusal (shutdown
    and pool_shrink are not on its control panel at all); the call then finishes as it would have."""
    import asyncio

    from orchestrator.dispatch import SampleRoute
    from tests.distributed._helpers import dispatch, request

    app = create_app(broker_fleet.redis.url)
    node = names.worker_nodename(broker_fleet.worker.host)
    log, gate = str(tmp_path / "log"), tmp_path / "gate"
    req = request("gated", {"path": log, "label": "running", "gate": str(gate)})
    [fut] = dispatch(dispatcher, [req], SampleRoute(queue=broker_fleet.queue))
    try:
        await until(lambda: starts(log, "running") == 1, "the call to be running")

        def ask(command: str, **arguments: object) -> list[dict]:
            return app.control.broadcast(command, arguments=arguments, destination=[node], reply=True, timeout=10.0)

        assert await asyncio.to_thread(ask, names.CONTROL_CANCEL, call_ids=[req.call_id]) == [
            {node: {"error": "unauthenticated"}}]
        # Removed from the worker's control panel: Celery answers that it has no such command.
        assert await asyncio.to_thread(ask, "shutdown") == [{node: {"error": "KeyError('shutdown')"}}]
        assert await asyncio.to_thread(ask, "pool_shrink", n=8) == [{node: {"error": "KeyError('pool_shrink')"}}]
        assert not fut.done()  # still running: the cancel stopped nothing
        gate.touch()
        outcome = await asyncio.wait_for(fut, 60)
        assert (outcome.result, outcome.error) == ("running", None)
        assert [line.split()[0] for line in Path(log).read_text().splitlines()] == ["start", "end"]
    finally:
        gate.touch()
        app.close()
    await legit_call_works(dispatcher, broker_fleet)
    assert broker_fleet.worker.alive()


async def test_secret_file_and_rotation(broker_fleet, tmp_path) -> None:  # noqa: F811 - the imported fixture
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
                # Refused by the worker, not run. Sent straight to its queue (an eval's preflight would have
                # stopped at once: test_misconfiguration), the call ends at its deadline: the worker's event
                # is signed with a key this orchestrator does not hold, so it cannot be told from a forgery
                # and stops nothing (test_fleet_events), but the timeout says what it said.
                assert outcome.error is not None and outcome.error.type == "timeout", outcome
                assert (f"timed out after 3 seconds: an unsigned fleet event said: Worker host '{worker.host}' "
                        "rejects this orchestrator's messages (unauthenticated)") in outcome.error.message, outcome
        assert worker.alive()
    finally:
        worker.cleanup()


def test_worker_refuses_to_start_without_a_secret(broker_fleet) -> None:  # noqa: F811 - the imported fixture
    import os
    import subprocess
    import sys

    from tests.support.fleet import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, SECRET_FILE_ENV)}
    proc = subprocess.run([sys.executable, "-m", "workers.cli", "--broker", broker_fleet.redis.url],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "No fleet secret" in proc.stderr
