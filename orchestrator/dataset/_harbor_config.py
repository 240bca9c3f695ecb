"""A Harbor task's ``task.toml``: read it, and map what toolfleet can honour (pure; table-tested).

Harbor's schema (``[metadata]``, ``[verifier]``, ``[agent]``, ``[environment]``, ``[solution]``) is read
leniently, as Harbor reads it: unknown keys do not fail the task. ``map_task_config`` turns it into
a ``HarborSettings``: the sandbox fields (CPUs, memory, environment variables, the agent's user, or a
prebuilt image), the agent and verifier timeouts, the verifier's and the solution's user and
environment, and one note per setting that does not map (a GPU, a network, a storage size, an
unknown key), which the loader prints as one line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator._errors import ToolfleetError

__all__ = ["HarborSettings", "HarborTaskConfig", "TaskConfigError", "map_task_config", "parse_task_config"]

DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 2048  # Harbor's default; toolfleet's own sandbox default is 1g


class TaskConfigError(ToolfleetError, ValueError):
    """``task.toml`` cannot be read (syntax, or a value of the wrong type); the message says where."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Verifier(_Section):
    timeout_sec: float = Field(DEFAULT_VERIFIER_TIMEOUT_S, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class _Agent(_Section):
    timeout_sec: float | None = Field(None, gt=0)
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class _Solution(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class _Environment(_Section):
    build_timeout_sec: float = Field(DEFAULT_BUILD_TIMEOUT_S, gt=0)
    docker_image: str | None = None
    cpus: float = Field(1, gt=0)
    memory_mb: int = Field(DEFAULT_MEMORY_MB, gt=0)
    memory: str | None = None  # deprecated spelling ("2G")
    storage_mb: int | None = None
    storage: str | None = None  # deprecated spelling
    gpus: int = 0
    gpu_types: list[str] | None = None
    allow_internet: bool = True
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    mcp_servers: list[Any] = Field(default_factory=list)
    skills_dir: str | None = None
    healthcheck: dict[str, Any] | None = None


class HarborTaskConfig(BaseModel):
    """``task.toml`` as Harbor defines it (the keys toolfleet reads; others are kept in ``model_extra``)."""

    model_config = ConfigDict(extra="allow")

    version: str | None = None
    schema_version: str | None = None
    task: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    verifier: _Verifier = Field(default_factory=_Verifier)
    agent: _Agent = Field(default_factory=_Agent)
    environment: _Environment = Field(default_factory=_Environment)
    solution: _Solution = Field(default_factory=_Solution)


def parse_task_config(text: str) -> HarborTaskConfig:
    """Parse ``task.toml`` text (``TaskConfigError`` names the line or the key that is wrong)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskConfigError(f"task.toml is not valid TOML: {exc}") from None
    if "steps" in data:
        raise TaskConfigError("task.toml has [[steps]]: multi-step tasks are not supported")
    try:
        return HarborTaskConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise TaskConfigError(f"task.toml: {where}: {first['msg']}") from None


@dataclass
class HarborSettings:
    """What a task's ``task.toml`` asks, in toolfleet's terms."""

    sandbox: dict[str, Any]  # DockerSandboxConfig fields (without the image, unless docker_image is given)
    agent_timeout: float
    verifier_timeout: float
    build_timeout: float
    verifier_user: str | None
    verifier_env: dict[str, str]
    solution_env: dict[str, str]
    docker_image: str | None
    notes: list[str] = field(default_factory=list)  # settings that do not map (one phrase each)


_NO_NETWORK = "toolfleet sandboxes have no network"


def map_task_config(config: HarborTaskConfig) -> HarborSettings:
    """The toolfleet form of a parsed ``task.toml`` (pure)."""
    env, agent, verifier = config.environment, config.agent, config.verifier
    notes: list[str] = []
    explicit = env.model_fields_set

    memory_mb = _size_mb(env.memory) if env.memory is not None else env.memory_mb
    sandbox: dict[str, Any] = {"cpus": float(env.cpus), "mem_limit": f"{memory_mb}m"}
    if env.env:
        sandbox["environment"] = dict(env.env)
    if agent.user is not None:
        sandbox["user"] = str(agent.user)

    if env.gpus:
        notes.append(f"environment.gpus={env.gpus} (sandboxes get no GPUs)")
    if env.gpu_types:
        notes.append("environment.gpu_types (sandboxes get no GPUs)")
    if env.storage_mb is not None or env.storage is not None:
        notes.append("environment.storage_mb (writable space is the sandbox's disk_limit, a worker setting)")
    if "allow_internet" in explicit and env.allow_internet:
        notes.append(f"environment.allow_internet=true ({_NO_NETWORK})")
    for section, value in (("environment", env), ("agent", agent), ("verifier", verifier)):
        if value.network_mode not in (None, "no-network"):
            notes.append(f"{section}.network_mode={value.network_mode!r} ({_NO_NETWORK})")
        if value.allowed_hosts:
            notes.append(f"{section}.allowed_hosts ({_NO_NETWORK})")
    if env.mcp_servers:
        notes.append("environment.mcp_servers (not supported)")
    if env.skills_dir:
        notes.append("environment.skills_dir (not supported)")
    if env.healthcheck:
        notes.append("environment.healthcheck (the agent starts once the container runs)")
    for where, model in (("", config), ("environment.", env), ("agent.", agent), ("verifier.", verifier),
                         ("solution.", config.solution)):
        for key in sorted(model.model_extra or {}):
            notes.append(f"{where}{key} (unknown key, ignored as Harbor ignores it)")

    return HarborSettings(
        sandbox=sandbox,
        agent_timeout=agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S,
        verifier_timeout=verifier.timeout_sec,
        build_timeout=env.build_timeout_sec,
        verifier_user=None if verifier.user is None else str(verifier.user),
        verifier_env=dict(verifier.env),
        solution_env=dict(config.solution.env),
        docker_image=env.docker_image,
        notes=notes,
    )


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMG])B?\s*", re.IGNORECASE)


def _size_mb(value: str) -> int:
    """Harbor's deprecated size strings (``2G``, ``512M``) in MiB."""
    match = _SIZE.fullmatch(value)
    if match is None:
        raise TaskConfigError(f"task.toml: environment.memory: unreadable size {value!r} (e.g. 2G, 512M)")
    number, unit = float(match.group(1)), match.group(2).upper()
    return max(1, int(number * {"K": 1 / 1024, "M": 1, "G": 1024}[unit]))


_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve_env_templates(values: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """Harbor's ``${VAR}`` / ``${VAR:-default}`` in env values, from ``environ`` (unset, no default: '')."""
    return {key: _TEMPLATE.sub(lambda m: environ.get(m.group(1), m.group(2) or ""), value)
            for key, value in values.items()}
