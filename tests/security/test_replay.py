"""Replaying captured, genuinely signed messages.

Before: the MAC covered neither time nor destination, and re-pushing one captured ``open_sandbox``
five times opened five sandboxes and ran setup five times. Now: the MAC covers the issue time and
the destination queue; a worker refuses a message older than the window (900 s), from more than 60 s
in the future, or for another queue, and remembers consumed ids for the window (an open by one
``SET NX EX``, a call by its claim). Against a real redis-server, a real worker and real Docker.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from orchestrator._wire import CallRequest, SandboxSpec
from orchestrator.tool._registry import ToolRef
from tests.distributed._helpers import starts
from tests.support import sample_tools
from tests.support.fleet import _wait
from workers.fleet import ISSUED_HEADER, MAC_HEADER, load_keyring, message_mac, names, verify_outcome

from ._broker_support import (  # noqa: F401 - fixtures, requested by name
    broker_fleet,
    captured,
    dispatcher,
    fresh_fleet,
    legit_call_works,
    log_mark,
    rejections,
    wait_for_log,
)

pytestmark = pytest.mark.celery


def _record(path: str, label: str) -> dict:
    return CallRequest(call_id=uuid.uuid4().hex, function="record",
                       tool=ToolRef(name="record", module=sample_tools.__name__),
                       arguments={"path": path, "label": label}).model_dump(mode="json")


@pytest.mark.docker
async def test_a_replayed_open_sandbox_opens_once(broker_fleet, dispatcher, sandbox_image) -> None:  # noqa: F811 - the imported fixture
    import docker

    eval_id = f"replay-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(eval_id=eval_id, sample_id="s", config={"type": "docker", "pool_size": 0}, setup="true")
    client = broker_fleet.redis.client()
    envelope = captured(client, broker_fleet.redis.url, names.TASK_OPEN_SANDBOX, [spec.model_dump(mode="json"), None],
                        broker_fleet.queue)
    task_id = envelope["headers"]["id"]
    docker_client = docker.from_env()

    def containers() -> list:
        return docker_client.containers.list(all=True, filters={"label": f"toolfleet.eval_id={eval_id}"})

    try:
        client.lpush(broker_fleet.queue, json.dumps(envelope))  # the genuine delivery
        _wait(lambda: client.get(names.result_key(task_id)) is not None, 120, "the open to finish")
        mark = log_mark(broker_fleet.worker)
        for _ in range(5):  # the replays
            client.lpush(broker_fleet.queue, json.dumps(envelope))
        wait_for_log(broker_fleet.worker, "replayed", since=mark)
        await legit_call_works(dispatcher, broker_fleet)  # queued after the copies: they were all consumed
        # ... and each copy's task has returned: a late-acked message leaves the unacked set only then
        # (a copy wrongly opening a sandbox would still be in it, creating its container).
        _wait(lambda: client.llen(broker_fleet.queue) == 0 and client.hlen("unacked") == 0, 120,
              "every copy to be acked")
        assert len(containers()) == 1
        assert json.loads(client.get(names.result_key(task_id)))["result"]["handle"]
    finally:
        for container in containers():
            container.remove(force=True)


async def test_a_replayed_call_runs_once(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    path = str(tmp_path / "starts")
    client = broker_fleet.redis.client()
    payload = _record(path, "once")
    envelope = captured(client, broker_fleet.redis.url, names.TASK_CALL, [payload], broker_fleet.queue,
                        task_id=payload["call_id"])
    for _ in range(5):
        client.lpush(broker_fleet.queue, json.dumps(envelope))
    await legit_call_works(dispatcher, broker_fleet)
    _wait(lambda: starts(path, "once") >= 1, 30, "the first copy to run")
    await legit_call_works(dispatcher, broker_fleet)
    assert starts(path, "once") == 1


async def test_a_replayed_stage_runs_each_call_once(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    """A captured ``toolfleet.stage`` message (what the dispatcher sends) pushed five times: each of its
    calls runs once; every copy is answered on the reply channel it names, the copies as replays."""
    path = str(tmp_path / "starts")
    client = broker_fleet.redis.client()
    reply = names.reply_channel(uuid.uuid4().hex)
    listener = client.pubsub()
    listener.subscribe(reply)
    payloads = [_record(path, "a"), _record(path, "b")]
    envelope = captured(client, broker_fleet.redis.url, names.TASK_STAGE, [reply, payloads], broker_fleet.queue,
                        task_id=payloads[0]["call_id"])
    try:
        for _ in range(5):
            client.lpush(broker_fleet.queue, json.dumps(envelope))
        await legit_call_works(dispatcher, broker_fleet)
        answers: list[dict] = []

        def collect() -> bool:
            message = listener.get_message(timeout=0.2)
            if message and message["type"] == "message":
                for call_id, mac, text in json.loads(message["data"]):
                    assert verify_outcome(load_keyring(), mac, call_id, text)
                    answers.append(json.loads(text))
            return len(answers) >= 10

        _wait(collect, 60, "every copy's answers")
        assert starts(path, "a") == 1 and starts(path, "b") == 1
        assert {a["result"] for a in answers} == {"a", "b"}
        assert sum(1 for a in answers if not a.get("replayed")) == 2  # the first copy ran them, the rest replayed
    finally:
        listener.close()


@pytest.mark.parametrize("reply", ["celery-task-meta-x", "toolfleet:reply:../x", "toolfleet:fleet-events", 42],
                         ids=["result-key", "path-like", "fleet-events", "not-a-string"])
async def test_a_stage_naming_another_channel_runs_nothing(fresh_fleet, dispatcher, tmp_path, reply) -> None:  # noqa: F811 - the imported fixture
    """A stage message may only name a reply channel (fixed prefix + 32 hex digits), even when signed."""
    path = str(tmp_path / "starts")
    client = fresh_fleet.redis.client()
    envelope = captured(client, fresh_fleet.redis.url, names.TASK_STAGE, [reply, [_record(path, "x")]],
                        fresh_fleet.queue)
    mark = log_mark(fresh_fleet.worker)
    client.lpush(fresh_fleet.queue, json.dumps(envelope))
    await legit_call_works(dispatcher, fresh_fleet)
    rejected = await rejections(fresh_fleet.worker, mark)
    assert [(r["reason"], r["detail"]) for r in rejected] == [("malformed stage", f"stage {envelope['headers']['id']}")]
    assert starts(path) == 0


def _signed_at(client, url: str, payload: dict, queue: str, issued: float) -> dict:  # type: ignore[no-untyped-def]
    """A message as it would have been signed at ``issued`` (the test holds the secret to make one)."""
    envelope = captured(client, url, names.TASK_CALL, [payload], queue, task_id=payload["call_id"])
    headers = envelope["headers"]
    headers[ISSUED_HEADER] = f"{issued:.3f}"
    headers[MAC_HEADER] = message_mac(load_keyring(), headers["task"], headers["id"],
                                      envelope["body"], headers[ISSUED_HEADER], queue)
    return envelope


@pytest.mark.parametrize(("age", "reason"), [(1000.0, "stale: expired"), (-300.0, "issued 300 s in the future")],
                         ids=["captured-16-min-ago", "from-the-future"])
async def test_stale_messages_are_refused(fresh_fleet, dispatcher, tmp_path, age, reason) -> None:  # noqa: F811 - the imported fixture
    path = str(tmp_path / "starts")
    client = fresh_fleet.redis.client()
    envelope = _signed_at(client, fresh_fleet.redis.url, _record(path, "stale"), fresh_fleet.queue, time.time() - age)
    mark = log_mark(fresh_fleet.worker)
    client.lpush(fresh_fleet.queue, json.dumps(envelope))
    await legit_call_works(dispatcher, fresh_fleet)
    [rejected] = await rejections(fresh_fleet.worker, mark)
    assert reason in rejected["reason"] and rejected["detail"] == "task='toolfleet.call'", rejected
    assert starts(path) == 0


async def test_a_message_for_another_queue_is_refused(fresh_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    """Captured on its way to one host (or the shared queue), pushed onto another host's queue."""
    path = str(tmp_path / "starts")
    client = fresh_fleet.redis.client()
    envelope = captured(client, fresh_fleet.redis.url, names.TASK_CALL, [_record(path, "elsewhere")],
                        names.host_queue("some-other-host"))
    mark = log_mark(fresh_fleet.worker)
    client.lpush(fresh_fleet.queue, json.dumps(envelope))
    await legit_call_works(dispatcher, fresh_fleet)
    assert await rejections(fresh_fleet.worker, mark) == [
        {"reason": "sent to another queue", "queue": fresh_fleet.queue, "detail": "task='toolfleet.call'"}]
    assert starts(path) == 0
