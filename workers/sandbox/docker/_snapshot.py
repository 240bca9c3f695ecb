"""Snapshots of docker sandboxes: a running sandbox's filesystem captured as an image on its host.

What a snapshot holds: the container's own layer (``docker commit``, the container paused meanwhile)
plus the contents of every writable path the sandbox has as a capped tmpfs (``_disk``: a commit
does not see tmpfs mounts, and neither does the Engine's archive API). Those are read with ``tar``
inside the sandbox — as its user, then as root for what the user could not read (the sandbox has no
capabilities, so neither can read a file only a third user may read: such a file makes the snapshot
fail rather than go missing) — and written into a second layer on top of the commit. A sandbox opened
from the snapshot gets the same tmpfs paths, seeded from that layer, so its files are where they were,
each with its own owner and mode (unpacked as root holding CAP_CHOWN and CAP_FOWNER, which a fork's
root alone has: ``_capabilities.fork_capabilities``).
Running processes, memory and the services of a multi-service sandbox are not captured: a fork's
services start fresh from their images.

Each snapshot is an image tagged ``toolfleet/snapshot:<id>`` (the default ``--image`` pattern admits it),
labelled with its eval, sample, whether it is kept, its size and the sandbox config forks start with.
A host keeps snapshots within one disk budget (``HostSandboxes.snapshots``: ``--snapshot-disk``,
``TOOLFLEET_SNAPSHOT_DISK``, default 10g), shared by every process snapshotting onto its Docker daemon
from this machine (``_snapshot_budget``): a snapshot that would exceed it is refused. When the process pulls from
registries (a worker's ``--registry``), the snapshot is also pushed to the first one. An eval's snapshots are removed
when it ends unless taken with ``keep=True``; ones whose eval never ended (a killed orchestrator) are
removed after ``SNAPSHOT_TTL_S`` by the next host that loads its snapshots.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import posixpath
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from docker.errors import DockerException, ImageNotFound, NotFound

from orchestrator.util._snapshot import Snapshot, SnapshotError

from ._labels import HELPER, PREFIX, helper_labels
from ._snapshot_budget import HostBudget, shown_bytes

if TYPE_CHECKING:
    from .._channel import RawResult
    from ._api import DockerAPI

log = structlog.get_logger("toolfleet.sandbox")

SNAPSHOT_REPO = "toolfleet/snapshot"
LABEL = PREFIX + "snapshot"
LABEL_EVAL = PREFIX + "snapshot.eval_id"
LABEL_SAMPLE = PREFIX + "snapshot.sample_id"
LABEL_KEEP = PREFIX + "snapshot.keep"
LABEL_BASE = PREFIX + "snapshot.base"  # the image it was taken on (its size is not the snapshot's)
LABEL_CREATED = PREFIX + "snapshot.created"
LABEL_CONFIG = PREFIX + "snapshot.config"  # base64 JSON: the sandbox config forks start with
SNAPSHOT_TTL_S = 24 * 3600.0
SEED_LIMIT = 256 * 1024 * 1024  # the tmpfs contents a snapshot may hold (forks get them as seeds, in memory)
TAR_TIMEOUT_S = 300.0
PUSH_TIMEOUT_S = 600.0
DEFAULT_BUDGET = "10g"
# GNU tar's words for a file its user may not read (a warning under --ignore-failed-read).
_DENIED = re.compile(r"^tar: (.+?): (?:Warning: )?Cannot (?:open|savedir): Permission denied$", re.MULTILINE)


def _bytes(size: str) -> int:
    from workers._bounds import parse_bytes

    return parse_bytes(size)


class SnapshotSource(Protocol):
    """What taking a snapshot reads of a sandbox (``DockerSandboxEnvironment`` offers exactly this)."""

    sandbox_id: str
    container_id: str
    eval_id: str
    sample_id: str

    @property
    def api(self) -> DockerAPI: ...
    @property
    def image(self) -> str: ...
    @property
    def tmpfs_paths(self) -> list[str]: ...
    @property
    def default_user(self) -> str: ...
    @property
    def snapshots(self) -> HostSnapshots: ...
    @property
    def registries(self) -> tuple[str, ...] | None: ...
    def run_config(self) -> dict[str, Any]: ...
    def claim_snapshot_layer(self) -> bool: ...
    async def exec_raw(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                       env: dict[str, str] | None = None, user: str | None = None, timeout: float | None = None,
                       cap: int | None = None, *, trusted: bool = False) -> RawResult: ...


@dataclass
class HeldSnapshot:
    id: str
    image: str
    image_id: str
    eval_id: str
    keep: bool
    size: int
    created: float
    config: dict[str, Any]


class HostSnapshots:
    """The snapshots on this process's Docker host, and the disk budget they share with every other
    process snapshotting onto that daemon from this machine (``_snapshot_budget``)."""

    def __init__(self) -> None:  # one per docker host object (``HostSandboxes.snapshots``)
        self.budget = _bytes(os.environ.get("TOOLFLEET_SNAPSHOT_DISK") or DEFAULT_BUDGET)
        self.held: dict[str, HeldSnapshot] = {}
        self._loaded = False
        self._host: HostBudget | None = None
        self._base_sizes: dict[str, int] = {}  # base image -> its size (a tag's image is read once a process)

    async def reserve(self, api: DockerAPI, token: str, size: int) -> None:
        """``size`` bytes for snapshot ``token``, within the host's budget (else ``SnapshotError``)."""
        host = await self._host_budget(api)
        await api.call(host.reserve, token, size, self.budget, lambda: self.on_daemon(api))

    async def settle(self, api: DockerAPI, token: str, size: int) -> None:
        """Snapshot ``token`` is committed (``size`` bytes): its reservation goes; over budget, ``SnapshotError``."""
        host = await self._host_budget(api)
        await api.call(host.settle, token, size, self.budget, lambda: self.on_daemon(api))

    async def release(self, api: DockerAPI, token: str) -> None:
        await api.call((await self._host_budget(api)).release, token)

    async def _host_budget(self, api: DockerAPI) -> HostBudget:
        if self._host is None:
            info = await api.call(api.api.info)
            self._host = HostBudget.for_daemon(str(info.get("ID") or api.api.base_url))
        return self._host

    def on_daemon(self, api: DockerAPI) -> int:
        """Bytes the snapshots on the daemon add to their base images, whoever took them (blocking)."""
        total = 0
        for info in api.api.images(filters={"label": f"{LABEL}=1"}):
            base = (info.get("Labels") or {}).get(LABEL_BASE, "")
            if base not in self._base_sizes:
                self._base_sizes[base] = _size_or_zero(api, base) if base else 0
            total += max(0, int(info.get("Size") or 0) - self._base_sizes[base])
        return total

    async def load(self, api: DockerAPI) -> None:
        """Learn the snapshots already on the host (kept ones, a previous process's); drop expired ones."""
        if self._loaded:
            return
        self._loaded = True
        images = await api.call(api.api.images, filters={"label": f"{LABEL}=1"})
        now = time.time()
        for info in images:
            held = _from_labels(info)
            if held is None or held.id in self.held:
                continue
            held.size = await _added_bytes(api, held.image_id, (info.get("Labels") or {}).get(LABEL_BASE, ""))
            if not held.keep and now - held.created > SNAPSHOT_TTL_S:
                await _remove_image(api, held.image_id)
                log.info("sandbox.snapshot_expired", snapshot=held.id)
                continue
            self.held[held.id] = held

    def require(self, snapshot_id: str, image: str) -> HeldSnapshot:
        held = self.held.get(snapshot_id)
        if held is None or held.image != image:
            raise SnapshotError(f"Snapshot '{snapshot_id}' is not on this host (it was removed with its eval, "
                                "or taken on another host).")
        return held

    async def remove(self, api: DockerAPI, eval_id: str | None = None, ids: list[str] | None = None) -> list[str]:
        """Remove an eval's snapshots that were not kept (or exactly ``ids``); returns their ids. An eval's
        are read from the Engine, not only from what this process knows: a worker process that took some
        may have died since (its successor under the same name loaded the host's snapshots before)."""
        await self.load(api)
        if ids is None and eval_id:
            images = await api.call(api.api.images, filters={"label": [f"{LABEL}=1", f"{LABEL_EVAL}={eval_id}"]})
            for info in images:
                held = _from_labels(info)
                if held is not None and held.id not in self.held:
                    self.held[held.id] = held  # size 0: it was never counted in this process's budget
        chosen = [s for s in self.held.values()
                  if (ids is not None and s.id in ids) or (ids is None and s.eval_id == eval_id and not s.keep)]
        for held in chosen:
            await _remove_image(api, held.image_id)
            self.held.pop(held.id, None)
            log.info("sandbox.snapshot_removed", snapshot=held.id, eval=held.eval_id)
        return [s.id for s in chosen]


