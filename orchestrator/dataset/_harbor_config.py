"""A Harbor task's ``task.toml``: read it, and map what toolfleet can honour (pure; table-tested).

Harbor's schema (``[metadata]``, ``[verifier]``, ``[agent]``, ``[environment]``, ``[solution]``) is read
leniently, as Harbor reads it: unknown keys do not fail the task. ``map_task_config`` turns it into
a ``HarborSettings``: the sandbox fields (CPUs, memory, the working directory, the agent's user, or a
prebuilt image), the network plan (``_harbor_network``), the agent, verifier and build timeouts (times the
run's ``TimeoutMultipliers``), the verifier's user, the ``${VAR}`` templates of the env tables (filled by
``_harbor_env`` when the task loads or runs), and one note per setting that does not map (a GPU, a
storage size, an unknown key), which the loader prints as one line.

Timeouts are Harbor's: the agent has none unless ``[agent] timeout_sec`` sets one, the verifier 600 s,
the build 600 s; a multiplier scales one phase (``--agent-timeout-multiplier``, ...) or, without its own,
all of them (``--timeout-multiplier``). Every timeout is bounded: a ``task.toml`` value must be a finite
number of seconds in (0, 86400] (``inf``, ``nan`` and ``1e308`` are refused in one line), a multiplier
a finite number in (0, 1000], and the product, like Harbor's "no limit", is capped at ``MAX_TIMEOUT_S``
(24 h, a sandbox's own lifetime).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator._errors import ToolfleetError

from ._harbor_network import NetworkConfigError, NetworkPlan, network_plan

__all__ = ["HarborSettings", "HarborTaskConfig", "TaskConfigError", "TimeoutMultipliers", "map_task_config",
           "parse_task_config"]

MAX_TIMEOUT_S = 24 * 3600.0  # every phase's bound (Harbor's "no limit" included): a sandbox's lifetime
MAX_MULTIPLIER = 1000.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 2048  # Harbor's default; toolfleet's own sandbox default is 1g

_Seconds = Field(None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)


class TaskConfigError(ToolfleetError, ValueError):
    """``task.toml`` cannot be read (syntax, or a value of the wrong type); the message says where."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Verifier(_Section):
    timeout_sec: float | None = _Seconds
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] | None = None
    environment_mode: str | None = None
    environment: dict[str, Any] | None = None
    collect: list[Any] = Field(default_factory=list)


class _Agent(_Section):
    timeout_sec: float | None = _Seconds
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] | None = None


