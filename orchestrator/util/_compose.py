"""Inspect's compose-file form of a sandbox (``sandbox=("docker", "compose.yaml")``), read for the subset that maps.

Pure: ``config_from_compose`` turns the parsed YAML into a ``DockerSandboxConfig`` (table-tested);
``read_compose`` reads the file. The file is read where the task is loaded (the orchestrator); only
the resulting config travels to a worker, which never opens a path a task named.

What maps: the default service (named ``default``, else the one with ``x-default: true``, else the
first) becomes the sandbox's container (its image, user, working_dir, environment, limits; its
``command`` is replaced by toolfleet's keep-alive). Every other service becomes a ``services`` entry
(image, command, entrypoint, environment, user, working_dir, healthcheck, limits). They run as compose
runs them, each reaching the others by name on a network of the sandbox's own, whose way out is the
sandbox's ``network_mode`` (none by default); so ``ports``, ``networks`` and a compose ``network_mode``
other than ``none`` have no meaning here and are refused, as are ``build`` (build the image first),
``volumes`` and anything that widens the sandbox (``privileged``, ``cap_add``, ``devices``). Keys with no effect
on a sandbox (``depends_on``, ``container_name``, ``restart``, ``x-*``...) are ignored.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any

from orchestrator._errors import ToolfleetError

from ._sandbox_config import DockerSandboxConfig

__all__ = ["ComposeError", "config_from_compose", "parse_duration", "read_compose"]


class ComposeError(ToolfleetError, ValueError):
    """A compose file toolfleet cannot map; the message names the file, the service and the key."""


_IGNORED = {"depends_on", "container_name", "hostname", "restart", "platform", "tty", "stdin_open", "labels",
            "stop_grace_period", "stop_signal", "logging", "x-default", "x-local"}
_WHY = {
    "build": "build the image first (docker build -t NAME .) and give its 'image'",
    "ports": "the services reach each other as NAME:PORT on the sandbox's own network; nothing is published",
    "networks": "the services share one network of the sandbox's own",
    "volumes": "a sandbox mounts nothing from the host: give files with Sample.files",
    "privileged": "sandboxes never run privileged",
    "cap_add": "sandboxes drop every capability",
    "devices": "sandboxes get no host devices",
    "extra_hosts": "every service name already resolves to its service",
}
_DEFAULT_KEYS = {"image", "command", "user", "working_dir", "environment", "mem_limit", "cpus", "pids_limit",
                 "init", "read_only", "runtime", "network_mode", "deploy", "healthcheck", "entrypoint"}
_SERVICE_KEYS = {"image", "command", "entrypoint", "user", "working_dir", "environment", "healthcheck",
                 "mem_limit", "cpus", "pids_limit", "network_mode", "deploy", "init", "read_only", "runtime"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Compose's durations (``1m30s``, ``500ms``, ``2s``; a bare number is seconds) in seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"unreadable duration {value!r} (e.g. 1s, 500ms, 1m30s)")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def read_compose(path: str | Path, base_dir: str | Path | None = None) -> DockerSandboxConfig:
    """Read and map a compose file; a relative path is resolved against ``base_dir`` (the task file's)."""
    file = Path(path)
    if not file.is_absolute() and base_dir is not None:
        file = Path(base_dir) / file
    try:
        stat = file.stat()
    except OSError as exc:
        raise ComposeError(f"compose file {str(file)!r}: {exc.strerror or exc}") from None
    # Every sample of a task names the same file: it is read and mapped once while it is unchanged.
    return _read(str(file), stat.st_mtime_ns, stat.st_size).model_copy(deep=True)


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int, size: int) -> DockerSandboxConfig:
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ComposeError(f"compose file {str(file)!r}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ComposeError(f"compose file {str(file)!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return config_from_compose(data, file.name)


def config_from_compose(data: Any, source: str = "compose.yaml") -> DockerSandboxConfig:
    """Map a parsed compose file to a sandbox config (``ComposeError`` for what does not map)."""
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise ComposeError(f"{source}: needs a 'services' mapping with at least one service")
    for key in data:
        if key in ("networks", "volumes", "configs", "secrets"):
            raise ComposeError(
                f"{source}: top-level '{key}' is not supported ({_WHY.get(key, 'sandboxes are self-contained')})")
    services: dict[str, dict[str, Any]] = {}
    for name, body in data["services"].items():
        if not isinstance(body, dict):
            raise ComposeError(f"{source}: service {name!r} must be a mapping")
        services[str(name)] = body
    default = _default_name(services, source)
    fields: dict[str, Any] = {"type": "docker", "default_service": default}
    fields.update(_fields(services[default], f"{source}: service {default!r}", _DEFAULT_KEYS, default=True))
    others = {name: _fields(body, f"{source}: service {name!r}", _SERVICE_KEYS, default=False)
              for name, body in services.items() if name != default}
    if others:
        fields["services"] = others
    try:
        return DockerSandboxConfig.model_validate(fields)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ComposeError(f"{source}: {where + ': ' if where else ''}{first['msg']}") from None


def _default_name(services: dict[str, dict[str, Any]], source: str) -> str:
    if "default" in services:
        return "default"
    marked = [name for name, body in services.items() if body.get("x-default") is True]
    if len(marked) > 1:
        raise ComposeError(f"{source}: several services are marked x-default: {', '.join(marked)}")
    return marked[0] if marked else next(iter(services))


def _fields(body: dict[str, Any], where: str, allowed: set[str], default: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in _IGNORED or key.startswith("x-"):
            continue
        if key in _WHY:
            raise ComposeError(f"{where}: '{key}' is not supported: {_WHY[key]}")
        if key not in allowed:
            raise ComposeError(f"{where}: '{key}' is not supported by toolfleet sandboxes")
        if key == "network_mode":
            if value != "none":
                raise ComposeError(f"{where}: network_mode {value!r}: the services share one network of the sandbox's "
                                   "own; its way out is the sandbox's network_mode (none, public, allowlist)")
        elif key == "image":
            out["image"] = str(value)
        elif key == "command":
            if not default:  # the default container runs toolfleet's keep-alive; tools exec into it
                out["command"] = shlex.split(value) if isinstance(value, str) else [str(v) for v in value]
        elif key == "entrypoint":
            if default:
                continue
            out["entrypoint"] = shlex.split(value) if isinstance(value, str) else [str(v) for v in value]
        elif key == "environment":
            out["environment"] = _environment(value, where)
        elif key == "healthcheck":
            if not default:
                check = _healthcheck(value, where)
                if check is not None:
                    out["healthcheck"] = check
        elif key == "deploy":
            out.update(_deploy_limits(value, where))
        elif key == "cpus":
            out["cpus"] = float(value)
        elif key in ("user", "working_dir", "mem_limit", "runtime"):
            out[key] = str(value)
        else:  # pids_limit, init, read_only
            out[key] = value
    if "image" not in out:
        raise ComposeError(f"{where}: needs an 'image'"
                           + (" (build it first: docker build -t NAME .)" if "build" in body else ""))
    return out


def _environment(value: Any, where: str) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list):
        env: dict[str, str] = {}
        for item in value:
            key, _, val = str(item).partition("=")
            env[key] = val
        return env
    raise ComposeError(f"{where}: 'environment' must be a mapping or a list of NAME=value")


def _healthcheck(value: Any, where: str) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        raise ComposeError(f"{where}: 'healthcheck' must be a mapping")
    if value.get("disable"):
        return None
    test = value.get("test")
    if isinstance(test, list) and test and test[0] == "NONE":
        return None
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        test = [str(t) for t in test[1:]] if test[0] == "CMD" else " ".join(str(t) for t in test[1:])
    elif not isinstance(test, str):
        raise ComposeError(f"{where}: healthcheck 'test' must be a string or a list starting CMD / CMD-SHELL")
    check: dict[str, Any] = {"test": test}
    try:
        for key in ("interval", "timeout", "start_period"):
            if key in value:
                check[key] = parse_duration(value[key])
    except ValueError as exc:
        raise ComposeError(f"{where}: healthcheck: {exc}") from None
    if "retries" in value:
        check["retries"] = int(value["retries"])
    return check


def _deploy_limits(value: Any, where: str) -> dict[str, Any]:
    limits = ((value or {}).get("resources") or {}).get("limits") or {} if isinstance(value, dict) else None
    if limits is None:
        raise ComposeError(f"{where}: 'deploy' must be a mapping")
    out: dict[str, Any] = {}
    if "memory" in limits:
        out["mem_limit"] = str(limits["memory"])
    if "cpus" in limits:
        out["cpus"] = float(limits["cpus"])
    if "pids" in limits:
        out["pids_limit"] = int(limits["pids"])
    return out
