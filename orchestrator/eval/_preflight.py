"""Preflight: what would make every sample fail, found once before the first one starts.

``toolfleet eval`` (and ``eval_async(preflight=True)``, the default) checks, in order:

- each sandbox spec (the task's and every sample's) parses: a dict without ``"type"``, an unknown
  field or a bad value is one line naming the sample;
- each distinct docker image exists: on this machine (embedded mode), or on at least one live worker
  (distributed mode; workers list their images in their heartbeat) — or can be pulled: the sandbox's
  ``pull_policy`` is not ``never`` and the image names a registry host that a live worker pulls from
  (``--registry``; embedded mode: any);
- distributed mode: the broker has live workers; if sandboxes are needed, one of them accepts them,
  runs their type (``local`` needs ``--allow-local``), allows each image (``--image`` patterns) and
  has slots for the largest multi-service sandbox (one per container);
- the model endpoint answers (openai provider: one ``models.list`` with a short timeout; scripted
  models are not probed).

Each problem is a ``PreflightError`` (an ``EvalSetupError``: the CLI prints one line, exit 1).
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Collection, Sequence
from typing import Any

from pydantic import ValidationError

from ._errors import EvalSetupError

PROBE_TIMEOUT_S = 5.0


class PreflightError(EvalSetupError):
    """A problem found before the eval started (no sample ran)."""


def describe_sandbox_error(spec: Any, exc: Exception) -> str:
    """One line saying what is wrong with a sandbox spec."""
    if isinstance(spec, dict) and "type" not in spec:
        return f"sandbox {spec!r} has no \"type\" (e.g. {{\"type\": \"docker\", \"image\": \"...\"}} or \"local\")"
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ())[1:]) or ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        return f"invalid sandbox {spec!r}: {'; '.join(parts)}"
    return f"invalid sandbox {spec!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


class SandboxNeeds:
    """What the samples' sandboxes need, from one parse of each distinct spec (``sandbox_needs``)."""

    def __init__(self) -> None:
        self.images: dict[str, list[str]] = {}  # docker image (services' too) -> the samples that need it
        self.kinds: set[str] = set()  # sandbox types used
        self.pullable: set[str] = set()  # images some sandbox may pull (pull_policy not never, a registry host)
        self.pods: dict[int, list[str]] = {}  # containers of a multi-service sandbox -> its samples


def sandbox_needs(task_sandbox: Any, samples: Sequence[Any], base_dir: Any = None) -> SandboxNeeds:
    """Validate every sandbox the samples will open (a spec that does not parse is one line naming the
    sample) and say what they need. ``base_dir``: where compose files are found."""
    from workers._policy import image_registry
    from orchestrator.util._sandbox_parse import sandbox_config

    needs = SandboxNeeds()
    parsed: dict[str, Any] = {}
    for sample in samples:
        spec = sample.sandbox if sample.sandbox is not None else task_sandbox
        if spec is None:
            continue
        key = repr(spec)
        if key not in parsed:
            try:
                parsed[key] = config = sandbox_config(spec, base_dir)
            except (ValidationError, ValueError, TypeError) as exc:
                where = f"Sample {sample.id!r}: " if sample.sandbox is not None else "Task: "
                raise PreflightError(where + describe_sandbox_error(spec, exc)) from None
            if config.type == "docker" and config.pull_policy != "never":
                needs.pullable.update(image for image in (config.image, *(s.image for s in config.services.values()))
                                      if image_registry(image))
        config = parsed[key]
        needs.kinds.add(config.type)
        if config.type == "docker":
            for image in dict.fromkeys([config.image, *(s.image for s in config.services.values())]):
                needs.images.setdefault(image, []).append(str(sample.id))
            if config.services:
                needs.pods.setdefault(1 + len(config.services), []).append(str(sample.id))
    return needs


def _who(samples: list[str]) -> str:
    shown = ", ".join(samples[:3]) + (f" and {len(samples) - 3} more" if len(samples) > 3 else "")
    return f"sample{'s' if len(samples) > 1 else ''} {shown}"


async def check_local_images(images: dict[str, list[str]], pullable: Collection[str] = ()) -> None:
    """Embedded mode: every image is on this machine's Docker, or ``pullable`` (from any registry)."""
    if not images:
        return

    def missing() -> list[str]:
        import docker
        from docker.errors import ImageNotFound

        client = docker.from_env(timeout=int(PROBE_TIMEOUT_S))
        try:
            gone = []
            for image in images:
                try:
                    client.api.inspect_image(image)
                except ImageNotFound:
                    gone.append(image)
            return gone
        finally:
            client.close()

    try:
        gone = await asyncio.wait_for(asyncio.to_thread(missing), PROBE_TIMEOUT_S * (len(images) + 1))
        gone = [image for image in gone if image not in pullable]  # pulled by its driver when needed
    except Exception as exc:  # noqa: BLE001 - docker raises many kinds; all mean "not reachable"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PreflightError(f"Cannot reach the Docker daemon (needed for docker sandboxes): {reason}") from None
    if gone:
        image = gone[0]
        more = f" (and {len(gone) - 1} more image(s))" if len(gone) > 1 else ""
        raise PreflightError(f"Docker image '{image}' ({_who(images[image])}) is not on this machine{more}: "
                             f"build it or `docker pull {image}`.")


