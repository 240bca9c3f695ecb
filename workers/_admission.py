"""What a worker agrees to run: its own configuration decides, a message only asks (pure; table-tested).

``AdmissionRules`` is built from ``toolfleet worker`` flags. ``admit_sandbox(rules, config)`` turns the
sandbox configuration a message asks for into the one this worker will build, or raises
``AdmissionRefused`` saying which field it refused:

* sandbox type: only those in ``sandbox_types`` (``docker`` by default; ``local`` — subprocesses on the
  worker host, no isolation — only when the worker was started with ``--allow-local``);
* image: must match one of ``images`` (shell-style patterns);
* every numeric field (memory, swap, CPUs, pids, captured output, pool size, lifetime, intervals):
  refused below a positive lower bound, clamped to the worker's caps above (``_bounds.LIMITS``);
* ``pull_policy``: a message may ask for any; it becomes ``never`` unless the image names a registry host
  (``image_registry``) among the worker's ``registries`` (``--registry``): a worker pulls from no other;
* ``network_mode``: ``none`` always; ``public`` and ``allowlist`` only where the worker allows them
  (``--allow-network``), the same for each of ``phase_network_modes`` (refused at open rather than
  mid-sample); ``allowed_hosts`` only narrows ``allowlist``, so a message sets it freely; a phase's new
  policy (``admit_network``) obeys the same rule;
* capabilities: with ``cap_drop`` unset a root sandbox keeps Docker's default set where the worker
  allows root (``--allow-root-user``); elsewhere admission writes ``cap_drop: ["ALL"]``, and an
  explicit list without ``ALL`` needs ``--allow-root-user`` too;
* never from a message: a Docker endpoint, added capabilities, dropped hardening (``security_opt``
  only ``no-new-privileges``), a root user (``root``, uid 0 or gid 0 however written: ``00``, ``+0``;
  ``_bounds.parse_user``) unless the worker allows root, a host directory (local ``root_dir``);
* any other field (one added to the sandbox config later, e.g. devices or mounts) must keep its
  default: default-deny, so a new knob is never silently widened by a message.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.util._image_names import image_registry, pulls_from  # re-exported: they moved to the shared layer
from orchestrator.util._network_policy import NetworkMode, parse_network

from ._bounds import LIMITS, SERVICE_LIMITS, AdmissionRefused, Bound, bounded, parse_bytes, parse_user, user_refusal

__all__ = ["AdmissionRefused", "AdmissionRules", "admit_network", "admit_sandbox", "admit_user", "broker_is_loopback",
           "image_registry", "network_refusal", "parse_bytes", "pulls_from"]

MiB = 1024 * 1024


class AdmissionRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sandbox_types: list[Literal["docker", "local"]] = Field(default_factory=lambda: ["docker"])  # type: ignore[arg-type]  # the lambda's list is inferred as list[str]
    images: list[str] = Field(default_factory=lambda: ["toolfleet/*"], description="shell patterns of allowed images")
    network_modes: list[str] = Field(default_factory=lambda: ["none"], description="network modes a sandbox may "
                                     "ask for (--allow-network; 'public' brings 'allowlist', which is narrower)")
    max_memory: str = Field("4g", description="cap on a sandbox's mem_limit (and memswap_limit)")
    max_cpus: float = Field(default_factory=lambda: float(os.cpu_count() or 1), gt=0,
                            description="default: this host's CPUs")
    max_pids: int = Field(4096, gt=0)
    max_output_cap: int = Field(10 * MiB, gt=0, description="cap on bytes a sandbox command may capture per stream")
    max_pool_size: int = Field(8, ge=0)
    max_sandboxes: int = Field(256, gt=0, description="cap on a docker driver's containers on this host")
    max_ttl: float = Field(24 * 3600.0, gt=0)
    local_root: str | None = Field(None,
                                   description="parent directory of local sandboxes (the worker's choice, never a "
                                               "message's)")
    allow_runsc: bool = Field(True, description="a message may ask for the gVisor runtime (stronger isolation)")
    max_outcome_bytes: int = Field(512 * 1024, gt=0, description="a call's result is cut to this size at the worker "
                                   "before it is cached or stored (the model sees far less: 16 KiB by default)")
    registries: list[str] = Field(default_factory=list, description="registries (HOST[:PORT]) this worker pulls "
                                  "sandbox images from (--registry); an image naming any other, or none, is never "
                                  "pulled")
    allow_root: bool = Field(False, description="a message may ask for uid/gid 0 (--allow-root-user; never by default)")


# Fields a message may set freely (they only narrow, or only affect the sandbox's own inside).
# Numeric fields are bounded by ``_bounds.LIMITS`` (all of them, defaults included) before this.
_FREE = {"type", "image", "working_dir", "environment", "init", "read_only", "fast_path", "default_service",
         "allowed_hosts"}


def _refuse(field: str, why: str) -> AdmissionRefused:
    return AdmissionRefused(f"This worker refuses sandbox field '{field}': {why}.")


def admit_sandbox(rules: AdmissionRules, config: dict[str, Any]) -> dict[str, Any]:
    """The sandbox config this worker will build for a message's ``config`` (or ``AdmissionRefused``)."""
    from orchestrator.util._sandbox_parse import sandbox_config

    if not isinstance(config, dict):
        raise AdmissionRefused("The sandbox config must be a JSON object.")
    kind = config.get("type", "local")
    if kind not in rules.sandbox_types:
        allowed = ", ".join(rules.sandbox_types) or "none"
        raise _refuse("type", f"{kind!r} sandboxes are not enabled here (allowed: {allowed})")
    try:
        parsed = sandbox_config(config)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"][1:] or e["loc"]) for e in exc.errors()})
        raise AdmissionRefused(f"This worker refuses the sandbox config (fields: {', '.join(fields)}): "
                            f"{exc.errors()[0]['msg']}.") from None
    defaults = type(parsed)().model_dump()
    asked = parsed.model_dump()
    admitted = dict(asked)
    for field, value in asked.items():
        if field in LIMITS:
            admitted[field] = _bounded(rules, field, value, LIMITS[field])
        elif field in _FREE or value == defaults.get(field):
            continue
        else:
            admitted[field] = _admit_field(rules, field, value, defaults.get(field))
    if kind == "docker":
        if admitted.get("cap_drop") is None and not rules.allow_root:
            admitted["cap_drop"] = ["ALL"]  # root without its capabilities, as before --allow-root-user
        image = admitted.get("image", "")
        if not _own_snapshot(admitted) and not any(fnmatch.fnmatchcase(image, pattern) for pattern in rules.images):
            raise _refuse("image",
                          f"{image!r} matches none of this worker's image patterns ({', '.join(rules.images)})")
        if not pulls_from(rules.registries, image):
            admitted["pull_policy"] = "never"  # not a registry this worker pulls from: the image is there or not
        swap = admitted.get("memswap_limit")
        if swap is not None and parse_bytes(swap) < parse_bytes(admitted["mem_limit"]):
            raise _refuse("memswap_limit", f"{swap!r} is below mem_limit {admitted['mem_limit']!r}")
    if kind == "local":
        admitted["root_dir"] = rules.local_root
    return admitted


