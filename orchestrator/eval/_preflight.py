"""Preflight: what would make every sample fail, found once before the first one starts.

``toolfleet eval`` (and ``eval_async(preflight=True)``, the default) checks, in order:

- each sandbox spec (the task's and every sample's) parses: a dict without ``"type"``, an unknown
  field or a bad value is one line naming the sample;
- each distinct docker image exists: on this machine (embedded mode), or on at least one live worker
  (distributed mode; workers list their images in their heartbeat) — or can be pulled: the sandbox's
  ``pull_policy`` is not ``never`` and the image names a registry host that a live worker pulls from
  (``--registry``; embedded mode: any);
- distributed mode: every tool the task's solver runs on workers (``runs_on="worker"``, found by
  ``_task_tools.worker_tools``) is registered on every live worker (workers publish their registry at
  start); a tool on none, or on only some, is one line naming it and the ``--import`` that provides it;
- distributed mode: the broker has live workers; if sandboxes are needed, one of them accepts them,
  runs their type (``local`` needs ``--allow-local``), allows each image (``--image`` patterns),
  offers each network mode a sandbox asks for (``--allow-network``, on a host that enforces it; embedded
  mode: this machine enforces it) and has slots for the largest multi-service sandbox (one per container);
  a task whose own code runs commands as root (``Task.runs_as_root``: Harbor tasks) needs every worker
  that takes sandboxes to allow it (``--allow-root-user``);
- the model endpoint answers (openai and anthropic providers: one ``models.list`` with a short
  timeout; scripted models are not probed).

Each problem is a ``PreflightError`` (a ``SetupError``: the CLI prints one line, exit 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator.dispatch import Dispatcher
from orchestrator.dispatch._preflight import (
    PROBE_TIMEOUT_S,
    PreflightError,
    SandboxNeeds,
    check_fleet,
    check_local_images,
)

from ._sandboxes import SandboxConfigs
from ._task_tools import import_hint, worker_tools


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


def sandbox_needs(task_sandbox: Any, samples: Sequence[Any], base_dir: Any = None,
                  configs: SandboxConfigs | None = None) -> SandboxNeeds:
    """Validate every sandbox the samples will open (a spec that does not parse is one line naming the
    sample) and say what they need. ``configs``: the task's parsed specs (parsed here if not yet);
    ``base_dir``: where compose files are found, without them."""
    from orchestrator.util._image_names import image_registry

    configs = configs or SandboxConfigs(None, base_dir)
    needs = SandboxNeeds()
    parsed: dict[str, Any] = {}
    for sample in samples:
        spec = sample.sandbox if sample.sandbox is not None else task_sandbox
        if spec is None:
            continue
        key = repr(spec)
        if key not in parsed:
            try:
                parsed[key] = config = configs.parse(spec)
            except (ValidationError, ValueError, TypeError) as exc:
                where = f"Sample {sample.id!r}: " if sample.sandbox is not None else "Task: "
                raise PreflightError(where + describe_sandbox_error(spec, exc)) from None
            if config.type == "docker" and config.pull_policy != "never":
                needs.pullable.update(image for image in config.images if image_registry(image))
        config = parsed[key]
        needs.kinds.add(config.type)
        # A snapshot's image is on the host holding it (whose heartbeat may not list it yet): the driver
        # there checks it; only its services' images are the fleet's to have.
        for image in config.images:
            if getattr(config, "snapshot", None) is None or image != config.image:
                needs.images.setdefault(image, []).append(str(sample.id))
        if config.containers > 1:
            needs.pods.setdefault(config.containers, []).append(str(sample.id))
        for mode in getattr(config, "enforced_modes", ()):
            needs.networks.setdefault(mode, []).append(str(sample.id))
    return needs


def _provider_api(model: Any) -> Any | None:
    api = getattr(model, "api", None)
    for _ in range(8):  # unwrap retry-reporting and other wrappers
        inner = getattr(api, "inner", None)
        if inner is None:
            return api
        api = inner
    return api


def _sdk_for(api: Any) -> tuple[Any, Any, str, str] | None:
    """``(sdk module, client class, default endpoint, env var)`` for the SDK-backed providers."""
    from orchestrator.model._providers.openai import OpenAIAPI

    if isinstance(api, OpenAIAPI):
        import openai

        return openai, openai.AsyncOpenAI, "https://api.openai.com/v1", "OPENAI_BASE_URL"
    from orchestrator.model._providers.anthropic import AnthropicAPI

    if isinstance(api, AnthropicAPI):
        import anthropic

        return anthropic, anthropic.AsyncAnthropic, "https://api.anthropic.com", "ANTHROPIC_BASE_URL"
    return None


async def probe_model(model: Any) -> None:
    """One cheap request (``models.list``) to the model's endpoint (openai and anthropic providers)."""
    api = _provider_api(model)
    try:
        found = _sdk_for(api)
    except ImportError:
        return
    if found is None or api is None:
        return
    sdk, client_class, default_url, env = found
    client = client_class(api_key=api.api_key, base_url=api.base_url, max_retries=0, timeout=PROBE_TIMEOUT_S)
    where = api.base_url or default_url
    try:
        await asyncio.wait_for(client.models.list(), PROBE_TIMEOUT_S + 1)
    except sdk.AuthenticationError as exc:
        raise PreflightError(f"The model endpoint {where} refused the API key ({exc.status_code}).") from None
    except sdk.APIStatusError:
        return  # it answered (some servers do not list models): reachable
    except (sdk.APIConnectionError, TimeoutError) as exc:
        reason = "no answer" if isinstance(exc, (TimeoutError, sdk.APITimeoutError)) else "connection failed"
        raise PreflightError(f"The model endpoint {where} does not answer ({reason} within "
                             f"{PROBE_TIMEOUT_S:g} s): check base_url / {env}.") from None
    finally:
        await client.close()


async def preflight(task_sandbox: Any, samples: Sequence[Any], *, dispatcher: Dispatcher | None = None,
                    embedded: bool = False, broker_url: str | None = None, base_dir: Any = None,
                    configs: SandboxConfigs | None = None, solver: Any = None, runs_as_root: bool = False) -> None:
    """Sandbox specs, then what the dispatcher needs for them (images, workers, the ``solver``'s worker
    tools, root when the task's own code runs commands as root) for one task's samples (the model is probed
    once per eval). Without a dispatcher: this machine's Docker (``embedded``) or the fleet on ``broker_url``."""
    needs = sandbox_needs(task_sandbox, samples, base_dir, configs)
    if runs_as_root and needs.kinds:
        needs.root = [str(s.id) for s in samples]
    if solver is not None:
        needs.tools = {name: import_hint(module) for name, module in worker_tools(solver).items()}
    if dispatcher is not None:
        await dispatcher.preflight(needs)
    elif embedded:
        await check_local_images(needs.images, needs.pullable)
    elif broker_url:
        await check_fleet(broker_url, needs.images, needs.kinds, needs.pullable, needs.pods, needs.tools,
                          needs.networks, root=needs.root)


__all__ = ["PreflightError", "preflight", "probe_model"]
