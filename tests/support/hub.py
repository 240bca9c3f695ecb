"""Docker Hub on a machine without it: stand-in images under the names tasks use, in a ``LocalRegistry``.

``HubMirror.seed()`` builds each stand-in from the sandbox image (no network) and pushes it where Docker Hub keeps
the name it stands for (``ubuntu:24.04`` -> ``127.0.0.1:PORT/library/ubuntu:24.04``), which is where a pull
through ``--registry-mirror docker.io=127.0.0.1:PORT`` looks for it. ``seed(tasks=...)`` also builds and pushes
each Harbor task's ``docker_image`` (``tbtest/<task>:20260101``) from the task's own ``environment/Dockerfile``, its
``FROM`` lines pointed at the stand-ins, as a benchmark's authors publish their prebuilt images. The local tags
are removed after the push, so the daemon has to pull.

The stand-ins (``STAND_INS``) behave like what they stand for where tasks notice: root is the user and ``/`` the
working directory; the Python one has ``pip`` (from the running interpreter's ``ensurepip`` wheel, or Debian's
``/usr/share/python-wheels``) and no "externally managed" marker. Each carries ``/etc/toolfleet-standin`` (its Hub
name) and the label ``org.toolfleet.standin``. A ``nonce`` labels every image of one seeding, so images seeded
again get new ids and a build ``FROM`` them cannot hit the build cache: a cold build, without pruning the
daemon's shared cache. ``payload_mib`` adds a layer of that many MiB to each, so pulls move bytes.

``pull_as_hub`` pulls from the mirror and tags under the Hub name, for a harness that cannot use a mirror
(Harbor's docker environment); ``cleanup`` removes every tag and image this object made.
"""

from __future__ import annotations

import io
import random
import re
import sysconfig
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.prerequisites import IMAGE
from tests.support.registry import LocalRegistry, hub_repository

LABEL = "org.toolfleet.standin"
MARKER = "/etc/toolfleet-standin"
IMAGE_SOURCE_ARG = "TBTEST_IMAGE_SOURCE"  # a task Dockerfile's build arg: "registry" when seeded here

_COMMON = f"""FROM {IMAGE}
USER root
WORKDIR /
LABEL {LABEL}="{{name}}" {LABEL}.nonce="{{nonce}}"
COPY standin payload.bin /tmp/standin/
"""
UBUNTU = _COMMON + f"RUN mv /tmp/standin/standin {MARKER} && rm -rf /tmp/standin\n"
PYTHON = _COMMON + f"""COPY {{wheel}} /tmp/standin/
RUN python3 /tmp/standin/{{wheel}}/pip install --no-index --no-cache-dir --break-system-packages \\
        --disable-pip-version-check /tmp/standin/{{wheel}} \\
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
    && mv /tmp/standin/standin {MARKER} && rm -rf /tmp/standin
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"""
# Hub name -> Dockerfile template (fields: name, nonce, wheel)
STAND_INS = {"ubuntu:24.04": UBUNTU, "python:3.13-slim-bookworm": PYTHON}


def pip_wheel() -> Path:
    """A pip wheel on this machine (pip runs from its own wheel, so installing it needs no index)."""
    candidates = [Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled", Path("/usr/share/python-wheels")]
    for directory in candidates:
        wheels = sorted(directory.glob("pip-*-py3-none-any.whl"))
        if wheels:
            return wheels[-1]
    raise RuntimeError("no pip wheel found (looked in the interpreter's ensurepip and /usr/share/python-wheels; "
                       "`apt-get install python3-pip-whl`)")


_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)(\S+)(.*)$", re.IGNORECASE)


def rewrite_from(dockerfile: str, refs: dict[str, str]) -> str:
    """A Dockerfile with each ``FROM`` that names a key of ``refs`` (a Hub name) naming its value instead."""
    by_repository = {hub_repository(name): ref for name, ref in refs.items()}

    def swap(line: str) -> str:
        match = _FROM.match(line)
        if match is None:
            return line
        try:
            target = by_repository.get(hub_repository(match.group(2)))
        except ValueError:
            target = None
        return f"{match.group(1)}{target}{match.group(3)}" if target else line

    return "\n".join(swap(line) for line in dockerfile.split("\n"))


def task_images(tasks: Path) -> dict[str, Path]:
    """``docker_image`` -> task directory, for each task under ``tasks`` (one task, or a directory of them) whose
    task.toml names one and has an ``environment/Dockerfile`` to build it from."""
    dirs = ([tasks] if (tasks / "task.toml").is_file()
            else sorted(p for p in tasks.iterdir() if (p / "task.toml").is_file()))
    found = {}
    for task in dirs:
        image = tomllib.loads((task / "task.toml").read_text()).get("environment", {}).get("docker_image")
        if image and (task / "environment" / "Dockerfile").is_file():
            found[image] = task
    return found


