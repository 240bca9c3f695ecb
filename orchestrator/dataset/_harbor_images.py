"""Per-task images for Harbor tasks: named by the content hash of their build context, built once.

An image is ``toolfleet/harbor-<task>[-<service>]:<hash>`` where ``<hash>`` is 16 hex digits of a
SHA-256 over the build context (every file's relative path, executable bit and bytes), the
Dockerfile's path in it, the build arguments and the ids of the local images its ``FROM`` lines name.
So an unchanged task is a cache hit (the tag exists: nothing is built), and an edited one, or one
whose base image was rebuilt, gets a new tag. The ``toolfleet/`` prefix is what workers' default
``--image`` pattern (``toolfleet/*``) admits; ``toolfleet/harbor-*`` admits these alone.

Builds run on the orchestrator's host (``harbor_dataset`` at load; a ``harbor:DIR`` eval when its run
starts, for the samples it selects), against that host's Docker daemon, with no network
(``network_mode=none``; ``FROM`` must name an image already on the host: there is no registry) and
with the legacy builder's default isolation. Built images carry the label ``toolfleet.harbor.task``.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator._errors import ToolfleetError

__all__ = ["BuildReport", "DockerImageBuilder", "HarborBuildError", "ImageBuild", "context_hash", "image_name"]

IMAGE_PREFIX = "toolfleet/harbor-"
LABEL = "toolfleet.harbor.task"


class HarborBuildError(ToolfleetError, RuntimeError):
    """A task's image could not be built (or Docker could not be reached); one line says why."""


@dataclass(frozen=True)
class ImageBuild:
    """One image to build: a context directory, its Dockerfile and build arguments, the tag it gets."""

    task: str
    context: Path
    dockerfile: str  # relative to the context
    args: tuple[tuple[str, str], ...]
    tag: str
    timeout: float


@dataclass
class BuildReport:
    """What a load built: images built and reused (cache hits), and the time it took."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return f"images: {len(self.built)} built, {len(self.cached)} cached ({self.seconds:.1f} s)"


_NAME_CHARS = re.compile(r"[^a-z0-9._-]+")
_SEPARATORS = re.compile(r"[._-]{2,}")


def image_name(task: str, service: str | None = None, prefix: str = IMAGE_PREFIX) -> str:
    """The repository part of a task's (or a task service's) image: lower case, Docker's characters."""
    raw = f"{task}-{service}" if service else task
    # Docker allows one '.' or '_' (or dashes) between alphanumerics: runs of separators become one '-'.
    safe = _SEPARATORS.sub("-", _NAME_CHARS.sub("-", raw.lower())).strip("-._") or "task"
    return f"{prefix}{safe}"[:200]


_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)


def base_images(dockerfile_text: str) -> list[str]:
    """Images the Dockerfile's ``FROM`` lines name (not earlier stages, not ``${ARG}`` forms)."""
    stages: set[str] = set()
    found: list[str] = []
    for match in _FROM.finditer(dockerfile_text):
        image, alias = match.group(1), match.group(2)
        if "$" not in image and image.lower() not in stages and image not in found:
            found.append(image)
        if alias:
            stages.add(alias.lower())
    return found


HASH_MAX_BYTES = 2 * 1024**3  # what one hash reads at most (the loader bounds each context far below)


def context_hash(context: Path, dockerfile: str, args: tuple[tuple[str, str], ...] = (),
                 base_ids: tuple[str, ...] = ()) -> str:
    """16 hex digits that change when anything a build reads changes (see the module docstring). The
    context is walked as data (``_harbor_tree.walk_tree``: no link followed, no FIFO opened, bounded)."""
    from ._harbor_tree import TaskTreeError, stream_task_file, walk_tree

    digest = hashlib.sha256()
    digest.update(f"dockerfile={dockerfile}\0args={sorted(args)}\0bases={list(base_ids)}\0".encode())
    try:
        for entry in walk_tree(context, ".", HASH_MAX_BYTES, 1_000_000, context.name):
            if entry.kind == "link":
                digest.update(f"L {entry.rel} -> {entry.target}\0".encode())
            elif entry.kind == "file":
                digest.update(f"F {entry.rel} {'x' if entry.executable else '-'} {entry.size}\0".encode())
                for chunk in stream_task_file(context, entry.rel, entry.size, f"{context.name}/{entry.rel}"):
                    digest.update(chunk)
    except TaskTreeError as exc:
        raise HarborBuildError(str(exc)) from None
    return digest.hexdigest()[:16]


