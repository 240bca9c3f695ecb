"""Utilities shared by tools and agents (mirrors ``inspect_ai.util``), and toolfleet's exception roots."""

from orchestrator._errors import ControlFlowSignal, SetupError, ToolfleetError

from ._fork import fork
from ._gc import GcTuning, tune_gc_for_many_samples
from ._limit_errors import LimitExceededError, TerminateSampleError
from ._limited_messages import MessageList
from ._limits import (
    Limit,
    LimitScope,
    SampleLimits,
    active_limits,
    apply_limits,
    check_limits,
    check_message_limit,
    message_limit,
    record_turn,
    record_waiting_time,
    sample_limits,
    suspend_token_limit,
    suspend_turn_limit,
    suspend_working_limit,
    time_limit,
    token_limit,
    turn_limit,
    working_limit,
)
from ._sandbox import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxLostError,
    SandboxTimeoutError,
    SandboxUnavailableError,
    bind_sandbox,
    sandbox,
)
from ._sandbox_limits import SandboxEnvironmentLimits, override_max_read_file_size
from ._snapshot import Snapshot, SnapshotError
from ._subtask import subtask
from ._token_metering import TokenLimit

__all__ = [
    "ControlFlowSignal",
    "ExecResult",
    "Limit",
    "LimitScope",
    "LimitExceededError",
    "MessageList",
    "OutputLimitExceededError",
    "SandboxEnvironment",
    "SampleLimits",
    "SandboxEnvironmentLimits",
    "SandboxLostError",
    "SandboxTimeoutError",
    "Snapshot",
    "SnapshotError",
    "SandboxUnavailableError",
    "SetupError",
    "TerminateSampleError",
    "ToolfleetError",
    "TokenLimit",
    "active_limits",
    "apply_limits",
    "check_limits",
    "check_message_limit",
    "fork",
    "message_limit",
    "override_max_read_file_size",
    "record_turn",
    "record_waiting_time",
    "sample_limits",
    "subtask",
    "suspend_token_limit",
    "suspend_turn_limit",
    "suspend_working_limit",
    "time_limit",
    "token_limit",
    "turn_limit",
    "working_limit",
    "bind_sandbox",
    "sandbox",
    "GcTuning",
    "tune_gc_for_many_samples",
]