@dataclass
class HubMirror:
    """Stand-ins for Docker Hub images in ``registry``, pushed and pulled with the docker SDK ``client``."""

    registry: LocalRegistry
    client: Any
    nonce: str = "0"
    payload_mib: int = 0
    seeded: dict[str, str] = field(default_factory=dict)  # Hub name -> mirror reference
    _local: set[str] = field(default_factory=set)  # tags this object made on the daemon (removed by cleanup)

    def mirror_ref(self, name: str) -> str:
        """``127.0.0.1:PORT/library/ubuntu:24.04`` for ``ubuntu:24.04``: where the mirror keeps a Hub name."""
        return f"{self.registry.host}/{hub_repository(name)}"

    def seed(self, names: tuple[str, ...] = tuple(STAND_INS), tasks: Path | None = None,
             build_args: dict[str, str] | None = None, network: str | None = None) -> dict[str, str]:
        """Build and push the stand-ins ``names``, then (``tasks``) each task's ``docker_image`` from its Dockerfile
        (with ``build_args``, plus ``TBTEST_IMAGE_SOURCE=registry``; on ``network``, ``none`` when not given).
        Returns Hub name -> mirror reference for everything seeded; none of it stays tagged locally."""
        built: list[str] = []
        try:
            for name in names:
                ref = self.mirror_ref(name)
                self._build_stand_in(name, ref)
                built.append(ref)
                self.seeded[name] = ref
            for image, task in (task_images(tasks) if tasks is not None else {}).items():
                ref = self.mirror_ref(image)
                self._build_task(task, ref, {**(build_args or {}), IMAGE_SOURCE_ARG: "registry"}, network)
                built.append(ref)
                self.seeded[image] = ref
            for ref in built:
                self._push(ref)
        finally:
            for ref in built:
                self._untag(ref)
        return dict(self.seeded)

    def _build_stand_in(self, name: str, ref: str) -> None:
        wheel = pip_wheel()
        files = {"standin": f"{name}\n".encode(),
                 "payload.bin": random.Random(f"{name}/{self.nonce}").randbytes(self.payload_mib * 1024 * 1024)}
        if "{wheel}" in STAND_INS[name]:
            files[wheel.name] = wheel.read_bytes()
        files["Dockerfile"] = STAND_INS[name].format(name=name, nonce=self.nonce, wheel=wheel.name).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for member, data in files.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        self._local.add(ref)
        self._stream(self.client.api.build(fileobj=buf, custom_context=True, tag=ref, rm=True, forcerm=True,
                                           pull=False, network_mode="none", decode=True), f"building {ref}")

    def _build_task(self, task: Path, ref: str, build_args: dict[str, str], network: str | None) -> None:
        dockerfile = rewrite_from((task / "environment" / "Dockerfile").read_text(), self.seeded)
        with tempfile.TemporaryDirectory(prefix="toolfleet-hub-") as tmp:
            path = Path(tmp) / "Dockerfile"  # outside the context: the SDK sends it along
            path.write_text(dockerfile)
            self._local.add(ref)
            self._stream(self.client.api.build(path=str(task / "environment"), dockerfile=str(path), tag=ref,
                                               rm=True, forcerm=True, pull=False, buildargs=build_args,
                                               network_mode=network or "none", labels={f"{LABEL}.nonce": self.nonce},
                                               decode=True), f"building {ref} from {task.name}")

    def _push(self, ref: str) -> None:
        repository, tag = ref.rsplit(":", 1)
        self._stream(self.client.api.push(repository, tag=tag, stream=True, decode=True), f"pushing {ref}")

    def _untag(self, ref: str) -> None:
        from docker.errors import DockerException

        try:
            self.client.api.remove_image(ref)
            self._local.discard(ref)
        except DockerException:
            pass

    @staticmethod
    def _stream(events: Any, what: str) -> None:
        for event in events:
            if "error" in event:
                raise RuntimeError(f"{what} failed: {event['error']}")

    def pull_as_hub(self, names: tuple[str, ...] | None = None) -> list[str]:
        """Pull each seeded image from the mirror and tag it under its Hub name (``ubuntu:24.04``), as a daemon
        configured with this mirror would; returns the local names. ``cleanup`` removes them."""
        local = []
        for name in names or tuple(self.seeded):
            ref = self.seeded[name]
            repository, tag = ref.rsplit(":", 1)
            self._stream(self.client.api.pull(repository, tag=tag, stream=True, decode=True), f"pulling {ref}")
            short = hub_repository(name).removeprefix("library/")
            short_repository, short_tag = short.rsplit(":", 1)
            self.client.api.tag(ref, short_repository, short_tag)
            self._local.add(short)
            self._untag(ref)
            local.append(short)
        return local

    def cleanup(self) -> None:
        """Remove every local tag this object made (pushed images stay in the registry)."""
        for ref in sorted(self._local):
            self._untag(ref)
        self._local.clear()