class DockerImageBuilder:
    """Builds ``ImageBuild``s on the local Docker daemon (skipping tags already there); keeps a report."""

    def __init__(self, client: Any = None) -> None:
        self._client = client
        self.report = BuildReport()

    def _api(self) -> Any:
        if self._client is None:
            import docker
            from docker.errors import DockerException

            try:
                self._client = docker.from_env(timeout=60)
                self._client.ping()
            except DockerException as exc:
                raise HarborBuildError(f"Cannot reach the Docker daemon to build Harbor task images: "
                                       f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        return self._client.api

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def image_id(self, image: str) -> str | None:
        from docker.errors import ImageNotFound

        try:
            return str(self._api().inspect_image(image)["Id"])
        except ImageNotFound:
            return None

    def tag_for(self, task: str, context: Path, dockerfile: str, args: dict[str, str], service: str | None = None,
                prefix: str = IMAGE_PREFIX) -> str:
        """The content-addressed tag of a build (its ``FROM`` images' local ids included)."""
        from ._harbor_tree import TaskTreeError, TreeLimits, read_task_file

        try:
            text = read_task_file(context, dockerfile, TreeLimits().file_bytes).decode("utf-8", errors="replace")
        except (OSError, TaskTreeError) as exc:
            raise HarborBuildError(f"cannot read {context.name}/{dockerfile}: {exc}") from None
        bases = tuple(self.image_id(image) or f"missing:{image}" for image in base_images(text))
        digest = context_hash(context, dockerfile, tuple(sorted(args.items())), bases)
        return f"{image_name(task, service, prefix)}:{digest}"

    def ensure(self, build: ImageBuild) -> bool:
        """Build ``build.tag`` unless it exists; True when it was built now."""
        if self.image_id(build.tag) is not None:
            self.report.cached.append(build.tag)
            return False
        started = time.monotonic()
        self._build(build)
        self.report.built.append(build.tag)
        self.report.seconds += time.monotonic() - started
        return True

    def _build(self, build: ImageBuild) -> None:
        from docker.errors import APIError, DockerException

        deadline = time.monotonic() + build.timeout
        tail: list[str] = []
        try:
            stream = self._api().build(path=str(build.context), dockerfile=build.dockerfile, tag=build.tag,
                                       buildargs=dict(build.args) or None, network_mode="none", pull=False,
                                       rm=True, forcerm=True, decode=True, labels={LABEL: build.task},
                                       timeout=int(build.timeout) + 30)  # a silent RUN step may last that long
            for chunk in stream:
                if "error" in chunk:
                    detail = str(chunk.get("error") or "").strip().splitlines()
                    raise HarborBuildError(f"building {build.tag} failed: {detail[-1] if detail else 'error'}"
                                           + (f" (after: {tail[-1]})" if tail else ""))
                text = str(chunk.get("stream") or "").strip()
                if text:
                    tail = [*tail, text][-5:]
                if time.monotonic() > deadline:
                    raise HarborBuildError(f"building {build.tag} took longer than {build.timeout:g} s "
                                           "(environment.build_timeout_sec)")
        except (APIError, DockerException) as exc:
            raise HarborBuildError(f"building {build.tag} failed: {str(exc).splitlines()[0]}") from exc
        if self.image_id(build.tag) is None:
            raise HarborBuildError(f"building {build.tag} failed: no image was produced"
                                   + (f" (last output: {tail[-1]})" if tail else ""))
