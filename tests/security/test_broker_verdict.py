"""The transport's verdict on a decoded queue item (pure table; the attacks themselves run in
test_broker_auth.py against a real worker)."""

from __future__ import annotations

import pytest

from workers.app import _message_verdict
from workers.fleet import DEST_HEADER, ISSUED_HEADER, MAC_HEADER, Keyring, MissingSecretError, message_mac, names

KEYRING = Keyring([b"the-fleet-secret-for-this-table"])
OTHER = Keyring([b"somebody-elses-secret-000000000"])
QUEUE = names.host_queue("h1")


NOW = 1_800_000_000.0


def envelope(task: str = names.TASK_CALL, body: str = "W1tdLHt9LHt9XQ==", ring: Keyring | None = KEYRING,
             issued: float = NOW - 1, dest: str = QUEUE, **over) -> dict:
    headers = {"task": task, "id": "t-1", ISSUED_HEADER: f"{issued:.3f}", DEST_HEADER: dest}
    if ring is not None:
        headers[MAC_HEADER] = message_mac(ring, task, "t-1", body, headers[ISSUED_HEADER], dest)
    env = {"body": body, "content-type": "application/json", "headers": headers,
           "properties": {"delivery_tag": "tag", "delivery_info": {}}}
    env.update(over)
    return env


CASES = {
    "signed toolfleet task": (envelope(), QUEUE, None),
    "on the shared queue": (envelope(dest=names.SHARED_QUEUE), names.SHARED_QUEUE, None),
    # Replay (tests/security/test_replay.py): issue time and destination are under the MAC.
    "pushed onto another queue": (envelope(), names.SHARED_QUEUE, "sent to another queue"),
    "pushed onto another host": (envelope(), names.host_queue("h2"), "sent to another queue"),
    "replayed 16 minutes later": (envelope(issued=NOW - 960), QUEUE,
                                  "stale: expired (issued 960 s ago, limit 900 s; or clock skew)"),
    "14 minutes in the queue": (envelope(issued=NOW - 840), QUEUE, None),
    "from 2 minutes in the future": (envelope(issued=NOW + 120), QUEUE,
                                     "stale: issued 120 s in the future (clock skew over 60 s)"),
    "30 s of skew": (envelope(issued=NOW + 30), QUEUE, None),
    "issue time changed after signing": ({**envelope(),
                                          "headers": {**envelope()["headers"], ISSUED_HEADER: f"{NOW:.3f}"}},
                                         QUEUE, "unauthenticated"),
    "destination changed after signing": ({**envelope(),
                                           "headers": {**envelope()["headers"], DEST_HEADER: names.host_queue("h2")}},
                                          names.host_queue("h2"), "unauthenticated"),
    "unsigned": (envelope(ring=None), QUEUE, "unauthenticated"),
    "other secret": (envelope(ring=OTHER), QUEUE, "unauthenticated"),
    "body swapped after signing": ({**envelope(), "body": "W1sxXSx7fSx7fV0="}, QUEUE, "unauthenticated"),
    "celery.accumulate, signed": (envelope(task="celery.accumulate"), QUEUE, "task name not accepted"),
    "pickle content": (envelope(**{"content-type": "application/x-python-serialize"}), QUEUE,
                       "not a JSON task message"),
    "not a dict": ([1, 2], QUEUE, "not an envelope"),
    "no properties": ({"body": "x"}, QUEUE, "malformed envelope"),
    "numeric tag": (envelope(properties={"delivery_tag": 5}), QUEUE, "malformed envelope"),
    "pidbox: shape only": ({"body": "e30=", "properties": {"delivery_tag": "x"}}, "h1.celery.pidbox", None),
}


@pytest.mark.parametrize(("message", "queue", "verdict"), CASES.values(), ids=CASES.keys())
def test_message_verdict(message, queue, verdict) -> None:
    assert _message_verdict(message, queue, KEYRING, now=NOW) == verdict


def test_a_worker_without_a_keyring_accepts_no_task() -> None:
    assert _message_verdict(envelope(), QUEUE, None, now=NOW) == "no fleet secret on this worker"


def test_keyring_rotation_and_repr() -> None:
    old, new = b"old-secret-0123456789abcdef", b"new-secret-0123456789abcdef"
    mac_old = Keyring([old]).sign(b"x")
    both = Keyring([new, old])
    assert both.verify(mac_old, b"x") and both.verify(both.sign(b"x"), b"x")
    assert not Keyring([new]).verify(mac_old, b"x")
    assert "secret" not in repr(both) and old.decode() not in repr(both)
    with pytest.raises(MissingSecretError):
        Keyring([b"short"])
