"""Build a sandbox driver from its config: the backend module is imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from orchestrator.util._sandbox_config import DockerSandboxConfig, LocalSandboxConfig

from ._driver import SandboxDriver

__all__ = ["build_driver", "driver_class"]

# config tag -> (sibling module, class): the docker SDK is imported only when a docker sandbox is asked for.
_BACKENDS = {"local": (".local", "LocalSandboxDriver"), "docker": (".docker", "DockerSandboxDriver")}


def driver_class(config: LocalSandboxConfig | DockerSandboxConfig) -> Callable[..., SandboxDriver]:
    """The driver class for ``config``: each takes its own config (and keyword options)."""
    module, name = _BACKENDS[config.type]
    cls: Callable[..., SandboxDriver] = getattr(importlib.import_module(module, __package__), name)
    return cls


def build_driver(config: LocalSandboxConfig | DockerSandboxConfig, **kwargs: Any) -> SandboxDriver:
    """The backend for ``config`` (one per distinct config: it owns pools and reapers)."""
    return driver_class(config)(config, **kwargs)