async def take_snapshot(env: SnapshotSource, keep: bool = False) -> Snapshot:
    """Capture ``env``'s filesystem as an image on this host (see the module docstring)."""
    api = env.api
    store = env.snapshots
    started = time.monotonic()
    await store.load(api)
    snapshot_id = f"s{uuid.uuid4().hex[:16]}"
    tar = await _tmpfs_contents(env, env.tmpfs_paths)
    estimate = sum(len(t) for t in tar)
    await store.reserve(api, snapshot_id, estimate)  # the layer's size is known once committed (checked then)
    config = fork_config(env, snapshot_id)
    image_id: str | None = None
    try:
        labels = {LABEL: "1", LABEL_EVAL: env.eval_id, LABEL_SAMPLE: env.sample_id, LABEL_KEEP: "1" if keep else "0",
                  LABEL_CREATED: f"{time.time():.3f}", LABEL_BASE: env.image,
                  LABEL_CONFIG: base64.b64encode(json.dumps(config).encode()).decode("ascii")}
        image_id = await _commit(env, snapshot_id, labels, tar)
        size = max(estimate, await _added_bytes(api, image_id, env.image))
        held = HeldSnapshot(snapshot_id, f"{SNAPSHOT_REPO}:{snapshot_id}", image_id, env.eval_id, keep, size,
                            float(labels[LABEL_CREATED]), config)
    except BaseException as exc:
        await store.release(api, snapshot_id)
        if image_id is not None:
            await _remove_image(api, image_id)  # committed, but not known to the store: not kept
        if isinstance(exc, DockerException):
            raise SnapshotError(f"Snapshot of sandbox '{env.sandbox_id}' failed: {exc}") from exc
        raise
    try:
        await store.settle(api, snapshot_id, size)
    except SnapshotError:
        await _remove_image(api, image_id)
        raise
    store.held[snapshot_id] = held
    pushed = await _push(api, held, env.registries)
    seconds = time.monotonic() - started
    log.info("sandbox.snapshot_taken", snapshot=snapshot_id, size=size, seconds=round(seconds, 3), pushed=pushed)
    return Snapshot(id=snapshot_id, image=held.image, registry_image=pushed, eval_id=env.eval_id,
                    sample_id=env.sample_id, keep=keep, size=size, seconds=seconds, created=held.created,
                    host=os.environ.get("TOOLFLEET_HOST"), config=config)


