"""The wire contract between the orchestrator and whoever executes a call (in-process or a worker).

Plain JSON models, versioned: no pickles, no class paths. Errors that reach the model travel as a
``ToolCallError`` (closed set of kinds + message); errors fatal to the sample travel as a
``FatalError`` envelope and are re-raised by the orchestrator as ``ToolExecutionFatal``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from orchestrator._errors import ToolfleetError
from orchestrator.tool._content import ContentImage, ContentText
from orchestrator.tool._registry import TimeoutBehavior, ToolRef
from orchestrator.tool._tool_call import ToolCallError
from orchestrator.util._sandbox_recorder import SandboxExec as SandboxExec  # defined with its recorder; in CallOutcome

WIRE_VERSION = 1

WireResult = str | int | float | bool | ContentText | ContentImage | list[ContentText | ContentImage | str] | None


class CallRequest(BaseModel):
    """One tool call to execute: the unit of work sent to a worker."""

    v: int = WIRE_VERSION
    call_id: str  # unique per call; also the Celery task id, so redelivery is detectable
    function: str  # the name the model called
    tool: ToolRef | None  # how the executing side rebuilds the tool (None: in-process only)
    arguments: dict[str, Any] = Field(default_factory=dict)  # validated and approved JSON arguments
    sample_id: str | None = None
    sandbox: str | None = None  # sandbox handle on the executing host
    timeout: float | None = None
    timeout_behavior: TimeoutBehavior = "error_as_result"
    max_result_bytes: int = 16 * 1024 * 1024  # payload cap on the way back


class SandboxSpec(BaseModel):
    """Ask the executing side to create a sample's sandbox."""

    v: int = WIRE_VERSION
    eval_id: str | None = None
    sample_id: str | None = None
    config: dict[str, Any] = Field(default_factory=lambda: {"type": "local"})  # a SandboxConfig, as JSON
    files: dict[str, str] = Field(default_factory=dict)  # path in the sandbox -> contents
    setup: str | None = None  # a shell script run once after the files are written


class FatalError(BaseModel):
    """An exception that is fatal to the sample, as data."""

    type: str
    message: str
    traceback: str | None = None


class CallOutcome(BaseModel):
    v: int = WIRE_VERSION
    call_id: str
    result: WireResult = None  # untruncated (the orchestrator truncates; reviewers see this)
    error: ToolCallError | None = None
    fatal: FatalError | None = None
    started: float = 0.0
    completed: float = 0.0
    host: str | None = None  # which host executed it
    replayed: bool = False  # a redelivered call answered from the executing side's memory
    sandbox_execs: list[SandboxExec] = Field(default_factory=list)  # in order; spliced into the transcript
    sandbox_execs_dropped: int = 0  # execs past the per-call bound (counted, not sent)
    # In-process only: the original exception behind ``fatal`` (never serialised, never on the wire).
    exception: Any = Field(default=None, exclude=True, repr=False)


class ToolExecutionFatal(ToolfleetError):
    """Raised by the orchestrator when an executed call failed in a way fatal to the sample."""

    def __init__(self, fatal: FatalError, function: str) -> None:
        super().__init__(f"Tool '{function}' raised {fatal.type}: {fatal.message}")
        self.fatal = fatal
        self.function = function
