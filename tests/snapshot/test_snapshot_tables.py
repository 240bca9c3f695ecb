"""Snapshot rules as pure functions and tables: what a worker admits, how a snapshot becomes a sandbox
spec, the host's disk budget, and how a snapshot reads which files its user could not."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.util import Snapshot, SnapshotError
from workers._admission import AdmissionRefused, AdmissionRules, admit_sandbox
from workers.sandbox import sandbox_config
from workers.sandbox.docker._snapshot import _DENIED, HostSnapshots


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


@pytest.mark.parametrize(("held", "reserved", "size", "fits"), [
    (0, 0, 100, True), (60, 0, 40, True), (60, 0, 41, False), (0, 90, 20, False), (100, 0, 0, True),
])
def test_the_hosts_disk_budget(held: int, reserved: int, size: int, fits: bool) -> None:
    store = HostSnapshots()
    store.budget, store.reserved = 100, reserved
    if held:
        from workers.sandbox.docker._snapshot import HeldSnapshot

        store.held["old"] = HeldSnapshot("old", "toolfleet/snapshot:old", "sha256:x", "e", True, held, 0.0, {})
    if fits:
        store.reserve(size)
        assert store.used == held + reserved + size
    else:
        with pytest.raises(SnapshotError, match="would exceed this host's snapshot disk budget"):
            store.reserve(size)
        assert store.used == held + reserved  # nothing reserved by a refusal


def test_what_the_sandbox_user_could_not_read_is_read_again_as_root() -> None:
    stderr = ("tar: tmp/secret: Warning: Cannot open: Permission denied\n"
              "tar: tmp/also: Cannot open: Permission denied\n"
              "tar: var/tmp/locked: Cannot savedir: Permission denied\n"
              "tar: tmp/gone: Cannot stat: No such file or directory\n"
              "tar: Exiting with failure status due to previous errors\n")
    assert _DENIED.findall(stderr) == ["tmp/secret", "tmp/also", "var/tmp/locked"]
