"""Celery dispatcher: the same seam as the in-process one, with Redis and a worker fleet in between.

* A stage is published as one signed ``toolfleet.stage`` Celery task per destination queue, carrying
  that queue's calls (a sample's stage goes to the one host holding its sandbox, so usually one task);
  a stage spanning several queues is a Celery ``group`` of those tasks (one member per host, not one
  per call). They stay real Celery tasks — ``celery inspect``
  and Flower see them — and the task id is the first call's id. Publishing runs in one dedicated
  thread (``_publisher``: kombu's producer blocks), so the event loop never waits on the broker.
* Outcomes come back on this dispatcher's own reply channel, subscribed once by the
  ``ResultListener`` (``workers.fleet.ReplySender``): a worker publishes each call's signed outcome as soon as it
  completes; it is verified, then resolves the call's future. Nothing is polled, and nothing is
  subscribed, unsubscribed or deleted per call (stored copies expire). The declared-order splice stays
  in the orchestrator. Sandbox opens/closes still use Celery's result store (pubsub on its channels).
* Sandbox affinity: ``open_sandbox`` reserves a slot on a live host (``workers.fleet.Placer``; a burst of
  opens is mostly served from slots reserved ahead, ``placement_leases``) and sends the open task to
  that host's queue; every call of the sample goes to the same queue.
* Failure bounds, enforced here whatever the worker does: a per-call deadline (the tool's timeout,
  or ``max_call_seconds``, plus ``call_grace``) → ``timeout``; a host whose heartbeat expired (or that
  restarted: new boot id) → its pending calls resolve to ``sandbox_unavailable`` within
  ``heartbeat TTL + lost_grace + watch_interval`` (≈16 s by default); after a Redis restart, stored
  outcomes are re-read, and calls whose task message was lost (no outcome, no claim) are republished
  (as stage messages) — safe, because the worker never runs a call id twice.
* Cancelling a call's future sends the ``toolfleet_cancel`` control command to the host running it,
  which cancels the call there (the sandbox kills its process group).

``CeleryDispatcher`` is a facade over three parts, each owning its own data: ``PendingCalls``
(``_calls``: every call and open/close task in flight), ``SandboxPlacement`` (``_placement``: where each
sandbox lives, its slots, fair-share counts and the lease) and ``HostLiveness`` (``_liveness``: which host
incarnations are gone). The dispatcher builds them, hands each what it needs, and runs the one watch
loop that renews the lease and judges the hosts pending work waits on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from redis.exceptions import RedisError

from orchestrator._wire import CallOutcome, SandboxSpec
from workers.app import AppConfig, create_app
from workers.fleet import Placer, live_hosts, load_keyring, names

from ._calls import PendingCalls
from ._dispatcher import Dispatch, Dispatcher, SampleRoute
from ._liveness import HostLiveness
from ._placement import SANDBOX_WAIT_SOURCE, SandboxPlacement
from ._preflight import SandboxNeeds, check_fleet
from ._publisher import Publisher
from ._results import ResultListener

__all__ = ["SANDBOX_WAIT_SOURCE", "CeleryDispatcher", "CeleryDispatcherConfig"]

log = structlog.get_logger("toolfleet.dispatch")


class CeleryDispatcherConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["celery"] = "celery"
    broker_url: str = Field(default_factory=lambda: AppConfig().broker_url)
    max_payload_bytes: int = Field(8 * 1024 * 1024, gt=0, description="cap on a call's JSON request")
    call_grace: float = Field(30.0, ge=0,
                              description="seconds beyond a call's own timeout before the orchestrator gives up")
    max_call_seconds: float = Field(3600.0, gt=0, description="deadline of a call that has no timeout of its own")
    lost_grace: float = Field(5.0, ge=0,
                              description="seconds a host's heartbeat may be missing (e.g. Redis restart) before it is "
                                          "lost")
    watch_interval: float = Field(1.0, gt=0, description="how often pending calls' hosts are checked")
    open_timeout: float = Field(300.0, gt=0, description="bound on creating a sandbox on a worker")
    placement_wait: float = Field(3600.0, ge=0, description="how long open_sandbox waits for a free slot while the "
                                  "fleet is busy (full, or this eval holds its fair share and another eval waits)")
    no_host_wait: float = Field(60.0, ge=0, description="how long open_sandbox waits while no worker host is alive "
                                "(autoscaling from zero); at most placement_wait")
    placement_leases: int = Field(128, ge=0, description="sandbox slots per kind of sandbox (image, pull policy, "
                                  "eval) this orchestrator may reserve ahead and hand out without a Redis round trip "
                                  "(sized by recent demand, given back after 5 s unused); 0: every placement asks "
                                  "Redis")
    send_sent_events: bool = Field(False, description="Celery task-sent events (Flower's SENT state; workers' own task "
                                   "events already show every task): each costs ~12% more publisher CPU per call")
    lease_ttl: float = Field(3.0, gt=0,
                             description="seconds this orchestrator's sandbox lease outlives its last renewal")
    demand_ttl: float = Field(30.0, gt=0, description="seconds this orchestrator's waiting placements stay counted "
                              "in toolfleet.sandbox.demand after it stops refreshing them (it was killed): workers "
                              "prune them then")
    close_timeout: float = Field(60.0, gt=0)
    stage_linger: float = Field(0.002, ge=0, le=0.05, description="while this many calls are in flight already "
                                "(busy_calls), a stage waits up to this many seconds for others to share its "
                                "message; 0: never (an idle orchestrator never waits)")
    busy_calls: int = Field(64, ge=0, description="calls in flight from which stages linger to share messages")
    publish_timeout: float = Field(30.0, gt=0, description="how long publishing retries through a broker outage")
    secret: SecretStr | None = Field(None, description="the fleet secret (comma-separated for rotation); None: "
                                     "TOOLFLEET_SECRET or TOOLFLEET_SECRET_FILE")


class CeleryDispatcher(Dispatcher):
    name = "celery"

    def __init__(self, broker_url: str | None = None, config: CeleryDispatcherConfig | None = None) -> None:
        self.config = config or CeleryDispatcherConfig(**({"broker_url": broker_url} if broker_url else {}))
        # Workers accept only task messages signed with the fleet secret: without it nothing could run.
        self._keyring = load_keyring(self.config.secret.get_secret_value() if self.config.secret else None)
        self.app = create_app(AppConfig(broker_url=self.config.broker_url,
                                        max_payload_bytes=self.config.max_payload_bytes),
                              keyring=self._keyring)
        self.app.conf.task_send_sent_event = self.config.send_sent_events
        # owner of the sandboxes this dispatcher opens (lease); names its reply channel
        self.client_id = uuid.uuid4().hex
        self._reply = names.reply_channel(self.client_id)
        self._listener = ResultListener(self.config.broker_url, on_reconnect=self._after_reconnect,
                                        keyring=self._keyring,
                                        on_event=self._on_fleet_event, reply_channel=self._reply,
                                        on_reply=self._on_reply)
        self._publisher = Publisher(self.app, self.config.publish_timeout)
        self._liveness = HostLiveness(self.config.lost_grace)
        self._calls = PendingCalls(self.config, self._keyring, self._listener, self._publisher, self._reply,
                                   start=self.start, is_lost=self._liveness.is_lost)
        self._placement = SandboxPlacement(self.config, self._listener.redis, self.client_id, self._calls,
                                           is_lost=self._liveness.is_lost, signing_id=self._keyring.signing_id)
        self._start_lock: asyncio.Lock | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False

    # What benchmarks and the eval read: the parts' own figures and state.

    @property
    def fleet_error(self) -> str | None:
        return self._calls.fleet_error

    @fleet_error.setter
    def fleet_error(self, value: str | None) -> None:
        self._calls.fleet_error = value

    @property
    def unauthenticated(self) -> int:
        """Replies dropped because their MAC did not verify."""
        return self._calls.unauthenticated

    @property
    def published(self) -> deque[tuple[int, int]]:
        """(messages, calls) per publish of calls: how well stages coalesce (``bench fanout``)."""
        return self._calls.published

    @property
    def placer(self) -> Placer:
        return self._placement.placer

    @property
    def placement_seconds(self) -> deque[float]:
        return self._placement.placement_seconds

    @property
    def placement_resumed_seconds(self) -> deque[float]:
        return self._placement.placement_resumed_seconds

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._watchdog is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._watchdog is None:
                await self._listener.start()
                try:  # the fleet's hosts read once now, so the first burst of placements need not wait for it
                    await self.placer.hosts()
                except (RedisError, OSError) as exc:
                    log.debug("dispatch.hosts_read_failed", error=str(exc))  # placement reads it again
                self._watchdog = asyncio.ensure_future(self._watch())

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._calls.stop()
        self._placement.stop()
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        await self._calls.aclose()
        await self._placement.aclose()
        await self._listener.aclose()
        await self._publisher.aclose()

    # --- calls and sandboxes -------------------------------------------------------------------

    def dispatch(self, stage: Sequence[Dispatch]) -> list[asyncio.Future[CallOutcome]]:
        return self._calls.dispatch(stage, self._placement.where)

    async def open_sandbox(self, spec: SandboxSpec) -> SampleRoute:
        await self.start()
        return await self._placement.open(spec)

    async def close_sandbox(self, route: SampleRoute) -> None:
        await self._placement.close(route)

    async def set_sandbox_network(self, route: SampleRoute, network_mode: str,
                                  allowed_hosts: Sequence[str] = ()) -> None:
        await self._placement.set_network(route, network_mode, list(allowed_hosts))

    async def remove_snapshots(self, eval_id: str) -> list[str]:
        """Every live host removes the eval's snapshots it holds (tools on a worker may have taken some)."""
        await self.start()
        hosts = await live_hosts(self._listener.redis)
        from ._snapshots import remove_snapshots_on  # deferred: it loads the worker-side snapshot tools

        return await remove_snapshots_on(self, eval_id, [h.queue for h in hosts])

    async def preflight(self, needs: SandboxNeeds) -> None:
        await check_fleet(self.config.broker_url, needs.images, needs.kinds, needs.pullable, needs.pods, needs.tools,
                          needs.networks, root=needs.root, signing_id=self._keyring.signing_id)

    # --- what the result listener hears --------------------------------------------------------

    def _on_reply(self, data: bytes) -> None:
        self._calls.on_reply(data)

    def _on_fleet_event(self, data: bytes) -> None:
        self._calls.on_fleet_event(data)

    async def _after_reconnect(self) -> None:
        await self._calls.after_reconnect()

    # --- host liveness -------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await self._placement.renew_lease()
            await asyncio.sleep(self.config.watch_interval)
            hosts = self._calls.hosts()
            if not hosts:
                continue
            try:
                await self._check_hosts(sorted(hosts))
            except (RedisError, OSError) as exc:
                log.debug("dispatch.watch_skipped", error=str(exc))  # Redis down: judge nobody meanwhile

    async def _check_hosts(self, hosts: list[str]) -> None:
        for host, boot in (await self._liveness.read(self._listener.redis, hosts)).items():
            if boot is None:
                self._host_lost(host, None)
                continue
            for old in self._calls.older_boots(host, boot):
                self._host_lost(host, old)  # the host restarted: what the old process held is gone

    def _host_lost(self, host: str, boot: str | None) -> None:
        """``boot=None``: the host's heartbeat is gone, so every incarnation we know of is lost."""
        known = self._placement.boots_on(host) | self._calls.boots_on(host)
        self._liveness.mark_lost(host, known if boot is None else {boot})
        if boot is None:
            self.placer.host_lost(host)  # no lease on it is handed out meanwhile
        self._calls.host_lost(host, boot)
