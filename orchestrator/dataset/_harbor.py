"""Harbor (Terminal-Bench 2) task directories as a dataset: ``harbor_dataset(path)``.

A task directory holds ``task.toml`` (timeouts, resources, network; see ``_harbor_config``),
``instruction.md`` (the sample's input), ``environment/`` (a ``Dockerfile``, or a ``docker-compose.yaml``
whose ``main`` service is the agent's container and whose other services become the sandbox's
``services``: ``_harbor_compose``), ``tests/test.sh`` (the verifier) and, optionally,
``solution/solve.sh`` (the oracle). ``path`` is one task directory or a directory of them (its
subdirectories that look like tasks; others are skipped).

A task directory is data (``_harbor_tree``): nothing in it is followed outside it, only regular files
and directories are read, and sizes are bounded (``TreeLimits``). Its ``${VAR}`` templates read only what
the operator passes (``task_env``: ``_harbor_env``).

Each task becomes one ``Sample``: id = the directory's name, input = the instruction, sandbox = a docker
sandbox on the task's image (built here: ``_harbor_images``), metadata = the task's ``[metadata]`` plus
what the solver and the verifier need under ``"harbor"``. A task that cannot be read is one
``HarborTaskError`` line naming it; settings that do not map are returned as notes (one line each).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator._errors import ToolfleetError

from ._harbor_compose import COMPOSE_FILE, ComposeTaskError, compose_pod
from ._harbor_config import HarborSettings, TaskConfigError, TimeoutMultipliers, map_task_config, parse_task_config
from ._harbor_env import TaskEnv, TaskEnvError, resolve_whole_values
from ._harbor_images import IMAGE_PREFIX, BuildReport, DockerImageBuilder, HarborBuildError, ImageBuild
from ._harbor_tree import TaskTreeError, TreeLimits, exists, pack_tree, read_task_file, walk_tree
from ._sample import MemoryDataset, Sample

__all__ = ["HarborLoad", "HarborTaskError", "build_images", "harbor_dataset", "load_harbor", "pack_task_dir"]

_TASK_MARKERS = ("task.toml", "instruction.md", "environment", "tests")
# Harbor's own compose variables (its base compose file reads CPUS and MEMORY from task.toml; the log
# directories' container paths), which describe the task and read nothing of this host.
_LOG_PATHS = {"ENV_VERIFIER_LOGS_PATH": "/logs/verifier", "ENV_AGENT_LOGS_PATH": "/logs/agent",
              "ENV_ARTIFACTS_PATH": "/logs/artifacts"}


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
    """The task directories ``path`` names: itself, or its subdirectories that look like tasks. ``path`` is
    the operator's (resolved once); a subdirectory given as a symlink is refused, never followed."""
    root = Path(path)
    if not root.is_dir():
        raise HarborTaskError(f"Harbor path '{path}' is not a directory.")
    root = root.resolve()
    if any(os.path.lexists(root / marker) for marker in ("task.toml", "instruction.md")):
        return [root]
    found: list[Path] = []
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or not any(os.path.lexists(child / m) for m in _TASK_MARKERS):
            continue
        if child.is_symlink():
            raise HarborTaskError(f"Harbor task '{child.name}' ({child}) is a symlink: a task directory is read "
                                  "only where it is, never through a link.")
        if child.is_dir():
            found.append(child)
    if not found:
        raise HarborTaskError(f"No Harbor task directories in '{path}' (a task has task.toml, instruction.md, "
                              "environment/ and tests/test.sh).")
    return found


@dataclass(frozen=True)
class LoadOptions:
    """How tasks are read: the host variables their templates may read, timeout multipliers, size bounds."""

    task_env: tuple[str, ...] = ()
    environ: Mapping[str, str] | None = None  # default: this process's environment
    multipliers: TimeoutMultipliers = field(default_factory=TimeoutMultipliers)
    limits: TreeLimits = field(default_factory=TreeLimits)

    def env(self) -> TaskEnv:
        return TaskEnv(self.task_env, self.environ if self.environ is not None else os.environ)


