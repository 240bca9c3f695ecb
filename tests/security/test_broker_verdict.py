"""The transport's verdict on a decoded queue item (pure table; the attacks themselves run in
test_broker_auth.py against a real worker)."""

from __future__ import annotations

import pytest

from workers import _auth, _names
from workers._auth import Keyring
from workers.app import _message_verdict

KEYRING = Keyring([b"the-fleet-secret-for-this-table"])
OTHER = Keyring([b"somebody-elses-secret-000000000"])
QUEUE = _names.host_queue("h1")


def envelope(task: str = _names.TASK_CALL, body: str = "W1tdLHt9LHt9XQ==", ring: Keyring | None = KEYRING, **over) -> dict:
    headers = {"task": task, "id": "t-1"}
    if ring is not None:
        headers[_auth.MAC_HEADER] = _auth.message_mac(ring, task, "t-1", body)
    env = {"body": body, "content-type": "application/json", "headers": headers,
           "properties": {"delivery_tag": "tag", "delivery_info": {}}}
    env.update(over)
    return env


CASES = {
    "signed toolfleet task": (envelope(), QUEUE, None),
    "on the shared queue": (envelope(), _names.SHARED_QUEUE, None),
    "unsigned": (envelope(ring=None), QUEUE, "unauthenticated"),
    "other secret": (envelope(ring=OTHER), QUEUE, "unauthenticated"),
    "body swapped after signing": ({**envelope(), "body": "W1sxXSx7fSx7fV0="}, QUEUE, "unauthenticated"),
    "celery.accumulate, signed": (envelope(task="celery.accumulate"), QUEUE, "task name not accepted"),
    "pickle content": (envelope(**{"content-type": "application/x-python-serialize"}), QUEUE, "not a JSON task message"),
    "not a dict": ([1, 2], QUEUE, "not an envelope"),
    "no properties": ({"body": "x"}, QUEUE, "malformed envelope"),
    "numeric tag": (envelope(properties={"delivery_tag": 5}), QUEUE, "malformed envelope"),
    "pidbox: shape only": ({"body": "e30=", "properties": {"delivery_tag": "x"}}, "h1.celery.pidbox", None),
}


@pytest.mark.parametrize(("message", "queue", "verdict"), CASES.values(), ids=CASES.keys())
def test_message_verdict(message, queue, verdict) -> None:
    assert _message_verdict(message, queue, KEYRING) == verdict


def test_a_worker_without_a_keyring_accepts_no_task() -> None:
    assert _message_verdict(envelope(), QUEUE, None) == "no fleet secret on this worker"


def test_keyring_rotation_and_repr() -> None:
    old, new = b"old-secret-0123456789abcdef", b"new-secret-0123456789abcdef"
    mac_old = Keyring([old]).sign(b"x")
    both = Keyring([new, old])
    assert both.verify(mac_old, b"x") and both.verify(both.sign(b"x"), b"x")
    assert not Keyring([new]).verify(mac_old, b"x")
    assert "secret" not in repr(both) and old.decode() not in repr(both)
    with pytest.raises(_auth.MissingSecretError):
        Keyring([b"short"])
