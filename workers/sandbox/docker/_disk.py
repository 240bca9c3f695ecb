"""Per-sandbox writable-space cap (a sandbox must not fill the host's disk): which mechanism this Docker host can
enforce, and how.

- ``storage_opt={"size": disk_limit}`` caps the container's own layer (everything it writes anywhere).
  Docker enforces it only with: overlay2 on an xfs backing filesystem mounted with ``pquota``,
  btrfs, zfs, devicemapper (and windowsfilter). Other drivers (fuse-overlayfs, vfs on ext4, overlay2
  on ext4) refuse the option ("--storage-opt is not supported").
- Elsewhere: a size-capped tmpfs on each writable path (``/tmp``, ``/var/tmp``, ``/run/lock`` and the
  image's working directory, or ``writable_paths``). Writing past a path's size is ENOSPC inside the
  sandbox only. tmpfs pages are charged to the container's memory cgroup, so all of them together can
  never exceed ``mem_limit`` either (and what is stored there is memory the sandbox's programs lack).
  The working directory's contents (e.g. the home's dotfiles) are copied into its tmpfs at start.
  Not covered by this fallback: paths outside the list that a command can write — for a non-root
  sandbox user in our image there are none; a command run as ``user="root"`` (no capabilities, but
  owner of the image's files) can still write the container layer unbounded. ``read_only: true``
  closes that too, for images that write nothing outside the listed paths.
- ``runtime: runsc`` (gVisor): the runtime must be registered with ``--overlay`` (and ``--network=none``):
  the root filesystem's writes then stay in the sandbox's memory, bounded by ``mem_limit``.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
from dataclasses import dataclass, field
from typing import Any

import structlog
from docker.errors import DockerException

from ._api import DockerAPI
from ._labels import helper_labels

log = structlog.get_logger("toolfleet.sandbox")

QUOTA_DRIVERS = {"btrfs", "zfs", "devicemapper", "windowsfilter"}
DEFAULT_WRITABLE = ("/tmp", "/var/tmp", "/run/lock")  # noqa: S108 - paths inside the container
SEED_LIMIT = 16 * 1024 * 1024  # a working directory larger than this is not copied into its tmpfs
SNAPSHOT_SEED_LIMIT = 256 * 1024 * 1024  # a snapshot refuses more (``_snapshot``), so none is dropped


def layer_quota_supported(info: dict[str, Any]) -> bool:
    """Whether this daemon's storage driver can cap a container's layer (``docker info``)."""
    driver = str(info.get("Driver") or "")
    if driver in QUOTA_DRIVERS:
        return True
    if driver == "overlay2":
        status = {k: v for k, v in (info.get("DriverStatus") or []) if isinstance(k, str)}
        return status.get("Backing Filesystem") == "xfs"  # and pquota: the create call tells us
    return False


@dataclass
class DiskPlan:
    """What every container of one driver gets."""

    mechanism: str  # "storage_opt", "tmpfs" or "none"
    limit: str | None
    storage_opt: dict[str, str] | None = None
    tmpfs: dict[str, str] = field(default_factory=dict)
    seeds: dict[str, bytes] = field(default_factory=dict)  # path -> tar of the image's contents there
    owners: dict[str, str] = field(default_factory=dict)  # path -> "uid:gid" its tmpfs is mounted for


async def plan_disk(
    api: DockerAPI, image: str, limit: str | None, working_dir: str | None, paths: list[str] | None,
    quota: bool, runtime: str | None = None, seed_all: bool = False,
) -> DiskPlan:
    """``seed_all``: every path gets the image's contents (a snapshot's image holds its tmpfs files there),
    not only the working directory."""
    if not limit:
        return DiskPlan("none", None)
    if runtime == "runsc":
        # gVisor registered with `--overlay` keeps every write to the root filesystem in the sandbox's
        # own memory (bounded by mem_limit); its tmpfs does not take uid/gid options.
        return DiskPlan("runsc-overlay", limit)
    if quota:
        return DiskPlan("storage_opt", limit, storage_opt={"size": limit})
    wanted = list(paths) if paths is not None else [*DEFAULT_WRITABLE, *([working_dir] if working_dir else [])]
    plan = DiskPlan("tmpfs", limit)
    for path in dict.fromkeys(posixpath.normpath(p) for p in wanted if p and p.startswith("/") and p != "/"):
        options = f"exec,size={limit},mode=1777"  # Docker mounts a tmpfs noexec unless told: scripts must run
        if path not in DEFAULT_WRITABLE or seed_all:
            tar, owner = await _image_contents(api, image, path, SNAPSHOT_SEED_LIMIT if seed_all else SEED_LIMIT)
            if owner is not None and path not in DEFAULT_WRITABLE:
                uid, gid, mode = owner
                options = f"exec,size={limit},uid={uid},gid={gid},mode={mode:o}"
                plan.owners[path] = f"{uid}:{gid}"
            if tar:
                plan.seeds[path] = tar
        plan.tmpfs[path] = options
    return plan


async def _image_contents(api: DockerAPI, image: str, path: str,
                          limit: int = SEED_LIMIT) -> tuple[bytes | None, tuple[int, int, int] | None]:
    """The image's files at ``path`` (a tar) and the directory's owner and mode, from a never-started container."""
    try:
        created = await api.call(api.api.create_container, image, command=["true"], entrypoint=[],
                                 network_disabled=True, labels=helper_labels("image-contents"))
    except DockerException as exc:
        log.warning("sandbox.disk_seed_failed", path=path, error=str(exc))
        return None, None
    try:
        stream, _stat = await api.call(api.api.get_archive, created["Id"], path)
        data = await api.call(_read_bounded, stream, limit + 1)
    except DockerException:
        return None, None  # no such path in the image: an empty tmpfs
    finally:
        with contextlib.suppress(DockerException):
            await api.call(api.api.remove_container, created["Id"], force=True)
    owner = None
    try:
        with tarfile.open(fileobj=io.BytesIO(data[:limit])) as tar:
            top = tar.next()
            if top is not None and top.isdir():
                owner = (top.uid, top.gid, top.mode & 0o7777)
    except tarfile.TarError:
        pass
    if len(data) > limit:
        log.warning("sandbox.disk_seed_too_large", path=path, limit=limit)
        return None, owner
    return data, owner


def _read_bounded(stream: Any, limit: int) -> bytes:  # stream: the SDK's chunk iterator
    out = bytearray()
    for chunk in stream:
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out)


def fork_seed_command(path: str) -> list[str]:
    """Unpack a snapshot's tar into the tmpfs at ``path`` of a fork, as root, every file keeping its owner and
    mode (a root-only file stays root's). A fork holds CAP_CHOWN and CAP_FOWNER for this
    (``fork_capabilities``); its tmpfs root is opened to root for the unpacking and given its mode back."""
    script = ('p="$1"; m=$(stat -c %a "$p") || exit 1; chmod 0777 "$p" || exit 1; rc=0; '
              'tar -x --same-owner --numeric-owner --preserve-permissions --strip-components=1 -C "$p" -f - || rc=$?; '
              'chmod "$m" "$p" || exit 1; exit $rc')
    return ["sh", "-c", script, "toolfleet-seed", path]


def seed_command(path: str) -> list[str]:
    """Unpack a seed tar (its top entry is ``path``'s own name) into the tmpfs at ``path``."""
    # The top entry (the directory itself) is stripped: the tmpfs root keeps the mode and owner it was
    # mounted with (the sandbox user may not change them, and /tmp must stay 1777).
    return ["tar", "-x", "--no-same-owner", "--strip-components=1", "-C", path, "-f", "-"]
