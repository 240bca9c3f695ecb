"""Sandbox drivers: where tool calls run.

``local`` (temp dir + subprocesses, no isolation) and ``docker`` (hardened containers reached
through an in-container exec agent, pooled). Configure with a tagged config model::

    driver = build_driver(sandbox_config("docker"))
    env = await driver.create(SandboxRequest(eval_id="e1", sample_id="s1"))
    await env.exec(["bash", "-c", "echo hi"])
    await driver.destroy(env)
"""

from . import _registry as registry
from ._build import build_driver
from ._channel import ChannelClosed
from ._driver import (
    DEFAULT_IMAGE,
    DockerSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
    SandboxDriver,
    SandboxRequest,
    sandbox_config,
)
from ._environment import AgentSandboxEnvironment
from ._errors import (
    CommandOutOfMemoryError,
    ExecAgentLostError,
    SandboxCapacityError,
    SandboxImageError,
    SandboxOutOfMemoryError,
)

__all__ = [
    "DEFAULT_IMAGE",
    "AgentSandboxEnvironment",
    "ChannelClosed",
    "CommandOutOfMemoryError",
    "DockerSandboxConfig",
    "ExecAgentLostError",
    "LocalSandboxConfig",
    "SandboxCapacityError",
    "SandboxConfig",
    "SandboxDriver",
    "SandboxImageError",
    "SandboxOutOfMemoryError",
    "SandboxRequest",
    "build_driver",
    "registry",
    "sandbox_config",
]
