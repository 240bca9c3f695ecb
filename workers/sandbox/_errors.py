"""Sandbox errors raised by the drivers (all translated from backend errors with ``raise ... from``).

    SandboxUnavailableError (orchestrator.util)   the sandbox or its host is gone -> ``sandbox_unavailable``
    ├── SandboxOutOfMemoryError                    the kernel OOM-killed the command or the container
    └── SandboxCapacityError                       the per-host sandbox cap was reached (create timed out)
    SandboxImageError                              the image is missing and cannot be pulled (see docker._pull)
    ToolError (orchestrator.tool)                  model-visible; the sandbox is fine and the sample goes on
    ├── CommandOutOfMemoryError                    the OOM killer killed the command (message names the limit)
    └── ExecAgentLostError                         a command killed the exec agent; it was restarted
"""

from __future__ import annotations

from orchestrator._errors import ToolfleetError
from orchestrator.tool._errors import ToolError
from orchestrator.util._sandbox import SandboxUnavailableError


class SandboxOutOfMemoryError(SandboxUnavailableError):
    """The sandbox ran out of memory (OOM kill); the message says so."""


class CommandOutOfMemoryError(ToolError):
    """The command ran into the sandbox's memory limit and was OOM-killed; the sandbox is still running."""


class ExecAgentLostError(ToolError):
    """A command killed the exec agent (it runs as the same user); the agent was restarted."""


class SandboxCapacityError(SandboxUnavailableError):
    """No sandbox capacity on this host within the acquire timeout."""


class SandboxImageError(ToolfleetError, RuntimeError):
    """The sandbox image is not present and could not be obtained."""


# The images `toolfleet setup images` (sandbox_images/build.sh) builds; anything else is the user's own.
BUILT_IMAGES = ("toolfleet/sandbox:latest", "toolfleet/debian-base:bookworm", "toolfleet/sandbox-rootfs:bookworm")


def missing_image_message(image: str) -> str:
    """What to run when an image is missing: ours are built by a command, a user's image is the user's to build."""
    if image in BUILT_IMAGES:
        return f"Sandbox image '{image}' not found: build it with `toolfleet setup images` (no registry needed)"
    return (f"Sandbox image '{image}' not found on this Docker host: build it there (`docker build -t {image} ...`) "
            "or load it (`docker load`); only an image named with its registry host (HOST[:PORT]/name:tag) is pulled")