async def check_fleet(broker_url: str, images: dict[str, list[str]], kinds: set[str],
                      pullable: Collection[str] = (), pods: dict[int, list[str]] | None = None) -> None:
    """Distributed mode: live workers exist, accept sandboxes if needed, and have (or can pull) every image."""
    from redis.asyncio import Redis

    from workers._policy import image_registry, pulls_from
    from workers.placement import live_hosts

    from ._setup import redact

    client = Redis.from_url(broker_url, socket_connect_timeout=PROBE_TIMEOUT_S, socket_timeout=PROBE_TIMEOUT_S)
    try:
        hosts = await asyncio.wait_for(live_hosts(client), PROBE_TIMEOUT_S * 2)
    finally:
        await client.aclose()
    if not hosts:
        raise PreflightError(f"No live worker on the broker {redact(broker_url)}: start one with "
                             f"`toolfleet worker --broker {redact(broker_url)}`.")
    if not kinds:
        return
    takers = [h for h in hosts if not h.draining and h.slots > 0]
    if not takers:
        raise PreflightError(f"None of the {len(hosts)} live worker(s) accepts sandboxes (all draining or --slots 0).")
    for kind in sorted(kinds):
        if all(h.sandbox_types and kind not in h.sandbox_types for h in takers):
            hint = " (start a worker with --allow-local)" if kind == "local" else ""
            raise PreflightError(f"None of the {len(takers)} live worker(s) runs {kind!r} sandboxes{hint}.")
    largest = max(h.slots for h in takers)
    for containers, who in sorted((pods or {}).items(), reverse=True)[:1]:
        if containers > largest:
            raise PreflightError(f"The sandbox of {_who(who)} has {containers} containers and takes {containers} slots "
                                 f"on one worker, but no live worker has that many (largest --slots: {largest}).")
    for image, who in images.items():
        if all(h.image_patterns and not any(fnmatch.fnmatchcase(image, p) for p in h.image_patterns) for h in takers):
            patterns = ", ".join(sorted({p for h in takers for p in h.image_patterns}))
            raise PreflightError(f"Docker image '{image}' ({_who(who)}) is allowed by none of the {len(takers)} live "
                                 f"worker(s) (their --image patterns: {patterns}): start workers with "
                                 f"--image '{image}' or a pattern matching it.")
        if not any(image in h.images or (image in pullable and pulls_from(h.registries, image)) for h in takers):
            registry = image_registry(image)
            hint = (f", and none pulls from its registry '{registry}' (start one with --registry {registry})"
                    if registry and image in pullable else "")
            raise PreflightError(f"Docker image '{image}' ({_who(who)}) is on none of the {len(takers)} live "
                                 f"worker(s){hint}: build or pull it where the workers run.")


def _openai_api(model: Any) -> Any | None:
    from orchestrator.model._providers.openai import OpenAIAPI

    api = getattr(model, "api", None)
    for _ in range(8):  # unwrap retry-reporting and other wrappers
        if isinstance(api, OpenAIAPI):
            return api
        api = getattr(api, "inner", None)
        if api is None:
            return None
    return None


async def probe_model(model: Any) -> None:
    """One cheap request to the model's endpoint (openai provider only)."""
    try:
        api = _openai_api(model)
    except ImportError:
        return
    if api is None:
        return
    import openai

    client = openai.AsyncOpenAI(api_key=api.api_key, base_url=api.base_url, max_retries=0, timeout=PROBE_TIMEOUT_S)
    where = api.base_url or "https://api.openai.com/v1"
    try:
        await asyncio.wait_for(client.models.list(), PROBE_TIMEOUT_S + 1)
    except openai.AuthenticationError as exc:
        raise PreflightError(f"The model endpoint {where} refused the API key ({exc.status_code}).") from None
    except openai.APIStatusError:
        return  # it answered (some servers do not list models): reachable
    except (openai.APIConnectionError, TimeoutError) as exc:
        reason = "no answer" if isinstance(exc, (TimeoutError, openai.APITimeoutError)) else "connection failed"
        raise PreflightError(f"The model endpoint {where} does not answer ({reason} within "
                             f"{PROBE_TIMEOUT_S:g} s): check base_url / OPENAI_BASE_URL.") from None
    finally:
        await client.close()


async def preflight(task_sandbox: Any, samples: Sequence[Any], *, embedded: bool, broker_url: str | None,
                    base_dir: Any = None) -> None:
    """Sandbox specs, images and workers for one task's samples (the model is probed once per eval)."""
    needs = sandbox_needs(task_sandbox, samples, base_dir)
    if embedded:
        await check_local_images(needs.images, needs.pullable)
    elif broker_url:
        await check_fleet(broker_url, needs.images, needs.kinds, needs.pullable, needs.pods)


__all__ = ["PreflightError", "preflight", "probe_model"]
