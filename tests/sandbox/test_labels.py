"""The reaper's decision table (pure): expired, orphaned, exited, or kept."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from workers.sandbox.docker._labels import (
    EXPIRY,
    HOST,
    MACHINE,
    OWNER,
    OWNER_PID,
    OWNER_STARTED,
    container_labels,
    owner_labels,
    reap_reason,
)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _info(labels: dict[str, str], state: str = "running", cid: str = "c1") -> dict:
    return {"Id": cid, "Labels": labels, "State": state}


NOW = time.time()
MINE = {**owner_labels(), EXPIRY: str(int(NOW + 3600))}


@pytest.mark.parametrize(
    ("labels", "state", "live", "expected"),
    [
        (MINE, "running", (), None),
        (MINE, "running", ("c1",), None),
        ({**MINE, EXPIRY: str(int(NOW - 5))}, "running", (), "expired"),
        ({**MINE, EXPIRY: str(int(NOW - 5))}, "running", ("c1",), None),  # held by a live driver
        ({**MINE, EXPIRY: "garbage"}, "running", (), "expired"),
        ({**MINE, OWNER_PID: str(_dead_pid())}, "running", (), "orphaned"),
        ({**MINE, OWNER_STARTED: "1"}, "running", (), "orphaned"),  # pid reused by another process
        ({**MINE, OWNER: "another-host", MACHINE: "another-host", OWNER_PID: "1"}, "running", (), None),
        ({**MINE, OWNER: "another-host", EXPIRY: str(int(NOW - 1))}, "running", (), "expired"),
        (MINE, "exited", (), "exited"),
        (MINE, "dead", (), "exited"),
        (MINE, "created", (), None),  # this process is starting it (not yet recorded as held)
        ({**MINE, OWNER_PID: str(_dead_pid())}, "created", (), "orphaned"),
    ],
)
def test_reap_reason(labels, state, live, expected):
    assert reap_reason(_info(labels, state), live, now=NOW) == expected


def test_container_labels_carry_identity_and_expiry():
    labels = container_labels("ev", "s1", ttl=60)
    assert labels["toolfleet.eval_id"] == "ev"
    assert labels["toolfleet.sample_id"] == "s1"
    assert labels[OWNER] == HOST
    assert labels[OWNER_PID] == str(os.getpid())
    assert NOW < float(labels[EXPIRY]) <= time.time() + 61
