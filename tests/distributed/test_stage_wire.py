"""The stage wire (pure parts, table-tested): one message per (stage, queue), reply channels, reply items."""

from __future__ import annotations

import asyncio
import json

import pytest

from orchestrator.dispatch._calls import Pending, _stage_messages
from workers.fleet import Keyring, names, outcome_mac, parse_items, read_stored

REPLY = names.reply_channel("0" * 32)
KEYRING = Keyring([b"k" * 32])


def _rec(call_id: str, queue: str) -> Pending:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
    finally:
        loop.close()
    return Pending(task_id=call_id, future=future, kind="call", function="bash",
                    payload={"call_id": call_id, "sample_id": "s", "sandbox": "sb"}, queue=queue, host=None, boot=None)


def test_one_message_per_queue_in_declared_order() -> None:
    recs = [_rec("a", "q1"), _rec("b", "q2"), _rec("c", "q1"), _rec("d", "q1")]
    messages = _stage_messages(recs, REPLY)
    assert [(m.queue, m.task_id, m.name) for m in messages] == [("q1", "a", names.TASK_STAGE),
                                                                ("q2", "b", names.TASK_STAGE)]
    reply, payloads = messages[0].args
    assert reply == REPLY and [p["call_id"] for p in payloads] == ["a", "c", "d"]
    assert [item["call_id"] for item in json.loads(messages[0].argsrepr or "")] == ["a", "c", "d"]


def test_a_stage_larger_than_a_message_is_split() -> None:
    recs = [_rec(f"c{i}", "q") for i in range(names.MAX_STAGE_CALLS + 3)]
    messages = _stage_messages(recs, REPLY)
    assert [len(m.args[1]) for m in messages] == [names.MAX_STAGE_CALLS, 3]
    assert messages[1].task_id == f"c{names.MAX_STAGE_CALLS}"


@pytest.mark.parametrize(("channel", "ok"), [
    (names.reply_channel("ab" * 16), True),
    (names.reply_channel("AB" * 16), False),
    (names.reply_channel("ab" * 15), False),
    (names.reply_channel("ab" * 16) + "x", False),
    ("celery-task-meta-" + "ab" * 16, False),
    (names.FLEET_EVENTS_CHANNEL, False),
    (None, False),
    (["toolfleet:reply:"], False),
])
def test_only_reply_channels_are_accepted(channel, ok) -> None:  # type: ignore[no-untyped-def]
    assert names.is_reply_channel(channel) is ok


@pytest.mark.parametrize(("data", "n"), [
    (b"not json", 0), (b"{}", 0), (b"[]", 0), (b"[1, 2, 3]", 0), (b'["a", "m", "{}"]', 1),
    (b'[["a", "m", "{}"], ["b", "m", "{}"]]', 2), (b'[["a", "m", "{}"], ["b", 7, "{}"], "junk"]', 1), (None, 0),
])
def test_reply_items_from_untrusted_bytes(data, n) -> None:  # type: ignore[no-untyped-def]
    assert len(parse_items(data)) == n


def test_a_stored_outcome_counts_only_when_signed_for_that_call() -> None:
    text = '{"call_id":"a"}'
    good = json.dumps(["a", outcome_mac(KEYRING, "a", text), text])
    assert read_stored(KEYRING, "a", good) == text
    assert read_stored(KEYRING, "b", good) is None  # another call's answer
    assert read_stored(KEYRING, "a", json.dumps(["a", outcome_mac(KEYRING, "a", text + " "), text])) is None
    assert read_stored(KEYRING, "a", json.dumps(["a", "", text])) is None


@pytest.mark.slow  # starts a redis-server
async def test_streaming_outcomes_share_a_pipeline_and_an_occasional_one_goes_at_once(redis_server) -> None:
    """A worker's first outcome after a quiet spell is flushed on the next loop tick; outcomes that
    follow within moments of a flush wait ``REPLY_LINGER_S`` so they go out together. Every one reaches
    the reply channel and the outcome store."""
    import redis.asyncio as aredis

    from workers.fleet import ReplySender

    client = aredis.Redis.from_url(redis_server.url)
    pubsub = client.pubsub()
    await pubsub.subscribe(REPLY)
    await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    # Windows wide enough that a loaded machine's scheduling cannot change what happens.
    sender = ReplySender(client, KEYRING, redis_server.url, streaming_s=60.0, linger_s=0.5)
    try:
        sender.send(REPLY, "c0", '{"call_id":"c0"}')
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sender.flushes == 1  # at once: nothing was streaming
        for _ in range(100):  # bounded: until Redis took it
            if sender.sent == 1:
                break
            await asyncio.sleep(0.01)
        for i in range(1, 4):  # three more, each on a later tick, while "streaming"
            sender.send(REPLY, f"c{i}", json.dumps({"call_id": f"c{i}"}))
            await asyncio.sleep(0)
        for _ in range(100):
            if sender.sent == 4:
                break
            await asyncio.sleep(0.01)
        assert (sender.flushes, sender.sent) == (2, 4)
        items = []
        for _ in range(20):
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None:
                items += parse_items(message["data"])
            if len(items) == 4:
                break
        assert sorted(item[0] for item in items) == ["c0", "c1", "c2", "c3"]
        assert await client.exists(*[names.outcome_key(f"c{i}") for i in range(4)]) == 4
    finally:
        await pubsub.aclose()
        await client.aclose()