def load_harbor(path: str | Path, *, build: bool = True, image_prefix: str = IMAGE_PREFIX,
                builder: DockerImageBuilder | None = None, environ: Mapping[str, str] | None = None,
                task_env: Iterable[str] = (), multipliers: TimeoutMultipliers | None = None,
                limits: TreeLimits | None = None) -> HarborLoad:
    """Read every task under ``path`` and (``build``) build the images they need; see the module doc.
    ``task_env``: the names (or patterns) of this host's variables the tasks' ``${VAR}`` may read."""
    started = time.monotonic()
    try:
        options = LoadOptions(tuple(task_env), environ, multipliers or TimeoutMultipliers(), limits or TreeLimits())
        options.env()  # a refused --task-env name is one line before anything is read
    except TaskEnvError as exc:
        raise HarborTaskError(str(exc)) from None
    own = builder is None
    builder = builder or DockerImageBuilder()
    samples: list[Sample] = []
    builds: list[ImageBuild] = []
    notes: dict[str, list[str]] = {}
    try:
        for task_dir in find_task_dirs(path):
            sample, task_builds, task_notes = _read_task(task_dir, builder, image_prefix, options)
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
                   echo: Callable[[str], None] | None = None, task_env: Iterable[str] = ()) -> MemoryDataset:
    """Harbor tasks as samples (one per task directory), their images built; what does not map and
    what was built are printed (``echo``, default: stderr, terminal-safe), one line each."""
    from orchestrator.util._terminal import terminal_safe

    loaded = load_harbor(path, build=build, image_prefix=image_prefix, task_env=task_env)
    say = echo or (lambda line: print(f"toolfleet: {terminal_safe(line, keep_newlines=False)}", file=sys.stderr,
                                      flush=True))
    for line in loaded.lines(str(path)):
        say(line)
    return MemoryDataset(loaded.samples, name=Path(path).resolve().name, location=str(Path(path).resolve()))


def pack_task_dir(task_dir: str | Path, rel: str, limit: int | None = None) -> str:
    """``tests/`` or ``solution/`` of a task, packed for the sandbox (read as data, bounded: ``pack_tree``);
    one ``HarborTaskError`` line when it may not be sent."""
    from ._files import sample_files_limit

    try:
        return pack_tree(Path(task_dir), rel, sample_files_limit() if limit is None else limit)
    except (TaskTreeError, OSError) as exc:
        raise HarborTaskError(f"Harbor task '{Path(task_dir).name}': {exc}") from None


# -- one task ------------------------------------------------------------------------------------


