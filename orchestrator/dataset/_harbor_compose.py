"""A Harbor task's ``environment/docker-compose.yaml`` as a toolfleet pod, with its ``build:`` images.

The ``main`` service (else the first) is the agent's container; the others become the sandbox's
``services``. Keys Harbor uses that have no meaning in a toolfleet pod (``volumes``, ``ports``, ...) are
dropped with a note. ``${VAR}`` is filled after the YAML is parsed, in string values only (so a value can
never add keys), from Harbor's own compose variables, the task's ``[environment.env]`` and what the
operator passes (``_harbor_env``). A ``build:`` context is a directory inside the task, walked as data
(``_harbor_tree``) before anything hashes or sends it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator._errors import ToolfleetError

from ._harbor_env import TaskEnv, TaskEnvError, interpolate
from ._harbor_tree import TaskTreeError, TreeLimits, read_task_file, walk_tree

__all__ = ["COMPOSE_FILE", "MAIN_SERVICE", "ComposeBuild", "ComposeTaskError", "compose_pod"]

COMPOSE_FILE = "docker-compose.yaml"
MAIN_SERVICE = "main"  # Harbor's name for the agent's container in a compose environment
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NODES = 100_000  # YAML aliases can make a small file a huge tree: bound the walk over it

_DROPPED = {  # compose keys Harbor uses that have no meaning in a toolfleet pod: dropped, with a note
    "volumes": "nothing is mounted from the host",
    "ports": "services reach each other as NAME:PORT; nothing is published",
    "expose": "services reach each other as NAME:PORT",
    "networks": "the services share the sandbox's own network",
    "pull_policy": "images are built here or already present",
    "ulimits": "not supported",
}


class ComposeTaskError(ToolfleetError, ValueError):
    """The compose file cannot be mapped (one line, without the task's name: the loader adds it)."""


@dataclass(frozen=True)
class ComposeBuild:
    """One ``build:`` of the compose file: the service, its context (relative to the task), Dockerfile, args."""

    service: str | None  # None: the main service
    context: str
    dockerfile: str
    args: dict[str, str]


def compose_pod(task_dir: Path, text: str, variables: Mapping[str, str], env: TaskEnv,
                limits: TreeLimits) -> tuple[dict[str, Any], list[ComposeBuild], list[str]]:
    """``(services, builds, notes)``: the compose file's services with ``${VAR}`` filled and dropped keys
    removed (a service to build has no ``image`` yet: the loader sets it), the builds, one note per drop."""
    import yaml

    source = f"environment/{COMPOSE_FILE}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ComposeTaskError(f"{source} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise ComposeTaskError(f"{source} needs a 'services' mapping")
    notes = [f"{source}: top-level '{key}'" for key in data if key in ("networks", "volumes", "configs", "secrets")]
    main = MAIN_SERVICE if MAIN_SERVICE in data["services"] else next(iter(data["services"]))
    services: dict[str, Any] = {}
    builds: list[ComposeBuild] = []
    budget = [MAX_NODES]
    for service, body in data["services"].items():
        name = str(service)
        if not isinstance(body, dict):
            raise ComposeTaskError(f"{source}: service {name[:60]!r} must be a mapping")
        body = {str(k): v for k, v in body.items()}
        for key in [k for k in body if k in _DROPPED]:
            notes.append(f"{source}: services.{name}.{key} ({_DROPPED[key]})")
            del body[key]
        _valueless_from_env(body)
        try:
            body = _fill(body, variables, env, f"{source}: services.{name}", budget)
        except TaskEnvError as exc:
            raise ComposeTaskError(str(exc)) from None
        spec = body.pop("build", None)
        if spec is None and name == main and "image" not in body:
            spec = "."  # Harbor builds the main service from environment/Dockerfile
        if spec is not None:
            builds.append(_build(task_dir, name if name != main else None, spec, f"{source}: services.{name}.build",
                                 limits))
        services[name] = body
    return {"main": main, "services": services}, builds, notes


def _valueless_from_env(body: dict[str, Any]) -> None:
    """Compose reads an ``environment`` entry or build argument given without a value (``- NAME``,
    ``NAME:``) from its environment: written as ``${NAME}``, it goes through the same policy as any."""
    build = body.get("build")
    holders = [(body, "environment")] + ([(build, "args")] if isinstance(build, dict) else [])
    for holder, key in holders:
        value = holder.get(key)
        if isinstance(value, list):
            pairs = [str(item).partition("=") for item in value]
            value = {k: v if sep else None for k, sep, v in pairs}
        if isinstance(value, dict):
            holder[key] = {str(k): (f"${{{k}}}" if _NAME.fullmatch(str(k)) else "") if v is None else v
                           for k, v in value.items()}


def _fill(value: Any, variables: Mapping[str, str], env: TaskEnv, where: str, budget: list[int]) -> Any:
    """``value`` with every string scalar interpolated (keys are left as written)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ComposeTaskError(f"{where}: more than {MAX_NODES:,} values (YAML aliases?)")
    if isinstance(value, str):
        return interpolate(value, variables, env, where)
    if isinstance(value, dict):
        return {k: _fill(v, variables, env, where, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, variables, env, where, budget) for v in value]
    return value


def _build(task_dir: Path, service: str | None, spec: Any, where: str, limits: TreeLimits) -> ComposeBuild:
    if isinstance(spec, str):
        spec = {"context": spec}
    if not isinstance(spec, dict):
        raise ComposeTaskError(f"{where} must be a path or a mapping")
    context = posixpath.normpath(posixpath.join("environment", str(spec.get("context", "."))))
    if context == ".." or context.startswith(("../", "/")):
        raise ComposeTaskError(f"{where}: context {str(spec.get('context'))[:80]!r} is not inside the task")
    dockerfile = posixpath.normpath(str(spec.get("dockerfile", "Dockerfile")))
    if dockerfile == ".." or dockerfile.startswith(("../", "/")):
        raise ComposeTaskError(f"{where}: dockerfile {dockerfile[:80]!r} is not inside its context")
    try:
        walk_tree(task_dir, context, limits.context_bytes, limits.tree_entries, f"build context {context}")
        read_task_file(task_dir, f"{context}/{dockerfile}", limits.file_bytes, f"{context}/{dockerfile}")
    except FileNotFoundError:
        raise ComposeTaskError(f"{where}: no {context}/{dockerfile} in the task") from None
    except TaskTreeError as exc:
        raise ComposeTaskError(f"{where}: {exc}") from None
    raw_args = spec.get("args") or {}  # a list was made a mapping (_valueless_from_env)
    if not isinstance(raw_args, dict):
        raise ComposeTaskError(f"{where}.args must be a mapping")
    args = {str(k): "" if v is None else str(v) for k, v in raw_args.items()}
    return ComposeBuild(service, context, dockerfile, args)
