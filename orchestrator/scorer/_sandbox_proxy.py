"""``sandbox()`` for orchestrator-side code (scorers, solvers) when the sandbox lives elsewhere.

In distributed mode the sample's sandbox is on a worker host, so the sample runner binds this proxy as the
sample's ``sandbox()``: each ``exec`` / ``read_file`` / ``write_file`` becomes a call to an internal tool
(``orchestrator/tool/_tools/_sandbox_access.py``) through the active dispatcher, and errors come back as the exceptions
the ``SandboxEnvironment`` contract names. (Embedded mode binds the real environment instead.)
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from orchestrator._errors import ToolfleetError
from orchestrator._wire import CallOutcome, CallRequest
from orchestrator.tool._registry import tool_ref
from orchestrator.util._sandbox import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxTimeoutError,
    SandboxUnavailableError,
)
from orchestrator.util._snapshot import Snapshot, SnapshotError


class SandboxCallError(ToolfleetError, RuntimeError):
    """An internal sandbox call (a scorer's command, a proxied exec, file read or write) could not be run, in a
    way the ``SandboxEnvironment`` contract has no exception for (not: the command ran and failed)."""


async def call_sandbox_tool(name: str, arguments: dict[str, Any], route: Any = None) -> CallOutcome:
    """Run internal tool ``name`` next to a sandbox (``route``'s; default: the current sample's), through the
    active dispatcher."""
    from orchestrator.dispatch import Dispatch, active_dispatcher, current_route
    from orchestrator.tool._tools import _sandbox_access as scoring

    route = route or current_route()
    if route.sandbox is None:
        raise SandboxCallError("This sample has no sandbox: give the task a sandbox (e.g. sandbox='local').")
    factory = {scoring.SCORER_EXEC_TOOL: scoring.scorer_exec, scoring.SANDBOX_FILE_TOOL: scoring.sandbox_file,
               scoring.SANDBOX_SNAPSHOT_TOOL: scoring.sandbox_snapshot}[name]
    instance = factory()
    request = CallRequest(call_id=uuid.uuid4().hex, function=name, tool=tool_ref(instance),
                          arguments=arguments, sample_id=route.sample_id, sandbox=route.sandbox)
    [future] = active_dispatcher().dispatch([Dispatch(request, instance)])
    outcome = await future
    from orchestrator.log._sandbox_events import exec_phase, record_outcome_execs

    record_outcome_execs(outcome, phase=exec_phase())  # the worker's records of what it ran
    if outcome.fatal is not None:
        if outcome.fatal.type == "SnapshotError":
            raise SnapshotError(outcome.fatal.message)
        raise SandboxCallError(f"{name} failed: {outcome.fatal.type}: {outcome.fatal.message}")
    return outcome


def _raise_for(outcome: CallOutcome, file: str | None = None) -> None:
    error = outcome.error
    if error is None:
        return
    match error.type:
        case "file_not_found":
            raise FileNotFoundError(2, "No such file or directory", file)
        case "permission":
            raise PermissionError(13, "Permission denied", file)
        case "is_a_directory":
            raise IsADirectoryError(21, "Is a directory", file)
        case "unicode_decode":
            raise UnicodeDecodeError("utf-8", b"", 0, 1, error.message)
        case "limit":
            raise OutputLimitExceededError(error.message.rsplit(" of ", 1)[-1].rstrip("."))
        case "timeout":
            raise SandboxTimeoutError(error.message)
        case "sandbox_unavailable":
            raise SandboxUnavailableError(error.message)
    raise SandboxCallError(f"({error.type}) {error.message}")


class DispatchedSandbox(SandboxEnvironment):
    """The current sample's sandbox, reached through the dispatcher (wherever it lives)."""

    records_execs_remotely = True  # its execs are recorded where they run (not again by an executor here)

    def __init__(self, service: str | None = None, route: Any = None) -> None:
        self.service = service  # a multi-service sandbox's container (None: the default one)
        self.route = route  # a fork's own route (None: the current sample's)

    async def snapshot(self, keep: bool = False) -> Snapshot:
        from orchestrator.dispatch import current_route
        from orchestrator.tool._tools._sandbox_access import SANDBOX_SNAPSHOT_TOOL

        if self.service is not None:
            raise SnapshotError(f"Only a sandbox's default container can be snapshotted, not service '{self.service}'.")
        route = self.route or current_route()
        outcome = await call_sandbox_tool(SANDBOX_SNAPSHOT_TOOL, {"keep": keep}, route)
        _raise_for(outcome)
        snap = Snapshot.model_validate_json(str(outcome.result))
        return snap.model_copy(update={"host": route.host or snap.host, "queue": route.queue})

    def _target(self) -> dict[str, Any]:
        return {"service": self.service} if self.service is not None else {}

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None,
                   timeout: float | None = None) -> ExecResult:
        if isinstance(input, bytes):
            input = input.decode("utf-8")
        outcome = await call_sandbox_tool("_scorer_exec", {"cmd": list(cmd), "input": input, "timeout": timeout,
                                                           "cwd": cwd, "env": env, "user": user,
                                                           **self._target()}, self.route)
        _raise_for(outcome)
        data = json.loads(str(outcome.result))
        if data.get("timed_out"):
            raise SandboxTimeoutError(stdout=data["stdout"], stderr=data["stderr"])
        return ExecResult(returncode=data["returncode"], stdout=data["stdout"], stderr=data["stderr"])

    async def read_file(self, file: str, text: bool = True) -> Any:
        outcome = await call_sandbox_tool("_sandbox_file", {"op": "read", "file": file, "text": text,
                                                            **self._target()}, self.route)
        _raise_for(outcome, file)
        value = str(outcome.result or "")
        return value if text else base64.b64decode(value)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        text = isinstance(contents, str)
        payload = contents if isinstance(contents, str) else base64.b64encode(contents).decode("ascii")
        outcome = await call_sandbox_tool("_sandbox_file", {"op": "write", "file": file, "contents": payload,
                                                            "text": text, **self._target()}, self.route)
        _raise_for(outcome, file)
