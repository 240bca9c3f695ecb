"""Utilities shared by tools and agents (mirrors ``inspect_ai.util``)."""

from ._limit import LimitExceededError, TerminateSampleError
from ._sandbox import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxTimeoutError,
    SandboxUnavailableError,
    bind_sandbox,
    sandbox,
)

__all__ = [
    "ExecResult",
    "LimitExceededError",
    "OutputLimitExceededError",
    "SandboxEnvironment",
    "SandboxTimeoutError",
    "SandboxUnavailableError",
    "TerminateSampleError",
    "bind_sandbox",
    "sandbox",
]
