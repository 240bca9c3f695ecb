"""Splice the sandbox execs that came back with a call (or a sandbox's setup) into the transcript.

Execs are recorded where the sandbox is (``orchestrator.util._sandbox_recorder``) and travel in the call's
outcome; here each becomes a ``SandboxEvent`` in the running sample's transcript, in order, in the
current span (a tool's execs land in its tool span, just before its ``ToolEvent``).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, Literal

from orchestrator._wire import SandboxExec

from ._events import InfoEvent, SandboxEvent
from ._transcript import transcript

Phase = Literal["tool", "setup", "scorer", "solver"]

# What orchestrator-side sandbox use is for (the runner sets "scorer" while scoring).
_phase: ContextVar[Phase] = ContextVar("toolfleet_exec_phase", default="solver")


def exec_phase() -> Phase:
    return _phase.get()


def set_exec_phase(phase: Phase) -> Any:
    return _phase.set(phase)


def reset_exec_phase(token: Any) -> None:
    _phase.reset(token)


def sandbox_event(rec: SandboxExec, host: str | None, phase: Phase, call_id: str | None = None) -> SandboxEvent:
    return SandboxEvent(timestamp=rec.started or 0.0, action=rec.action, cmd=rec.cmd, file=rec.file, input=rec.input,
                        result=rec.result, output=rec.output, truncated=rec.truncated, error=rec.error,
                        duration=rec.duration, host=host, phase=phase, call_id=call_id, service=rec.service)


def record_sandbox_execs(execs: Iterable[SandboxExec], host: str | None, phase: Phase, dropped: int = 0,
                         call_id: str | None = None) -> None:
    """Record each exec as a ``SandboxEvent`` (and one ``info`` line for any the host left out)."""
    t = transcript()
    for rec in execs:
        t.record(sandbox_event(rec, host, phase, call_id))
    if dropped:
        t.record(InfoEvent(source="sandbox", data=f"{dropped} more sandbox exec(s) on {host} not recorded "
                                                  "(per-call bound)."))


def record_outcome_execs(outcome: Any, call_id: str | None = None, phase: Phase = "tool") -> None:
    """The execs a ``CallOutcome`` carries (no-op when it has none)."""
    execs = getattr(outcome, "sandbox_execs", None)
    if execs:
        record_sandbox_execs(execs, outcome.host, phase, outcome.sandbox_execs_dropped, call_id)
