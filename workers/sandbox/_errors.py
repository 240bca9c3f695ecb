"""Sandbox errors raised by the drivers (all translated from backend errors with ``raise ... from``).

    SandboxUnavailableError (orchestrator.util)   the sandbox or its host is gone -> ``sandbox_unavailable``
    ├── SandboxOutOfMemoryError                    the kernel OOM-killed the command or the container
    └── SandboxCapacityError                       the per-host sandbox cap was reached (create timed out)
    SandboxImageError                              the image is missing and cannot be pulled (no registry)
"""

from __future__ import annotations

from orchestrator.util._sandbox import SandboxUnavailableError


class SandboxOutOfMemoryError(SandboxUnavailableError):
    """The sandbox ran out of memory (OOM kill); the message says so."""


class SandboxCapacityError(SandboxUnavailableError):
    """No sandbox capacity on this host within the acquire timeout."""


class SandboxImageError(RuntimeError):
    """The sandbox image is not present and could not be obtained."""
