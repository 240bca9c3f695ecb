"""Utilities shared by tools and agents (mirrors ``inspect_ai.util``)."""

from ._gc import tune_gc_for_many_samples
from ._limit import LimitExceededError, TerminateSampleError
from ._limits import (
    Limit,
    LimitScope,
    active_limits,
    apply_limits,
    check_limits,
    check_message_limit,
    message_limit,
    record_turn,
    record_waiting_time,
    time_limit,
    token_limit,
    turn_limit,
    working_limit,
)
from ._sandbox import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxTimeoutError,
    SandboxUnavailableError,
    bind_sandbox,
    sandbox,
)
from ._sandbox_limits import SandboxEnvironmentLimits, override_max_read_file_size

__all__ = [
    "ExecResult",
    "Limit",
    "LimitScope",
    "LimitExceededError",
    "OutputLimitExceededError",
    "SandboxEnvironment",
    "SandboxEnvironmentLimits",
    "SandboxTimeoutError",
    "SandboxUnavailableError",
    "TerminateSampleError",
    "active_limits",
    "apply_limits",
    "check_limits",
    "check_message_limit",
    "message_limit",
    "override_max_read_file_size",
    "record_turn",
    "record_waiting_time",
    "time_limit",
    "token_limit",
    "turn_limit",
    "working_limit",
    "bind_sandbox",
    "sandbox",
    "tune_gc_for_many_samples",
]