def fork_config(env: SnapshotSource, snapshot_id: str) -> dict[str, Any]:
    """The sandbox config a fork starts with: the original's, on the snapshot's image and user."""
    config = env.run_config()
    config.update(image=f"{SNAPSHOT_REPO}:{snapshot_id}", pool_size=0, pull_policy="missing",
                  snapshot={"id": snapshot_id})
    return config


async def _tmpfs_contents(env: SnapshotSource, paths: list[str]) -> list[bytes]:
    """tar archives (rooted at /) of the tmpfs-backed paths: as the sandbox's user, then as root for
    what it could not read."""
    if not paths:
        return []
    names = [posixpath.relpath(p, "/") for p in paths]
    user = env.default_user
    first = await _tar(env, ["-T", "-"], "\n".join(names), user or None)
    out, denied = [first[0]], first[1]
    if denied and user not in ("", "root", "0"):
        second, still = await _tar(env, ["-T", "-"], "\n".join(denied), "root")
        out.append(second)
        denied = still
    if denied:
        raise SnapshotError(f"Snapshot of sandbox '{env.sandbox_id}' failed: neither its user nor root may read "
                            f"{', '.join('/' + d for d in denied[:5])} (a capability-less sandbox cannot copy them).")
    if sum(len(t) for t in out) > SEED_LIMIT:
        raise SnapshotError(f"Snapshot of sandbox '{env.sandbox_id}' failed: its tmpfs-backed paths "
                            f"({', '.join(paths)}) hold more than {shown_bytes(SEED_LIMIT)}.")
    return out


async def _tar(env: SnapshotSource, args: list[str], names: str, user: str | None) -> tuple[bytes, list[str]]:
    argv = ["tar", "-C", "/", "-cf", "-", "--ignore-failed-read", "--warning=no-file-changed", *args]
    # The worker's own read (root only for what the sandbox's user could not read), not a message's command.
    raw = await env.exec_raw(argv, input=names, user=user, timeout=TAR_TIMEOUT_S, cap=SEED_LIMIT + 1, trusted=True)
    err = raw.stderr.decode("utf-8", "replace")
    if raw.timed_out or raw.returncode not in (0, 1) or raw.truncated:
        why = "timed out" if raw.timed_out else "too large" if raw.truncated else err.strip()[-300:]
        raise SnapshotError(f"Snapshot of sandbox '{env.sandbox_id}' failed reading its tmpfs-backed paths: {why}")
    return raw.stdout, _DENIED.findall(err)


