"""Sandbox configs: the one sandbox spec a task or sample names, as tagged pydantic models.

``SandboxConfig`` is a discriminated union on ``type``: the spec a task (``Task(sandbox=...)``) and a
sample (``Sample(sandbox=...)``, overriding the task's) both take; every field is documented
(``description``) and unknown fields are refused. The models depend on nothing else: the
orchestrator parses them (``_sandbox_parse.sandbox_config``), a worker re-checks them against its
admission rules, and each backend's driver (``workers.sandbox``: ``local.py``, ``docker.py``) is
built from one. What one sandbox holds (``containers``, ``images``) is computed here only.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._network_policy import NetworkMode, normalise_hosts

__all__ = ["DEFAULT_IMAGE", "DEFAULT_OUTPUT_CAP", "DockerSandboxConfig", "HealthCheck", "LocalSandboxConfig",
           "SandboxConfig", "ServiceConfig", "SnapshotRef"]

DEFAULT_IMAGE = "toolfleet/sandbox:latest"
DEFAULT_OUTPUT_CAP = 1024 * 1024  # bytes kept per stream per command (head and tail; the middle is dropped)


class _BaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_cap: int = Field(DEFAULT_OUTPUT_CAP, gt=0, description="bytes kept per stream per command: the first "
                            "and last halves; the middle is dropped as it arrives (a marker says how much)")
    warm_spares: int = Field(2, ge=0, le=16, description="pre-started python tool processes per user; 0: off")



class LocalSandboxConfig(_BaseConfig):
    """A private temp dir and subprocesses on this host. NO isolation: for trying things out."""

    type: Literal["local"] = Field("local", description="the tag: subprocesses in a temp dir on the executing host")
    root_dir: str | None = Field(None, description="parent of the per-sample temp dirs (default: system temp)")

    @property
    def containers(self) -> int:
        """Host slots one sandbox takes."""
        return 1

    @property
    def images(self) -> list[str]:
        return []


class HealthCheck(BaseModel):
    """When a service counts as up: ``test`` exits 0 (run inside the service, as Docker healthchecks run)."""

    model_config = ConfigDict(extra="forbid")

    test: list[str] | str = Field(description="argv, or a string run by /bin/sh -c")
    interval: float = Field(1.0, gt=0, le=60, description="seconds between checks")
    timeout: float = Field(5.0, gt=0, le=300, description="seconds one check may take")
    retries: int = Field(30, ge=1, le=1000, description="failed checks (after start_period) before the sandbox fails")
    start_period: float = Field(0.0, ge=0, le=600, description="seconds during which failures do not count")

    def budget(self) -> float:
        """The longest a service may take to become healthy."""
        return self.start_period + self.retries * (self.interval + self.timeout) + self.interval


class ServiceConfig(BaseModel):
    """One more container of a multi-service sandbox (a database, a target server, ...)."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="its image (a worker runs only images matching its --image patterns)")
    command: list[str] | str | None = Field(None, description="its command; None: the image's CMD")
    entrypoint: list[str] | None = Field(None, description="its entrypoint; None: the image's ENTRYPOINT")
    environment: dict[str, str] = Field(default_factory=dict, description="environment variables")
    user: str | None = Field(None, description="user it runs as; None: the image's USER")
    working_dir: str | None = Field(None, description="working directory; None: the image's WORKDIR")
    healthcheck: HealthCheck | None = Field(None, description="None: up once its container is running")
    mem_limit: str = Field("512m", description="memory limit (no swap beyond it)")
    cpus: float = Field(0.5, gt=0, description="CPU limit")
    pids_limit: int = Field(256, gt=0, description="processes at once")


