"""``toolfleet setup [redis] [registry] [images] [browser] [faketime]``: bring a bare machine to what the test suite and
docker mode need.

What it provides, each step skipped when already there (so a second run takes a second):

- ``redis`` — ``redis-server`` on the PATH (the Celery tests start their own instance on a free loopback
  port). Installed with ``apt-get`` when we are root on a Debian-like system; otherwise one line says what
  to install. Why apt and not a pip wheel: Debian's package is the server operators run, it is in the
  registry every machine here reaches, and it needs no compiler.
- ``registry`` — Debian's ``docker-registry`` (the Distribution registry server): the pull tests start
  their own on a free loopback port (``docker-registry serve``); installed with apt like redis-server.
- ``browser`` — Debian's ``chromium``, headless, for the test that opens a log in ``inspect view``.
- ``faketime`` — Debian's ``faketime`` (libfaketime): the chaos suite (``tests/chaos``) skews a worker's
  clock by preloading it into that worker process, a real skew no code of ours can special-case.
- ``images`` — the sandbox images (``sandbox_images/build.sh``: debootstrap + ``docker import`` +
  ``docker build``, no registry). ``debootstrap`` is installed with apt the same way when it is missing
  and an image has to be built. Cached by tag (and by recipe hash for ``toolfleet/sandbox:latest``).

Every failure is one line on stderr and exit 1: a missing Docker daemon, no root for apt, no checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator._errors import SetupError

from ._common import fail

__all__ = ["SetupError", "add_command", "ensure_images"]

COMPONENTS = ("redis", "registry", "images", "browser", "faketime")
# The tags build.sh produces; `images` is done when all of them exist with the current recipe.
IMAGES = ("toolfleet/debian-base:bookworm", "toolfleet/sandbox:latest")
APT_TIMEOUT = 900.0
BUILD_TIMEOUT = 1800.0


def add_command(commands: Any) -> None:
    p = commands.add_parser(
        "setup", help="install redis-server, docker-registry, chromium and faketime, build the sandbox images (what "
                      "the tests need)",
        description="Provide what the test suite and docker mode need on a bare machine: redis-server, "
                    "docker-registry, chromium and faketime (apt, as root) and the sandbox images "
                    "(sandbox_images/build.sh). "
                    "Idempotent.")
    p.add_argument("components", nargs="*", metavar="COMPONENT",
                   help="any of redis, registry, images, browser, faketime (default: all)")
    p.add_argument("--force-images", action="store_true", help="rebuild the images even if they exist")
    p.set_defaults(handler=run_setup)


def run_setup(args: argparse.Namespace) -> int:
    wanted = list(dict.fromkeys(args.components or COMPONENTS))
    unknown = [c for c in wanted if c not in COMPONENTS]
    if unknown:
        return fail(f"unknown setup component '{unknown[0]}' (choose from: {', '.join(COMPONENTS)})")
    try:
        for component in (c for c in COMPONENTS if c in wanted):  # always in this order
            if component == "images":
                ensure_images(force=args.force_images)
            else:
                _ensure_program(*_PROGRAMS[component])
    except SetupError as exc:
        return fail(str(exc))
    return 0


def _say(message: str) -> None:
    print(f"toolfleet setup: {message}", file=sys.stderr, flush=True)


# --- programs from Debian's packages ------------------------------------------------------------------


def _ensure_program(package: str, why: str, names: tuple[str, ...] = ()) -> None:
    """``package`` installed with apt unless one of its programs (``names``, default the package's name)
    is already on the PATH."""
    names = names or (package,)
    if any(shutil.which(name) for name in names):
        _say(f"{package}: present")
        return
    _apt_install([package], why=why)
    if not any(shutil.which(name) for name in names):
        raise SetupError(f"{names[0]} is still not on the PATH after installing it; add /usr/bin to PATH")
    _say(f"{package}: installed")


# Debian's redis-server and docker-registry packages start system services (6379, 5000); the tests
# never use them (they start their own on free loopback ports), operators may.
_PROGRAMS = {
    "redis": ("redis-server", "redis-server (the Celery tests start their own on loopback)", ()),
    "registry": ("docker-registry", "docker-registry (the image pull tests start their own on loopback)", ()),
    "browser": ("chromium", "chromium (the inspect view test renders a log headless)",
                ("chromium", "chromium-browser")),
    "faketime": ("faketime", "faketime (libfaketime: the chaos suite skews a worker's clock)", ()),
}


# --- images ------------------------------------------------------------------------------------------


def build_script() -> Path | None:
    """``sandbox_images/build.sh`` of the toolfleet checkout here (or the editable source tree); None outside one."""
    from . import _checkout

    package_dir = Path(__file__).resolve().parents[1]
    root = _checkout.find_checkout(Path.cwd().resolve(), package_dir, needs=_checkout.BUILD_SCRIPT)
    return root / _checkout.BUILD_SCRIPT if root else None


def ensure_images(force: bool = False) -> None:
    _require_docker()
    script = build_script()
    if script is None:
        raise SetupError("sandbox_images/build.sh not found here or above: building the sandbox images needs a "
                         "toolfleet source checkout (run `toolfleet setup images` inside it)")
    if not force and _images_current(script):
        _say("sandbox images: present (" + ", ".join(IMAGES) + ")")
        return
    if not _have_base_images() and not shutil.which("debootstrap"):
        _apt_install(["debootstrap"], why="debootstrap (builds the sandbox base image without a registry)")
    _say("sandbox images: building with sandbox_images/build.sh (debootstrap takes a few minutes, once)")
    env = {**os.environ, **({"FORCE": "1"} if force else {})}
    try:
        done = subprocess.run(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"sandbox_images/build.sh did not finish within {BUILD_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        tail = done.stdout.strip().splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        raise SetupError(f"sandbox_images/build.sh failed (exit {done.returncode}); its last lines are above")
    _say("sandbox images: built")


def _require_docker() -> None:
    try:
        import docker

        docker.from_env(timeout=10).ping()
    except Exception as exc:  # any failure means "no usable daemon"; the reason goes in the line
        raise SetupError(f"no reachable Docker Engine ({type(exc).__name__}): install Docker and start its daemon "
                         "(or set DOCKER_HOST)") from exc


def _images_current(script: Path) -> bool:
    """Every tag exists; build.sh itself decides whether the sandbox image's recipe changed (fast)."""
    if not _have_base_images():
        return False
    recipe = _docker_output(["image", "inspect", "--format", '{{ index .Config.Labels "toolfleet.recipe" }}',
                             IMAGES[-1]])
    return recipe is not None and recipe.strip() == _recipe_hash(script)


def _have_base_images() -> bool:
    return all(_docker_output(["image", "inspect", "--format", "{{.Id}}", tag]) is not None for tag in IMAGES)


def _recipe_hash(script: Path) -> str:
    import hashlib

    recipe = script.parent / "sandbox"
    data = b"".join(p.read_bytes() for p in sorted(recipe.iterdir()) if p.is_file())
    return hashlib.sha256(data).hexdigest()[:16]


def _docker_output(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


# --- apt ---------------------------------------------------------------------------------------------


def _apt_install(packages: list[str], why: str) -> None:
    line = "apt-get install " + " ".join(packages)
    if not shutil.which("apt-get"):
        raise SetupError(f"{why} is missing and this is not a Debian-like system: install {' '.join(packages)}")
    if os.geteuid() != 0:
        raise SetupError(f"{why} is missing: run `sudo {line}` (or rerun `toolfleet setup` as root)")
    _say(f"installing {' '.join(packages)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        try:
            done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=APT_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise SetupError(f"`{' '.join(argv)}` did not finish within {APT_TIMEOUT:g} s") from exc
        if done.returncode != 0:
            print("\n".join(done.stdout.strip().splitlines()[-10:]), file=sys.stderr)
            raise SetupError(f"`{' '.join(argv)}` failed (exit {done.returncode}); its last lines are above")