def _own_snapshot(config: dict[str, Any]) -> bool:
    """A sandbox opened from a snapshot runs the snapshot's image, whatever the --image patterns: this host
    made it from a sandbox it admitted (the driver refuses a snapshot the host does not hold)."""
    snapshot = config.get("snapshot")
    if not snapshot:
        return False
    return bool(config.get("image") == f"toolfleet/snapshot:{snapshot['id']}")


def _bounded(rules: AdmissionRules, field: str, value: Any, bound: Bound) -> Any:
    admitted, why = bounded(rules, field, value, bound)
    if why is not None:
        raise _refuse(field, why)
    return admitted


def admit_user(rules: AdmissionRules, field: str, user: Any) -> None:
    """Refuse a user a message asks for (a sandbox's, a service's, or a command's) by the same rule."""
    why = user_refusal(str(user), rules.allow_root)
    if why is not None:
        raise _refuse(field, why)


def _admit_field(rules: AdmissionRules, field: str, value: Any, default: Any) -> Any:
    """A non-default field value: clamped, kept, or refused."""
    match field:
        case "user":
            admit_user(rules, field, value)
            return value
        case "network_mode":
            why = network_refusal(rules, value)
            if why is not None:
                raise _refuse(field, why)
            return value
        case "phase_network_modes":
            for mode in value:
                why = network_refusal(rules, mode)
                if why is not None:
                    raise _refuse(field, why)
            return value
        case "cap_drop":
            if "ALL" not in [str(c).upper() for c in value] and not rules.allow_root:
                raise _refuse(field, "a sandbox must drop ALL capabilities unless the worker allows root "
                                     "(--allow-root-user)")
            return value
        case "security_opt":
            if "no-new-privileges" not in value or any(opt != "no-new-privileges" for opt in value):
                raise _refuse(field, "only 'no-new-privileges' may be given")
            return value
        case "runtime" if rules.allow_runsc and value == "runsc":
            return value
        case "pull_policy":
            return value  # narrowed to 'never' with the image check unless the worker pulls from its registry
        case "direct_channel":
            return value if value is False else default  # a message may only pick the slower, narrower path
        case "services":
            return {name: _admit_service(rules, name, service) for name, service in value.items()}
        case "snapshot":
            return value  # the driver opens only a snapshot this host holds, on its own image
    raise _refuse(field, f"it can only be set in the worker's own configuration (asked: {value!r})")


