"""In-process dispatcher: each call is an asyncio task running the executor in this process.

This is embedded mode: the worker without the queue. Calls inherit the caller's context, so a
sandbox bound by the sample runner is the current sandbox inside the tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import ValidationError

from orchestrator._wire import CallOutcome, SandboxSpec
from orchestrator.util._network_policy import parse_network
from orchestrator.util._sandbox import SandboxEnvironment, SandboxUnavailableError
from workers.executor import HOST, execute_call

from ._dispatcher import Dispatch, Dispatcher, SampleRoute, attach_setup_execs
from ._preflight import SandboxNeeds, check_local_images, check_local_networks

if TYPE_CHECKING:
    from workers.sandbox_host import SandboxHost


class InProcessDispatcher(Dispatcher):
    """``host``: the sandboxes it opens and runs calls in (default: the one this process's embedded
    dispatchers share, so docker pools outlive one eval); ``owns_host``: it closes that host with itself
    (an eval's own host, e.g. for ``--egress-allow``)."""

    name = "inprocess"
    sandboxes_here = True
    _default: ClassVar[InProcessDispatcher | None] = None

    def __init__(self, host: SandboxHost | None = None, owns_host: bool = False) -> None:
        self._host = host
        self._owns_host = owns_host and host is not None  # closed with this dispatcher (its sandboxes, networks)

    @property
    def host(self) -> SandboxHost:
        if self._host is None:
            # Loaded on first use: an eval without sandboxes never loads the sandbox side.
            from workers.sandbox_host import SandboxHost

            self._host = SandboxHost.process()
        return self._host

    @classmethod
    def with_egress_allowances(cls, allow: Sequence[str]) -> InProcessDispatcher:
        """Embedded mode with ``--egress-allow``: a sandbox host of its own (capacity, spares) whose egress
        enforcer also lets sandboxes with a network reach ``allow``; closed with the dispatcher.
        ``ValueError`` (one line) for an allowance that is neither a network nor a host, or never reachable."""
        from workers.egress import EgressConfig, EgressEnforcer
        from workers.sandbox.docker import DockerAPI, HostSandboxes
        from workers.sandbox_host import SandboxHost

        try:
            config = EgressConfig(allow=tuple(allow))
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        enforcer = EgressEnforcer(config, DockerAPI(None, 4))
        return cls(SandboxHost(HostSandboxes(egress=enforcer)), owns_host=True)

    @classmethod
    def default(cls) -> InProcessDispatcher:
        if cls._default is None:
            cls._default = cls()
        return cls._default

    def dispatch(self, stage: Sequence[Dispatch]) -> list[asyncio.Future[CallOutcome]]:
        return [asyncio.ensure_future(self._run(item)) for item in stage]

    async def run_one(self, item: Dispatch) -> CallOutcome:
        return await self._run(item)  # inline: no task needed for a single call

    async def _run(self, item: Dispatch) -> CallOutcome:
        request = item.request
        if request.sandbox is None:
            # The caller's context already carries the sample's sandbox (if any).
            return await execute_call(request, tool=item.tool, bind=False)
        if item.local:
            # A conversation tool (submit, handoff, runs_on="orchestrator") always runs here, even when
            # the sample's sandbox lives on a worker host: it then runs without the sandbox.
            try:
                env = self.host.lookup(request.sandbox)
            except SandboxUnavailableError:
                env = None
            return await execute_call(request, tool=item.tool, env=env)
        return await self.host.execute(request, tool=item.tool)

    async def open_sandbox(self, spec: SandboxSpec) -> SampleRoute:
        try:
            handle, execs = await self.host.open(spec)
        except Exception as exc:
            recorded = getattr(exc, "sandbox_execs", None)
            if recorded is not None:
                attach_setup_execs(exc, recorded.items, recorded.dropped, HOST)
            raise
        return SampleRoute(sample_id=spec.sample_id, sandbox=handle, host=HOST, setup_execs=tuple(execs.items),
                           setup_execs_dropped=execs.dropped)

    async def preflight(self, needs: SandboxNeeds) -> None:
        await check_local_images(needs.images, needs.pullable)
        if needs.networks:
            await check_local_networks(self.host.docker.egress, needs.networks)

    def local_sandbox(self, route: SampleRoute) -> SandboxEnvironment | None:
        try:
            return self.host.lookup(str(route.sandbox)) if route.sandbox is not None else None
        except SandboxUnavailableError:
            return None

    async def remove_snapshots(self, eval_id: str) -> list[str]:
        from workers.snapshots import remove_eval_snapshots  # deferred: only an eval that may have taken some

        return await remove_eval_snapshots(eval_id)

    async def drain_spares(self) -> int:
        if self._host is None:
            return 0  # it opened no sandbox: no spares of its own
        return await self._host.drain()

    async def aclose(self) -> None:
        if self._owns_host and self._host is not None:
            await self._host.close_all()
            if self._host.docker.has_egress:
                await self._host.docker.egress.aclose()

    async def close_sandbox(self, route: SampleRoute) -> None:
        if route.sandbox is not None:
            await self.host.close(route.sandbox)

    async def set_sandbox_network(self, route: SampleRoute, network_mode: str,
                                  allowed_hosts: Sequence[str] = ()) -> None:
        # Embedded mode is the operator's own: every mode its host enforces, no admission beyond the form.
        from workers.egress import EgressPolicy

        if route.sandbox is None:
            raise SandboxUnavailableError("This sample has no sandbox whose network could change.")
        try:
            mode, hosts = parse_network(network_mode, list(allowed_hosts))
        except ValueError as exc:
            raise SandboxUnavailableError(f"The sandbox network cannot change: {exc}.") from None
        await self.host.set_network(route.sandbox, EgressPolicy(mode=mode, allowed_hosts=tuple(hosts)))
