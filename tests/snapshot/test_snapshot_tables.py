"""Snapshot rules as pure functions and tables: what a worker admits, how a snapshot becomes a sandbox
spec, the host's disk budget, and how a snapshot reads which files its user could not."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from orchestrator.util import Snapshot, SnapshotError
from workers._admission import AdmissionRefused, AdmissionRules, admit_sandbox
from workers.sandbox import sandbox_config
from workers.sandbox.docker._snapshot import _DENIED
from workers.sandbox.docker._snapshot_budget import HostBudget, budget_refusal


def _snap(**kw) -> Snapshot:  # type: ignore[no-untyped-def]
    config = {"type": "docker", "image": "toolfleet/snapshot:s1", "user": "sandbox", "disk_limit": "1g"}
    return Snapshot(id="s1", image="toolfleet/snapshot:s1", host="w1", config=config, **kw)


@pytest.mark.parametrize(("config", "patterns", "admitted"), [
    # A sandbox opened from a snapshot runs the snapshot's own image, whatever the --image patterns ...
    ({"type": "docker", "image": "toolfleet/snapshot:s1", "snapshot": {"id": "s1"}}, ["myorg/*"], True),
    ({"type": "docker", "image": "toolfleet/snapshot:s1", "snapshot": {"id": "s1", "host": "w1"}}, ["toolfleet/*"],
     True),
    # ... but naming a snapshot does not admit any other image.
    ({"type": "docker", "image": "evil/img:1", "snapshot": {"id": "s1"}}, ["toolfleet/*"], False),
    ({"type": "docker", "image": "toolfleet/snapshot:s2", "snapshot": {"id": "s1"}}, ["myorg/*"], False),
    ({"type": "docker", "image": "toolfleet/snapshot:s1"}, ["myorg/*"], False),
])
def test_a_worker_admits_a_snapshots_own_image_only(config: dict, patterns: list[str], admitted: bool) -> None:
    rules = AdmissionRules(images=patterns, sandbox_types=["docker"])
    if admitted:
        assert admit_sandbox(rules, config)["snapshot"]["id"] == "s1"
    else:
        with pytest.raises(AdmissionRefused, match="image"):
            admit_sandbox(rules, config)


@pytest.mark.parametrize("bad", ["../etc", "a b", "", "x" * 65, "s1:latest"])
def test_a_snapshot_id_is_a_plain_tag(bad: str) -> None:
    with pytest.raises(ValidationError):
        sandbox_config({"type": "docker", "image": "toolfleet/snapshot:s1", "snapshot": {"id": bad}})


def test_a_snapshot_is_a_sandbox_spec_placed_on_its_host() -> None:
    snap = _snap()
    config = sandbox_config(snap)
    assert config.type == "docker" and config.image == "toolfleet/snapshot:s1" and config.user == "sandbox"
    assert config.snapshot is not None and (config.snapshot.id, config.snapshot.host) == ("s1", "w1")
    from orchestrator.dataset import Sample

    assert Sample(input="x", sandbox=snap).sandbox == snap.sandbox_config()  # Sample(sandbox=snapshot)


@pytest.mark.parametrize(("used", "size", "fits"), [(0, 100, True), (60, 40, True), (60, 41, False), (90, 20, False),
                                                  (100, 0, True), (101, 0, False)])
def test_the_hosts_disk_budget(used: int, size: int, fits: bool) -> None:
    refusal = budget_refusal(size, used, 100)
    assert (refusal is None) is fits
    if not fits:
        assert refusal == (f"The snapshot ({size} bytes) would exceed this host's snapshot disk budget: {used} "
                           "bytes of 100 bytes in use (remove kept snapshots, or raise the budget: "
                           "TOOLFLEET_SNAPSHOT_DISK / the worker's --snapshot-disk).")


def test_the_ledger_counts_every_reservation_on_the_host_until_released_or_its_process_is_gone(tmp_path) -> None:
    """Two processes' views of one daemon (two ledgers on one file): each sees the other's reservations."""
    a, b = HostBudget(tmp_path / "ledger.json"), HostBudget(tmp_path / "ledger.json")
    on_daemon = 30  # bytes of snapshots already on the daemon
    a.reserve("s1", 40, 100, lambda: on_daemon)
    with pytest.raises(SnapshotError, match=r"\(31 bytes\) would exceed .*: 70 bytes of 100 bytes in use"):
        b.reserve("s2", 31, 100, lambda: on_daemon)
    b.reserve("s2", 30, 100, lambda: on_daemon)
    assert a.in_flight() == b.in_flight() == 70
    a.settle("s1", 40, 100, lambda: on_daemon + 40)  # committed: now on the daemon, not in flight
    assert b.in_flight() == 30
    with pytest.raises(SnapshotError, match="would exceed"):  # 70 on the daemon + 30 in flight + 1
        a.reserve("s3", 1, 100, lambda: on_daemon + 40)
    b.release("s2")
    a.reserve("s3", 1, 100, lambda: on_daemon + 40)
    # A reservation whose process is gone (or a torn file) no longer counts.
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    ledger["dead"] = {"pid": 2**22 + 12345, "bytes": 1000, "at": time.time()}
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    assert a.in_flight() == 1
    (tmp_path / "ledger.json").write_text("{torn")
    assert a.in_flight() == 0


def test_what_the_sandbox_user_could_not_read_is_read_again_as_root() -> None:
    stderr = ("tar: tmp/secret: Warning: Cannot open: Permission denied\n"
              "tar: tmp/also: Cannot open: Permission denied\n"
              "tar: var/tmp/locked: Cannot savedir: Permission denied\n"
              "tar: tmp/gone: Cannot stat: No such file or directory\n"
              "tar: Exiting with failure status due to previous errors\n")
    assert _DENIED.findall(stderr) == ["tmp/secret", "tmp/also", "var/tmp/locked"]
