"""Harbor (Terminal-Bench 2) task directories as a dataset: ``harbor_dataset(path)``.

A task directory holds ``task.toml`` (timeouts, resources; see ``_harbor_config``), ``instruction.md``
(the sample's input), ``environment/`` (a ``Dockerfile``, or a ``docker-compose.yaml`` whose ``main``
service is the agent's container and whose other services become the sandbox's ``services``),
``tests/test.sh`` (the verifier) and, optionally, ``solution/solve.sh`` (the oracle). ``path`` is one
task directory or a directory of them (its subdirectories that look like tasks; others are skipped).

Each task becomes one ``Sample``: id = the directory's name, input = the instruction, sandbox = a docker
sandbox on the task's image (built here: ``_harbor_images``), metadata = the task's ``[metadata]`` plus
what the verifier and the oracle need under ``"harbor"``. A task that cannot be read is one
``HarborTaskError`` line naming it; settings that do not map are returned as notes (one line each).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator._errors import ToolfleetError

from ._harbor_config import HarborSettings, TaskConfigError, map_task_config, parse_task_config
from ._harbor_images import IMAGE_PREFIX, BuildReport, DockerImageBuilder, HarborBuildError, ImageBuild
from ._sample import MemoryDataset, Sample

__all__ = ["HarborLoad", "HarborTaskError", "build_images", "harbor_dataset", "load_harbor", "pack_directory"]

COMPOSE_FILE = "docker-compose.yaml"
MAIN_SERVICE = "main"  # Harbor's name for the agent's container in a compose environment
_TASK_MARKERS = ("task.toml", "instruction.md", "environment", "tests")


class HarborTaskError(ToolfleetError, ValueError):
    """A Harbor task directory cannot be used; one line names it and says why."""


@dataclass
class HarborLoad:
    samples: list[Sample]
    builds: list[ImageBuild]
    notes: dict[str, list[str]] = field(default_factory=dict)  # unmapped setting -> tasks that have it
    report: BuildReport = field(default_factory=BuildReport)
    seconds: float = 0.0

    def lines(self, where: str) -> list[str]:
        """What the load says to the user: one line per unmapped setting, then the tasks and images."""
        return [*self.note_lines(), report_line(len(self.samples), len(self.samples), where, self.report,
                                                self.seconds)]

    def note_lines(self) -> list[str]:
        return [f"harbor: not mapped, ignored: {note} (task{'s' if len(tasks) > 1 else ''} {', '.join(tasks)})"
                for note, tasks in self.notes.items()]


def report_line(used: int, total: int, where: str, report: BuildReport, seconds: float) -> str:
    """``harbor: 3 tasks from DIR; images: 1 built, 3 cached (12.0 s); loaded in 12.4 s``."""
    tasks = f"{used} task{'s' if total != 1 else ''}" if used == total else f"{used} of {total} tasks"
    return f"harbor: {tasks} from {where}; {report.line()}; loaded in {seconds:.1f} s"


def build_images(builds: list[ImageBuild], builder: DockerImageBuilder | None = None) -> BuildReport:
    """Build (or find) these images; a failure is one ``HarborTaskError`` line naming the task."""
    own = builder is None
    builder = builder or DockerImageBuilder()
    try:
        for item in builds:
            try:
                builder.ensure(item)
            except HarborBuildError as exc:
                raise HarborTaskError(f"Harbor task '{item.task}': {exc}") from None
    finally:
        if own:
            builder.close()
    return builder.report


def find_task_dirs(path: str | Path) -> list[Path]:
    """The task directories ``path`` names: itself, or its subdirectories that look like tasks."""
    root = Path(path)
    if not root.is_dir():
        raise HarborTaskError(f"Harbor path '{path}' is not a directory.")
    if any((root / marker).exists() for marker in ("task.toml", "instruction.md")):
        return [root.resolve()]
    found = [child.resolve() for child in sorted(root.iterdir())
             if child.is_dir() and not child.name.startswith(".")
             and any((child / marker).exists() for marker in _TASK_MARKERS)]
    if not found:
        raise HarborTaskError(f"No Harbor task directories in '{path}' (a task has task.toml, instruction.md, "
                              "environment/ and tests/test.sh).")
    return found


def load_harbor(path: str | Path, *, build: bool = True, image_prefix: str = IMAGE_PREFIX,
                builder: DockerImageBuilder | None = None, environ: dict[str, str] | None = None) -> HarborLoad:
    """Read every task under ``path`` and (``build``) build the images they need; see the module doc."""
    started = time.monotonic()
    own = builder is None
    builder = builder or DockerImageBuilder()
    samples: list[Sample] = []
    builds: list[ImageBuild] = []
    notes: dict[str, list[str]] = {}
    try:
        for task_dir in find_task_dirs(path):
            sample, task_builds, task_notes = _read_task(task_dir, builder, image_prefix, environ or dict(os.environ))
            samples.append(sample)
            builds.extend(task_builds)
            for note in task_notes:
                notes.setdefault(note, []).append(task_dir.name)
        if build:
            build_images(builds, builder)
    finally:
        if own:
            builder.close()
    return HarborLoad(samples, builds, notes, builder.report, time.monotonic() - started)


def harbor_dataset(path: str | Path, *, build: bool = True, image_prefix: str = IMAGE_PREFIX,
                   echo: Callable[[str], None] | None = None) -> MemoryDataset:
    """Harbor tasks as samples (one per task directory), their images built; what does not map and
    what was built are printed (``echo``, default: stderr), one line each."""
    loaded = load_harbor(path, build=build, image_prefix=image_prefix)
    say = echo or (lambda line: print(f"toolfleet: {line}", file=sys.stderr, flush=True))
    for line in loaded.lines(str(path)):
        say(line)
    return MemoryDataset(loaded.samples, name=Path(path).resolve().name, location=str(Path(path).resolve()))


# -- one task ------------------------------------------------------------------------------------


def _read_task(task_dir: Path, builder: DockerImageBuilder, prefix: str,
               environ: dict[str, str]) -> tuple[Sample, list[ImageBuild], list[str]]:
    name = task_dir.name

    def fail(reason: str) -> HarborTaskError:
        return HarborTaskError(f"Harbor task '{name}' ({task_dir}): {reason}")

    try:
        config = parse_task_config(_read_text(task_dir / "task.toml", "task.toml"))
        settings = map_task_config(config)
    except (TaskConfigError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    try:
        instruction = _read_text(task_dir / "instruction.md", "instruction.md")
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    if not instruction.strip():
        raise fail("instruction.md is empty")
    if not (task_dir / "tests" / "test.sh").is_file():
        raise fail("tests/test.sh is missing (the verifier)")
    env_dir = task_dir / "environment"
    notes = list(settings.notes)
    try:
        if (env_dir / COMPOSE_FILE).is_file():
            sandbox, builds, compose_notes = _compose_sandbox(name, task_dir, settings, builder, prefix, environ)
            notes.extend(compose_notes)
        elif settings.docker_image:
            sandbox, builds = {"type": "docker", "image": settings.docker_image, "pool_size": 0, **settings.sandbox}, []
        elif (env_dir / "Dockerfile").is_file():
            tag = builder.tag_for(name, env_dir, "Dockerfile", {}, prefix=prefix)
            builds = [ImageBuild(name, env_dir, "Dockerfile", (), tag, settings.build_timeout)]
            sandbox = {"type": "docker", "image": tag, "pool_size": 0, **settings.sandbox}
        else:
            raise fail(f"environment/ has neither a Dockerfile nor {COMPOSE_FILE} (and task.toml names no "
                       "environment.docker_image)")
    except HarborBuildError as exc:
        raise fail(str(exc)) from None
    metadata: dict[str, Any] = dict(config.metadata)
    metadata["harbor"] = {
        "dir": str(task_dir),
        "agent_timeout": settings.agent_timeout,
        "verifier_timeout": settings.verifier_timeout,
        "verifier_user": settings.verifier_user,
        "verifier_env": settings.verifier_env,  # ${VAR} templates resolved when the verifier runs
        "solution_env": settings.solution_env,
        "has_solution": (task_dir / "solution" / "solve.sh").is_file(),
    }
    return Sample(id=name, input=instruction, metadata=metadata, sandbox=sandbox), builds, notes


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FileNotFoundError(f"{what} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


# -- compose environments -------------------------------------------------------------------------

_DROPPED = {  # compose keys Harbor uses that have no meaning in a toolfleet pod: dropped, with a note
    "volumes": "nothing is mounted from the host",
    "ports": "services reach each other as NAME:PORT on loopback; nothing is published",
    "expose": "services reach each other as NAME:PORT on loopback",
    "networks": "the services share one loopback-only network",
    "pull_policy": "images are built here or already present",
    "ulimits": "not supported",
}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def _compose_sandbox(name: str, task_dir: Path, settings: HarborSettings, builder: DockerImageBuilder, prefix: str,
                     environ: dict[str, str]) -> tuple[dict[str, Any], list[ImageBuild], list[str]]:
    """The pod a task's ``environment/docker-compose.yaml`` describes, with its ``build:`` images."""
    import yaml

    env_dir = task_dir / "environment"
    source = f"environment/{COMPOSE_FILE}"
    memory = settings.sandbox["mem_limit"]
    # Harbor's compose variables (its base file sets CPUS and MEMORY from task.toml), then the environment's.
    known = {"CPUS": str(settings.sandbox["cpus"]), "MEMORY": memory.upper().rstrip("B"), "TEST_DIR": "/tests",
             **environ}
    text = (env_dir / COMPOSE_FILE).read_text(encoding="utf-8")
    text = _VARIABLE.sub(lambda m: known.get(m.group(1), m.group(2) or ""), text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HarborTaskError(f"Harbor task '{name}': {source} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise HarborTaskError(f"Harbor task '{name}': {source} needs a 'services' mapping")
    notes: list[str] = []
    for key in [k for k in data if k in ("networks", "volumes", "configs", "secrets")]:
        notes.append(f"{source}: top-level '{key}'")
        del data[key]
    services: dict[str, Any] = {}
    builds: list[ImageBuild] = []
    main = MAIN_SERVICE if MAIN_SERVICE in data["services"] else next(iter(data["services"]))
    for service, body in data["services"].items():
        if not isinstance(body, dict):
            raise HarborTaskError(f"Harbor task '{name}': {source}: service {service!r} must be a mapping")
        body = dict(body)
        for key in [k for k in body if k in _DROPPED]:
            notes.append(f"{source}: services.{service}.{key} ({_DROPPED[key]})")
            del body[key]
        spec = body.pop("build", None)
        if spec is None and service == main and "image" not in body:
            spec = "."  # Harbor builds the main service from environment/Dockerfile
        if spec is not None:
            context, dockerfile, args = _build_spec(name, env_dir, task_dir, service, spec, source)
            tag = builder.tag_for(name, context, dockerfile, args, None if service == main else service, prefix)
            builds.append(ImageBuild(name, context, dockerfile, tuple(sorted(args.items())), tag,
                                     settings.build_timeout))
            body["image"] = tag
        if service == main:
            body["x-default"] = True
            for key, value in (("cpus", settings.sandbox["cpus"]), ("mem_limit", memory)):
                if key not in body and "deploy" not in body:
                    body[key] = value
        services[str(service)] = body
    from orchestrator.util._compose import ComposeError, config_from_compose  # the compose subset toolfleet maps

    try:
        config = config_from_compose({"services": services}, source)
    except ComposeError as exc:
        raise HarborTaskError(f"Harbor task '{name}': {exc}") from None
    sandbox = config.model_dump(mode="json")
    sandbox["environment"] = {**settings.sandbox.get("environment", {}), **sandbox["environment"]}
    if "user" in settings.sandbox and not sandbox.get("user"):
        sandbox["user"] = settings.sandbox["user"]
    sandbox["pool_size"] = 0
    return sandbox, builds, notes


def _build_spec(name: str, env_dir: Path, task_dir: Path, service: str, spec: Any,
                source: str) -> tuple[Path, str, dict[str, str]]:
    """(context, Dockerfile relative to it, build args) of a compose ``build:`` entry, kept in the task."""
    if isinstance(spec, str):
        spec = {"context": spec}
    if not isinstance(spec, dict):
        raise HarborTaskError(f"Harbor task '{name}': {source}: services.{service}.build must be a path or a mapping")
    context = (env_dir / str(spec.get("context", "."))).resolve()
    if not context.is_relative_to(task_dir) or not context.is_dir():
        raise HarborTaskError(f"Harbor task '{name}': {source}: services.{service}.build context "
                              f"'{spec.get('context')}' is not a directory inside the task")
    dockerfile = str(spec.get("dockerfile", "Dockerfile"))
    if not (context / dockerfile).resolve().is_relative_to(context) or not (context / dockerfile).is_file():
        raise HarborTaskError(f"Harbor task '{name}': {source}: services.{service}.build: no Dockerfile "
                              f"'{dockerfile}' in its context")
    raw_args = spec.get("args") or {}
    if isinstance(raw_args, list):
        raw_args = dict(str(item).partition("=")[::2] for item in raw_args)
    if not isinstance(raw_args, dict):
        raise HarborTaskError(f"Harbor task '{name}': {source}: services.{service}.build.args must be a mapping")
    return context, dockerfile, {str(k): "" if v is None else str(v) for k, v in raw_args.items()}


# -- what travels into the sandbox ---------------------------------------------------------------


def pack_directory(path: Path, limit: int | None = None) -> str:
    """A directory's files as one base64 gzipped tar (executable bits kept), for ``base64 -d | tar -xz``."""
    import base64

    from ._files import _archive, sample_files_limit
    from ._host_paths import Link, read_bounded, walk

    # Read as a sample's directory files are (``_host_paths``): links sent as links, never followed on
    # this host; sizes counted on the bytes read.
    cap = sample_files_limit() if limit is None else limit
    members: list[tuple[str, bytes | Link, bool]] = []
    total = 0
    try:
        for rel, item in (list(walk(path)) if path.is_dir() else []):
            data, executable = (item, False) if isinstance(item, Link) else read_bounded(item, max(0, cap - total))
            total += len(data.target) if isinstance(data, Link) else len(data)
            if total > cap:
                break
            members.append((rel, data, executable))
    except (OSError, ValueError) as exc:
        raise HarborTaskError(f"Cannot read '{path}': {getattr(exc, 'strerror', None) or exc}.") from None
    if total > cap:
        raise HarborTaskError(f"'{path}' holds more than the {cap:,} bytes that may travel to a sandbox "
                              "(TOOLFLEET_SAMPLE_FILES_LIMIT).")
    return base64.b64encode(_archive(members)).decode("ascii")