def _read_task(task_dir: Path, builder: DockerImageBuilder, prefix: str,
               options: LoadOptions) -> tuple[Sample, list[ImageBuild], list[str]]:
    name = task_dir.name

    def fail(reason: str) -> HarborTaskError:
        return HarborTaskError(f"Harbor task '{name}' ({task_dir}): {reason}")

    limits, env = options.limits, options.env()
    try:
        config = parse_task_config(_text(task_dir, "task.toml", limits.file_bytes))
        settings = map_task_config(config, options.multipliers)
        instruction = _text(task_dir, "instruction.md", limits.instruction_bytes)
        if not instruction.strip():
            raise TaskTreeError("instruction.md is empty")
        _check_copied(task_dir, "tests", required="tests/test.sh is missing (the verifier)")
        has_solution = _check_copied(task_dir, "solution", required=None)
        container_env = resolve_whole_values(settings.environment_env, env, "environment.env")
        resolve_whole_values(settings.verifier_env, env, "verifier.env")  # checked now, filled when it runs
        resolve_whole_values(settings.solution_env, env, "solution.env")
        sandbox, builds, notes = _environment(task_dir, settings, container_env, builder, prefix, options)
        sandbox.update(_sandbox_network(settings))
        notes = [*settings.notes, *notes]
    except (TaskConfigError, TaskTreeError, TaskEnvError, ComposeTaskError, HarborBuildError,
            FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    metadata: dict[str, Any] = dict(config.metadata)
    metadata["harbor"] = {
        "dir": str(task_dir),
        "agent_timeout": settings.agent_timeout,
        "verifier_timeout": settings.verifier_timeout,
        "verifier_user": settings.verifier_user,
        "verifier_env": settings.verifier_env,  # ${VAR} templates filled when the verifier runs
        "solution_env": settings.solution_env,
        "task_env": list(options.task_env),  # what those templates may read
        "has_solution": has_solution,
        # The network policy of each phase, in the sandbox's terms (``_harbor_network``).
        "network": {phase: policy.sandbox_fields() for phase, policy in (
            ("setup", settings.network.setup), ("agent", settings.network.agent),
            ("verifier", settings.network.verifier))},
    }
    return Sample(id=name, input=instruction, metadata=metadata, sandbox=sandbox), builds, notes


def _sandbox_network(settings: HarborSettings) -> dict[str, Any]:
    """The sandbox's network fields: it opens under the environment's policy (its set-up runs there) and may
    change to the agent's and the verifier's (``phase_network_modes``; the solver and the scorer change it
    through the dispatcher's ``set_sandbox_network`` when a phase starts)."""
    plan = settings.network
    fields = plan.setup.sandbox_fields()
    phases = [policy.sandbox_fields()["network_mode"] for _, policy in plan.changes()]
    if phases:
        fields["phase_network_modes"] = list(dict.fromkeys(phases))
    return fields


def _text(task_dir: Path, rel: str, limit: int) -> str:
    try:
        return read_task_file(task_dir, rel, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise TaskTreeError(f"{rel} is not UTF-8 text") from None


def _check_copied(task_dir: Path, rel: str, required: str | None) -> bool:
    """``tests/`` or ``solution/`` is sent into the sandbox: walked as data now, within the files limit."""
    from ._files import sample_files_limit

    script = "test.sh" if rel == "tests" else "solve.sh"
    if not exists(task_dir, rel):
        if required:
            raise TaskTreeError(required)
        return False
    entries = walk_tree(task_dir, rel, sample_files_limit(), TreeLimits().tree_entries, f"{rel}/")
    if not any(e.rel == script and e.kind == "file" for e in entries):
        if required:
            raise TaskTreeError(required)
        return False
    return True


def _environment(task_dir: Path, settings: HarborSettings, container_env: dict[str, str],
                 builder: DockerImageBuilder, prefix: str,
                 options: LoadOptions) -> tuple[dict[str, Any], list[ImageBuild], list[str]]:
    """The sample's sandbox spec and the images it needs built."""
    name, limits = task_dir.name, options.limits
    base: dict[str, Any] = {"type": "docker", "pool_size": 0, **settings.sandbox}
    if container_env:
        base["environment"] = container_env
    if exists(task_dir, f"environment/{COMPOSE_FILE}"):
        return _compose_sandbox(task_dir, settings, container_env, builder, prefix, options)
    if settings.docker_image:
        return {**base, "image": settings.docker_image}, [], []
    if exists(task_dir, "environment/Dockerfile"):
        walk_tree(task_dir, "environment", limits.context_bytes, limits.tree_entries, "environment/")
        read_task_file(task_dir, "environment/Dockerfile", limits.file_bytes)
        context = task_dir / "environment"
        tag = builder.tag_for(name, context, "Dockerfile", {}, prefix=prefix)
        return {**base, "image": tag}, [ImageBuild(name, context, "Dockerfile", (), tag, settings.build_timeout)], []
    raise TaskTreeError(f"environment/ has neither a Dockerfile nor {COMPOSE_FILE} (and task.toml names no "
                        "environment.docker_image)")


def _compose_sandbox(task_dir: Path, settings: HarborSettings, container_env: dict[str, str],
                     builder: DockerImageBuilder, prefix: str,
                     options: LoadOptions) -> tuple[dict[str, Any], list[ImageBuild], list[str]]:
    """The pod a task's ``environment/docker-compose.yaml`` describes, with its ``build:`` images."""
    from orchestrator.util._compose import ComposeError, config_from_compose  # the compose subset toolfleet maps

    name = task_dir.name
    memory = settings.sandbox["mem_limit"]
    variables = {"CPUS": str(settings.sandbox["cpus"]), "MEMORY": memory.upper().rstrip("B"), "TEST_DIR": "/tests",
                 **_LOG_PATHS, **container_env}
    text = _text(task_dir, f"environment/{COMPOSE_FILE}", options.limits.file_bytes)
    pod, compose_builds, notes = compose_pod(task_dir, text, variables, options.env(), options.limits)
    main, services = pod["main"], pod["services"]
    builds: list[ImageBuild] = []
    for item in compose_builds:
        context = task_dir / item.context
        tag = builder.tag_for(name, context, item.dockerfile, item.args, item.service, prefix)
        builds.append(ImageBuild(name, context, item.dockerfile, tuple(sorted(item.args.items())), tag,
                                 settings.build_timeout))
        services[item.service or main]["image"] = tag
    services[main]["x-default"] = True
    for key, value in (("cpus", settings.sandbox["cpus"]), ("mem_limit", memory)):
        if key not in services[main] and "deploy" not in services[main]:
            services[main][key] = value
    if settings.docker_image and "image" not in services[main]:
        services[main]["image"] = settings.docker_image
    try:
        config = config_from_compose({"services": services}, f"environment/{COMPOSE_FILE}")
    except ComposeError as exc:
        raise ComposeTaskError(str(exc)) from None
    sandbox = config.model_dump(mode="json")
    sandbox["environment"] = {**container_env, **sandbox["environment"]}
    for key in ("user", "working_dir"):
        if key in settings.sandbox and not sandbox.get(key):
            sandbox[key] = settings.sandbox[key]
    sandbox["pool_size"] = 0
    return sandbox, builds, notes