class _Solution(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class _Environment(_Section):
    build_timeout_sec: float | None = _Seconds
    docker_image: str | None = None
    os: str | None = None
    cpus: float = Field(1, gt=0, le=1024, allow_inf_nan=False)
    memory_mb: int = Field(DEFAULT_MEMORY_MB, gt=0, le=16 * 1024 * 1024)
    memory: str | None = None  # deprecated spelling ("2G")
    storage_mb: int | None = None
    storage: str | None = None  # deprecated spelling
    gpus: int | None = None
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    allow_internet: bool | None = None  # deprecated: network_mode
    network_mode: str | None = None
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mcp_servers: list[Any] = Field(default_factory=list)
    skills_dir: str | None = None
    healthcheck: dict[str, Any] | None = None
    workdir: str | None = None


class HarborTaskConfig(BaseModel):
    """``task.toml`` as Harbor defines it (the keys toolfleet reads; others are kept in ``model_extra``)."""

    model_config = ConfigDict(extra="allow")

    version: str | None = None
    schema_version: str | None = None
    task: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    artifacts: list[Any] = Field(default_factory=list)
    verifier: _Verifier = Field(default_factory=_Verifier)
    agent: _Agent = Field(default_factory=_Agent)
    environment: _Environment = Field(default_factory=_Environment)
    solution: _Solution = Field(default_factory=_Solution)


class TimeoutMultipliers(BaseModel):
    """A run's timeout multipliers (Harbor's flags): ``timeout`` for every phase without its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: float = Field(1.0, gt=0, le=MAX_MULTIPLIER, allow_inf_nan=False)
    agent: float | None = Field(None, gt=0, le=MAX_MULTIPLIER, allow_inf_nan=False)
    verifier: float | None = Field(None, gt=0, le=MAX_MULTIPLIER, allow_inf_nan=False)
    build: float | None = Field(None, gt=0, le=MAX_MULTIPLIER, allow_inf_nan=False)

    def scale(self, phase: str, seconds: float | None) -> float:
        """``seconds`` (None: Harbor's "no limit") times this phase's multiplier, capped at ``MAX_TIMEOUT_S``."""
        if seconds is None:
            return MAX_TIMEOUT_S
        own = getattr(self, phase)
        scaled = seconds * (own if own is not None else self.timeout)
        return min(scaled, MAX_TIMEOUT_S) if math.isfinite(scaled) else MAX_TIMEOUT_S


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
        if where.endswith("timeout_sec"):
            raise TaskConfigError(f"task.toml: {where}: must be a finite number of seconds above 0 and at most "
                                  f"{MAX_TIMEOUT_S:g}, got {str(first.get('input'))[:40]}") from None
        raise TaskConfigError(f"task.toml: {where}: {first['msg']}") from None


@dataclass
class HarborSettings:
    """What a task's ``task.toml`` asks, in toolfleet's terms."""

    sandbox: dict[str, Any]  # DockerSandboxConfig fields (without the image and env, unless docker_image is given)
    agent_timeout: float
    verifier_timeout: float
    build_timeout: float
    verifier_user: str | None
    environment_env: dict[str, str]  # templates, filled at load (the container's environment)
    verifier_env: dict[str, str]  # templates, filled when the verifier runs
    solution_env: dict[str, str]  # templates, filled when the oracle runs
    docker_image: str | None
    network: NetworkPlan
    notes: list[str] = field(default_factory=list)  # settings that do not map (one phrase each)


def map_task_config(config: HarborTaskConfig, multipliers: TimeoutMultipliers | None = None) -> HarborSettings:
    """The toolfleet form of a parsed ``task.toml`` (pure)."""
    times = multipliers or TimeoutMultipliers()
    env, agent, verifier = config.environment, config.agent, config.verifier
    notes: list[str] = []
    try:
        plan = network_plan(env.model_dump(include={"network_mode", "allowed_hosts", "allow_internet"}),
                            agent.model_dump(include={"network_mode", "allowed_hosts"}),
                            verifier.model_dump(include={"network_mode", "allowed_hosts"}), env.model_fields_set)
    except NetworkConfigError as exc:
        raise TaskConfigError(f"task.toml: {exc}") from None

    memory_mb = _size_mb(env.memory) if env.memory is not None else env.memory_mb
    sandbox: dict[str, Any] = {"cpus": float(env.cpus), "mem_limit": f"{memory_mb}m"}
    if agent.user is not None:
        sandbox["user"] = str(agent.user)
    if env.workdir:
        sandbox["working_dir"] = env.workdir

    if env.os not in (None, "linux", "LINUX", "Linux"):
        notes.append(f"environment.os={str(env.os)[:20]!r} (sandboxes are Linux containers)")
    if env.gpus:
        notes.append(f"environment.gpus={env.gpus} (sandboxes get no GPUs)")
    if env.gpu_types:
        notes.append("environment.gpu_types (sandboxes get no GPUs)")
    if env.tpu:
        notes.append("environment.tpu (sandboxes get no TPUs)")
    if env.storage_mb is not None or env.storage is not None:
        notes.append("environment.storage_mb (writable space is the sandbox's disk_limit, a worker setting)")
    if env.mcp_servers:
        notes.append("environment.mcp_servers (not supported)")
    if env.skills_dir:
        notes.append("environment.skills_dir (not supported)")
    if env.healthcheck:
        notes.append("environment.healthcheck (the agent starts once the container runs)")
    if verifier.environment is not None or verifier.environment_mode not in (None, "shared"):
        notes.append("verifier.environment (the verifier runs in the agent's sandbox, Harbor's 'shared' mode)")
    if verifier.collect:
        notes.append("verifier.collect (not supported)")
    if config.artifacts:
        notes.append("artifacts (not collected; the verifier's /logs/verifier is kept in the log)")
    for where, model in (("", config), ("environment.", env), ("agent.", agent), ("verifier.", verifier),
                         ("solution.", config.solution)):
        for key in sorted(model.model_extra or {}):
            notes.append(f"{where}{key} (unknown key, ignored as Harbor ignores it)")

    return HarborSettings(
        sandbox=sandbox,
        agent_timeout=times.scale("agent", agent.timeout_sec),
        verifier_timeout=times.scale("verifier", verifier.timeout_sec or DEFAULT_VERIFIER_TIMEOUT_S),
        build_timeout=times.scale("build", env.build_timeout_sec or DEFAULT_BUILD_TIMEOUT_S),
        verifier_user=None if verifier.user is None else str(verifier.user),
        environment_env=dict(env.env),
        verifier_env=dict(verifier.env),
        solution_env=dict(config.solution.env),
        docker_image=env.docker_image,
        network=plan,
        notes=notes,
    )


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMG])B?\s*", re.IGNORECASE)


def _size_mb(value: str) -> int:
    """Harbor's deprecated size strings (``2G``, ``512M``) in MiB."""
    match = _SIZE.fullmatch(value)
    if match is None:
        raise TaskConfigError(f"task.toml: environment.memory: unreadable size {value[:40]!r} (e.g. 2G, 512M)")
    number, unit = float(match.group(1)), match.group(2).upper()
    mb = max(1, int(number * {"K": 1 / 1024, "M": 1, "G": 1024}[unit]))
    if mb > 16 * 1024 * 1024:
        raise TaskConfigError(f"task.toml: environment.memory: {value[:40]!r} is more than 16 TiB")
    return mb