async def _commit(env: SnapshotSource, snapshot_id: str, labels: dict[str, str], tars: list[bytes]) -> str:
    """Commit the container with the tmpfs contents in the image at their own paths.

    The Engine's archive API writes to the container's layer *under* its tmpfs mounts (invisible to the
    sandbox), so the first snapshot of a container puts them there and commits once. A later snapshot of
    the same container cannot (files deleted since the first would come back from under the mount): it
    commits, then adds the contents in a second layer from a scratch container."""
    api = env.api
    changes = [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]
    tars = [t for t in tars if t]
    if not tars or env.claim_snapshot_layer():
        if tars:
            await _put(api, env.container_id, tars)
        made = await api.call(api.api.commit, env.container_id, repository=SNAPSHOT_REPO, tag=snapshot_id,
                              changes=changes)
        return str(made["Id"])
    base = await api.call(api.api.commit, env.container_id)
    scratch = await api.call(api.api.create_container, base["Id"], command=["true"], entrypoint=[],
                             network_disabled=True, labels=helper_labels("snapshot-layer"))
    try:
        await _put(api, scratch["Id"], tars)
        # A commit keeps the container's labels: the snapshot image (and so its forks) is no helper.
        made = await api.call(api.api.commit, scratch["Id"], repository=SNAPSHOT_REPO, tag=snapshot_id,
                              changes=[*changes, f'LABEL {HELPER}=""'])
        return str(made["Id"])
    finally:
        with contextlib.suppress(DockerException):
            await api.call(api.api.remove_container, scratch["Id"], force=True)


async def _put(api: DockerAPI, container_id: str, tars: list[bytes]) -> None:
    for tar in tars:
        if not await api.call(api.api.put_archive, container_id, "/", tar):
            raise SnapshotError("Snapshot failed: Docker refused the tmpfs contents.")


async def _added_bytes(api: DockerAPI, image_id: str, base: str) -> int:
    """What the snapshot adds to its base image (its own layers)."""
    made = await api.call(api.api.inspect_image, image_id)
    return max(0, int(made.get("Size") or 0) - await api.call(_size_or_zero, api, base))


def _size_or_zero(api: DockerAPI, image: str) -> int:
    """An image's size on the daemon, 0 when it is not there (blocking)."""
    try:
        return int(api.api.inspect_image(image).get("Size") or 0)
    except (NotFound, ImageNotFound):
        return 0


async def _push(api: DockerAPI, held: HeldSnapshot, registries: tuple[str, ...] | None) -> str | None:
    """Push to the first registry this host pulls from (a worker's --registry); None: not pushed."""
    if not registries:
        return None
    target = f"{registries[0]}/{SNAPSHOT_REPO}"

    def push() -> None:
        api.api.tag(held.image_id, target, held.id)
        for line in api.api.push(target, held.id, stream=True, decode=True):
            if isinstance(line, dict) and line.get("error"):
                raise SnapshotError(f"Pushing snapshot '{held.id}' to '{registries[0]}' failed: {line['error']}")

    try:
        await asyncio.wait_for(api.call(push), PUSH_TIMEOUT_S)
    except (DockerException, SnapshotError, TimeoutError) as exc:
        log.warning("sandbox.snapshot_push_failed", snapshot=held.id, error=str(exc))  # it is still here
        return None
    return f"{target}:{held.id}"


async def _remove_image(api: DockerAPI, image_id: str) -> None:
    try:
        await api.call(api.api.remove_image, image_id, force=True)
    except (NotFound, ImageNotFound):
        pass
    except DockerException as exc:
        log.warning("sandbox.snapshot_remove_failed", image=image_id[:19], error=str(exc))


def _from_labels(info: dict[str, Any]) -> HeldSnapshot | None:
    labels = info.get("Labels") or {}
    tags = [t for t in info.get("RepoTags") or [] if t.startswith(SNAPSHOT_REPO + ":")]
    if not tags:
        return None
    try:
        config = json.loads(base64.b64decode(labels.get(LABEL_CONFIG, "")) or b"{}")
        return HeldSnapshot(tags[0].split(":", 1)[1], tags[0], info["Id"], labels.get(LABEL_EVAL, ""),
                            labels.get(LABEL_KEEP) == "1", 0,
                            float(labels.get(LABEL_CREATED) or 0), config)
    except (ValueError, KeyError):
        return None


async def snapshot_present(api: DockerAPI, store: HostSnapshots, snapshot_id: str, image: str) -> HeldSnapshot:
    """A fork's driver start: the snapshot is on this host (``SnapshotError`` otherwise)."""
    await store.load(api)
    return store.require(snapshot_id, image)