class SnapshotRef(BaseModel):
    """The snapshot a sandbox is opened from: its id, and the worker host holding it (placement)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    host: str | None = None
    forks: int = Field(1, ge=1, le=256, description="how many sandboxes the fork() this open belongs to opens "
                       "together (so a host that can never hold them all says so at once)")


class DockerSandboxConfig(_BaseConfig):
    """One hardened container per sample, reached through an in-container exec agent."""

    type: Literal["docker"] = Field("docker", description="the tag: one hardened container per sample")
    image: str = Field(DEFAULT_IMAGE, description="the container image (a worker runs only images matching its "
                       "--image patterns, toolfleet/* by default)")
    user: str | None = Field(None, description="container user; None keeps the image's USER (non-root in ours)")
    working_dir: str | None = Field(None, description="where commands (and setup) run; None: the image's WORKDIR")
    environment: dict[str, str] = Field(default_factory=dict, description="environment variables of the container")
    # Hardening (all on by default, all configurable per task).
    network_mode: NetworkMode = Field("none", description="what the sandbox reaches (docs/egress.md): 'none' (only "
                                      "its own services), 'public' (the internet, never the host, the broker, other "
                                      "sandboxes or private ranges), 'allowlist' (only allowed_hosts); enforced by "
                                      "the host; a worker allows public/allowlist only with --allow-network")
    allowed_hosts: list[str] = Field(default_factory=list, description="with network_mode 'allowlist': host names, "
                                     "'*.example.org' (any name below it), IP addresses or networks")
    phase_network_modes: list[NetworkMode] = Field(
        default_factory=list, description="modes the sandbox's policy may change to while it lives (a Harbor "
        "task's [agent]/[verifier] network_mode, through the dispatcher's set_sandbox_network): with any, it gets "
        "a network of its own even in mode 'none' with one container, a worker admits each at open as it admits "
        "network_mode, and preflight needs a worker that enforces each")
    cap_drop: list[str] | None = Field(None, description="capabilities dropped; None: ALL, except for a sandbox "
                                       "whose user is root where root is allowed (a worker with --allow-root-user, "
                                       "or embedded mode): Docker's default set, as Docker gives root")
    cap_add: list[str] = Field(default_factory=list, description="capabilities added back (embedded mode only)")
    security_opt: list[str] = Field(default_factory=lambda: ["no-new-privileges"],
                                    description="docker security options")
    pids_limit: int = Field(512, description="processes at once in the container")
    mem_limit: str = Field("1g", description="memory limit (docker notation: 512m, 2g)")
    memswap_limit: str | None = Field(None, description="None: same as mem_limit (no swap)")
    cpus: float = Field(1.0, description="CPU limit (fractions allowed)")
    init: bool = Field(True, description="an init process reaps zombies in the container")
    read_only: bool = Field(False, description="read-only root filesystem")
    disk_limit: str | None = Field("1g", description="writable space per sandbox: the container layer's size "
                                   "(storage_opt) where the storage driver enforces it, else a size-capped tmpfs on "
                                   "each writable path (see writable_paths); None: no cap")
    writable_paths: list[str] | None = Field(None, description="paths given a capped tmpfs when the storage driver "
                                             "cannot cap the layer; None: /tmp, /var/tmp, /run/lock and the image's "
                                             "working directory (its contents are copied in)")
    runtime: str | None = Field(None, description="OCI runtime, e.g. 'runsc' (gVisor) for stronger isolation")
    pull_policy: Literal["missing", "always", "never"] = Field(
        "missing", description="when the image is pulled from its registry: 'missing' (only when absent), 'always' "
        "(before each sandbox), 'never'; a worker pulls only from the registries it is started with (--registry)")
    # Several containers per sample (a pod): tools target this one; the others are sandbox("name").
    services: dict[str, ServiceConfig] = Field(
        default_factory=dict, description="more containers of the sample (name -> service), as compose runs them: "
        "each with its own network namespace on a network private to the sandbox, reaching the others by service "
        "name, under the sandbox's network_mode; created, health-checked and removed together on one host, each "
        "counted against its capacity; never pooled")
    default_service: str = Field("default", description="the name sandbox(name) gives this (the default) container")
    snapshot: SnapshotRef | None = Field(None, description="open from this snapshot (its image is the snapshot's; "
                                         "set by Snapshot.sandbox_config()): placed on the host holding it")
    # Lifecycle.
    pool_size: int | None = Field(None, ge=0, description="warm spares kept for this config; None: 2 for the "
                                  "images the host pools (the default sandbox image unless the worker says "
                                  "otherwise), 0 for any other image; always within the host's spares budget")
    max_sandboxes: int = Field(64, gt=0, description="per-host cap on the containers this process holds "
                               "(samples and spares of every image together); a worker's --slots also caps it")
    acquire_timeout: float = Field(120.0, gt=0, description="how long create() waits for capacity")
    ttl: float = Field(24 * 3600.0, gt=0, description="seconds until a container's expiry label passes")
    reap_interval: float = Field(60.0, gt=0, description="seconds between sweeps for expired or orphaned containers")
    fast_path: bool = Field(True, description="use the in-sandbox agent where the image has python3")
    direct_channel: bool = Field(True, description="talk to the agent over a unix socket this process listens on "
                                 "(bind-mounted read-only into the container) when the Engine is local; else over the "
                                 "exec stream")
    api_threads: int = Field(8, gt=0, description="bounded threads for blocking Docker SDK calls")
    docker_host: str | None = Field(None, description="Engine API URL; None: from the environment")

    @field_validator("services")
    @classmethod
    def _service_names(cls, services: dict[str, ServiceConfig]) -> dict[str, ServiceConfig]:
        for name in services:
            if not _SERVICE_NAME.fullmatch(name):
                raise ValueError(f"service name {name!r} is not a hostname (letters, digits, '-'; at most 63)")
        return services

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_parse(cls, hosts: list[str]) -> list[str]:
        return normalise_hosts(hosts)

    @field_validator("phase_network_modes")
    @classmethod
    def _phases_once(cls, modes: list[NetworkMode]) -> list[NetworkMode]:
        return list(dict.fromkeys(modes))

    @model_validator(mode="after")
    def _pod_rules(self) -> DockerSandboxConfig:
        if self.services and self.default_service in self.services:
            raise ValueError(f"service {self.default_service!r} is the default container's name: rename it")
        if self.allowed_hosts and self.network_mode != "allowlist":
            raise ValueError(f"allowed_hosts is for network_mode 'allowlist' (this sandbox's is {self.network_mode!r})")
        return self

    @property
    def needs_network(self) -> bool:
        """Whether the sandbox gets a Docker network of its own (and the host's rules on it): a way out,
        several containers, or a policy that may change. A lone container in mode 'none' has no network."""
        return self.network_mode != "none" or bool(self.services) or bool(self.phase_network_modes)

    @property
    def enforced_modes(self) -> list[NetworkMode]:
        """The modes its host must enforce, initial one first ([]: none needs rules). A 'none' sandbox
        whose services are its only reason for a network needs none: where the host cannot enforce,
        its services share one loopback namespace instead."""
        if self.network_mode == "none" and not self.phase_network_modes:
            return []
        return list(dict.fromkeys([self.network_mode, *self.phase_network_modes]))

    @property
    def containers(self) -> int:
        """Containers one sandbox of this config holds (host slots taken together): 1 + its services."""
        return 1 + len(self.services)

    @property
    def images(self) -> list[str]:
        """Every image the sandbox runs, the default container's first, each once."""
        return list(dict.fromkeys([self.image, *(s.image for s in self.services.values())]))

    def limits_key(self) -> str:
        """Containers are interchangeable (poolable) when these fields match."""
        return self.model_dump_json(include=_POOL_KEY_FIELDS)


_SERVICE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")

_POOL_KEY_FIELDS = {
    "image", "user", "working_dir", "environment", "network_mode", "cap_drop", "cap_add", "security_opt",
    "allowed_hosts", "phase_network_modes", "pids_limit", "mem_limit", "memswap_limit", "cpus", "init", "read_only",
    "disk_limit", "writable_paths", "runtime",
}

SandboxConfig = Annotated[LocalSandboxConfig | DockerSandboxConfig, Field(discriminator="type")]
