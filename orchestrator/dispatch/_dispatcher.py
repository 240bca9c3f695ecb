"""The dispatcher seam: how a planned stage of calls reaches whoever executes them.

``execute_tools`` plans stages and hands each to the active ``Dispatcher``. Implementations:
``InProcessDispatcher`` (asyncio tasks in this process; the embedded default) and
``CeleryDispatcher`` (a Celery group per parallel stage, a single task per serial call).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator._wire import CallOutcome, CallRequest, SandboxExec, SandboxSpec
from orchestrator.util._sandbox import SandboxEnvironment

from ._preflight import SandboxNeeds


@dataclass
class Dispatch:
    """One call of a stage: the wire request, plus the live tool for in-process execution."""

    request: CallRequest
    tool: Callable[..., Any]
    local: bool = False  # must run in this process (submit, handoff, runs_on="orchestrator", no registry ref)


class Dispatcher(ABC):
    """Starts a stage's calls; each future resolves to the call's outcome, in any order.

    Cancelling a future must stop the call (kill its process group in the sandbox) as far as the
    backend allows.
    """

    name: str = "dispatcher"
    # Set when the fleet refuses this dispatcher's messages (wrong secret, clock skew): one line naming
    # the cause. The eval stops with it rather than waiting out every call's deadline.
    fleet_error: str | None = None

    @abstractmethod
    def dispatch(self, stage: Sequence[Dispatch]) -> list[asyncio.Future[CallOutcome]]:
        """Start every call of ``stage`` concurrently and return one future per call, in order."""

    async def run_one(self, item: Dispatch) -> CallOutcome:
        """Execute a single call and wait for it (a one-call stage); cancelling the caller stops it."""
        [future] = self.dispatch([item])
        try:
            return await future
        finally:
            future.cancel()  # no-op once done; stops the call if the caller was cancelled

    @abstractmethod
    async def open_sandbox(self, spec: SandboxSpec) -> SampleRoute:
        """Create the sample's sandbox where its calls will run; return the route to it."""

    @abstractmethod
    async def close_sandbox(self, route: SampleRoute) -> None:
        """Destroy the sample's sandbox (idempotent; never raises for an already-gone sandbox)."""

    @abstractmethod
    async def set_sandbox_network(self, route: SampleRoute, network_mode: str,
                                  allowed_hosts: Sequence[str] = ()) -> None:
        """Change the network policy of the sample's live sandbox, all its containers at once:
        ``network_mode`` ``none`` | ``public`` | ``allowlist`` (with ``allowed_hosts``), as a sandbox
        config names it (docs/egress.md); e.g. a Harbor task's ``[agent]`` / ``[verifier]`` phase. Where
        the sandbox lives decides, as for ``network_mode`` at open: a worker admits the mode only with
        ``--allow-network`` and its host enforces it. A connection the old policy allowed is judged by
        the new one from its next packet on. The sandbox must have a network of its own (opened with
        ``phase_network_modes``, services, or a mode other than ``none``). Refused or impossible:
        ``SandboxUnavailableError`` (one sentence), and the previous policy stays."""

    async def remove_snapshots(self, eval_id: str) -> list[str]:
        """Remove ``eval_id``'s snapshots (those not kept) where they are; returns their ids."""
        return []

    # Whether its sandboxes open in this process, on this machine's Docker: they end with the process
    # (nothing to journal for a later resume to close) and that Docker must answer.
    sandboxes_here: bool = False

    async def preflight(self, needs: SandboxNeeds) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Check, before an eval's first sample, that the sandboxes ``needs`` describes can open where this
        dispatcher runs them (``PreflightError``: one sentence)."""

    def local_sandbox(self, route: SampleRoute) -> SandboxEnvironment | None:
        """The sample's sandbox itself when it lives in this process (bound directly for scorers and
        solvers); None: reach it through internal tool calls."""
        return None

    async def drain_spares(self) -> int:
        """Remove the idle warm spares this dispatcher's sandboxes keep in this process (an eval's end);
        how many went."""
        return 0

    async def aclose(self) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Release connections and listeners."""


@dataclass(frozen=True)
class SampleRoute:
    """Where the running sample's calls go: its id and its sandbox handle on the executing host.

    ``sandbox=None`` means "the sandbox bound in this context" (embedded mode).
    """

    sample_id: str | None = None
    sandbox: str | None = None
    queue: str | None = None  # the worker host's own queue (sandbox affinity)
    # What opening it ran (files written, setup), recorded where it ran, for the sample's transcript.
    host: str | None = field(default=None, compare=False)
    setup_execs: tuple[SandboxExec, ...] = field(default=(), compare=False, repr=False)
    setup_execs_dropped: int = field(default=0, compare=False, repr=False)


def attach_setup_execs(exc: BaseException, execs: Any, dropped: int, host: str | None) -> None:
    """A failed open carries the execs it ran (a failing setup's output) on its exception."""
    try:
        exc.sandbox_execs = list(execs or ())  # type: ignore[attr-defined]  # carried on any exception
        exc.sandbox_execs_dropped = dropped  # type: ignore[attr-defined]  # carried on any exception
        exc.sandbox_host = host  # type: ignore[attr-defined]  # carried on any exception
    except AttributeError:  # an exception type that refuses attributes: nothing to carry
        pass