def network_refusal(rules: AdmissionRules, mode: str) -> str | None:
    """Why this worker refuses a sandbox network ``mode`` (None: admitted). Pure."""
    if mode in rules.network_modes or mode == "none":
        return None
    return (f"network mode {mode!r} is not allowed here (allowed: {', '.join(rules.network_modes)}; "
            f"start the worker with --allow-network {mode})")


def admit_network(rules: AdmissionRules, mode: Any, allowed_hosts: Any) -> tuple[NetworkMode, list[str]]:
    """A live sandbox's new network policy as a message asks it (a phase's): ``(mode, hosts)``
    normalised, or ``AdmissionRefused`` by the same rules as ``network_mode`` at open."""
    try:
        mode, hosts = parse_network(mode, allowed_hosts)
    except ValueError as exc:
        raise AdmissionRefused(f"This worker refuses the sandbox network: {exc}.") from None
    why = network_refusal(rules, mode)
    if why is not None:
        raise _refuse("network_mode", why)
    return mode, hosts


def _admit_service(rules: AdmissionRules, name: str, service: dict[str, Any]) -> dict[str, Any]:
    """A multi-service sandbox's service: its image, user and limits obey the same rules as the sandbox's.

    Its network policy and hardening are the sandbox's own (one policy for all its containers), so only
    these fields are a service's to ask for."""
    image = service.get("image", "")
    if not any(fnmatch.fnmatchcase(image, pattern) for pattern in rules.images):
        raise _refuse(f"services.{name}.image",
                      f"{image!r} matches none of this worker's image patterns ({', '.join(rules.images)})")
    user = service.get("user")
    admitted = dict(service)
    if user is not None:
        admit_user(rules, f"services.{name}.user", user)
        parsed = parse_user(user)
        if isinstance(parsed.user, int) and parsed.group is None:
            admitted["user"] = f"{parsed.user}:{parsed.user}"  # a uid the image does not list would get gid 0
    for field, bound in SERVICE_LIMITS.items():
        admitted[field] = _bounded(rules, f"services.{name}.{field}", service[field], bound)
    return admitted


def broker_is_loopback(url: str) -> bool:
    """Whether only this machine can put messages on the broker: a unix socket or a loopback address.

    ``--allow-local`` (message-chosen commands on the worker host, no isolation) is for a worker whose
    broker nobody else can reach; a broker on the network needs ``--allow-local-remote`` as well.
    """
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme in ("unix", "redis+socket"):
        return True
    host = (parts.hostname or "").strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere
