"""The Celery dispatcher's sandboxes: where each one was placed, and the slots, fair-share counts and
lease that go with it.

``SandboxPlacement.open`` reserves a slot on a live host (``workers.fleet.Placer``; a burst of opens is
mostly served from slots reserved ahead, ``placement_leases``), waits — bounded, and saying so — while
the fleet is busy, and sends the open task to that host's queue; every call of the sample then goes to
the same queue (``where``). Closing gives the slot and the eval's fair-share count back. The
dispatcher's lease (renewed with the hosts' watch) tells workers its sandboxes still have an owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from redis.exceptions import RedisError

from orchestrator._wire import SandboxExec, SandboxSpec
from orchestrator.log import InfoEvent, transcript
from orchestrator.util._sandbox import SandboxLostError, SandboxUnavailableError
from workers.fleet import (
    NoCapacityError,
    NoLiveHostError,
    Placer,
    SandboxTooLargeError,
    add_demand,
    keep_demand_owner,
    keep_evals_alive,
    names,
    patiently,
    release_eval,
    remove_demand,
    set_eval_counts,
    slot_weight,
    stop_waiting,
)

from ._calls import PendingCalls
from ._dispatcher import SampleRoute, attach_setup_execs

if TYPE_CHECKING:
    from .celery import CeleryDispatcherConfig

__all__ = ["SANDBOX_WAIT_SOURCE", "SandboxPlacement"]

log = structlog.get_logger("toolfleet.dispatch")
SANDBOX_WAIT_SOURCE = "sandbox_wait"  # info events: a sample waits for a sandbox slot / stopped waiting
MAX_SETUP_EXECS = 100  # what a worker's open answer may carry (the worker keeps the same bound)
PLACEMENT_SAMPLES = 100_000  # placement latencies kept (a float each)
DRAINING_RETRIES = 3  # an open refused by a host that began draining since it was chosen: placed again this often


def _setup_execs(answer: Any) -> tuple[list[SandboxExec], int]:
    """The files/setup execs a worker's open answer carries (malformed ones are dropped, not fatal)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("sandbox_execs"), list):
        return [], 0
    execs: list[SandboxExec] = []
    for item in answer["sandbox_execs"][:MAX_SETUP_EXECS]:
        try:
            execs.append(SandboxExec.model_validate(item))
        except ValueError:
            continue
    dropped = answer.get("sandbox_execs_dropped")
    return execs, dropped if isinstance(dropped, int) and dropped >= 0 else 0


def _refused_draining(answer: Any) -> bool:
    """Whether a worker's open answer is its refusal as a draining host (``workers.tasks.run_open``)."""
    return (isinstance(answer, dict) and isinstance(answer.get("error"), dict)
            and answer["error"].get("type") == "draining")


def _images(config: dict[str, Any] | None) -> list[str] | None:
    """The images a sandbox needs on its host (a multi-service sandbox's services' too)."""
    if not config or not config.get("image"):
        return None
    return list(dict.fromkeys([config["image"], *(s.get("image") for s in (config.get("services") or {}).values())]))


class SandboxPlacement:
    """One dispatcher's sandboxes on the fleet: each one's host and boot, its eval's fair-share slots,
    the samples waiting for a slot, the lease, and the ``Placer`` that reserves the slots.

    ``calls``: sends the open/close tasks; ``is_lost(host, boot)``: whether that host incarnation is
    known to be gone (its sandboxes with it)."""

    def __init__(self, config: CeleryDispatcherConfig, redis: Any, client_id: str, calls: PendingCalls,
                 is_lost: Callable[[str, str | None], bool], signing_id: str | None = None) -> None:
        self.config = config
        self._redis = redis
        self._client_id = client_id
        self._calls = calls
        self._is_lost = is_lost
        self._sandboxes: dict[str, tuple[str, str]] = {}  # sandbox handle -> (host, boot at open)
        self._sandbox_evals: dict[str, tuple[str, int]] = {}  # sandbox handle -> (eval id, slots) for fair share
        self._waiters: dict[str, int] = {}  # eval id -> this dispatcher's placements waiting for a slot
        self._opening: dict[str, int] = {}  # eval id -> slots placed for sandboxes being opened now
        self._evals: set[str] = set()  # every eval this dispatcher placed sandboxes for
        self._lease_set = -1e9  # monotonic time of the last lease SET
        self._lease_setting: asyncio.Future[None] | None = None  # the SET in flight, awaited by every open meanwhile
        self._demand_owner_set = -1e9  # loop time the demand owner key was last refreshed (``workers.fleet._demand``)
        self._closed = False
        # Seconds each of the latest sandbox placements took (asking for a slot until holding one —
        # Redis's answer read —, waiting for capacity included), and until the opening coroutine ran
        # again (the loop's lag added): what `toolfleet bench scale` reports.
        self.placement_seconds: deque[float] = deque(maxlen=PLACEMENT_SAMPLES)
        self.placement_resumed_seconds: deque[float] = deque(maxlen=PLACEMENT_SAMPLES)
        # Live hosts cached briefly; slots taken by one script, and reserved ahead (leases) for a burst.
        self.placer = Placer(redis, leases=config.placement_leases, signing_id=signing_id)

    def stop(self) -> None:
        """The dispatcher is closing: a sandbox closed from now on is not sent a close task."""
        self._closed = True

    async def aclose(self) -> None:
        await self.placer.aclose()
        try:  # the evals' counts as this dispatcher leaves them (none held: their entries go)
            await set_eval_counts(self._redis, self.eval_counts())
        except (RedisError, OSError) as exc:
            log.debug("dispatch.eval_counts_failed", error=str(exc))

    def where(self, handle: str) -> tuple[str | None, str | None]:
        """The (host, boot) holding sandbox ``handle``; (None, None) if this dispatcher did not open it."""
        return self._sandboxes.get(handle, (None, None))

    def boots_on(self, host: str) -> set[str]:
        """The incarnations of ``host`` this dispatcher's open sandboxes live on."""
        return {b for h, b in self._sandboxes.values() if h == host}

    # --- opening -------------------------------------------------------------------------------

    async def open(self, spec: SandboxSpec) -> SampleRoute:
        redis = self._redis
        weight = slot_weight(spec.config)  # one slot per container of the sandbox
        only = ((spec.config or {}).get("snapshot") or {}).get("host")  # a fork goes where its snapshot is
        # A fork is its sample's work, not a new sample: it is not refused (nor counted) for the eval's
        # fair share, as it is never refused for a full host (``workers.fleet.FORK_SLOTS``): the sample
        # waiting for it holds its slots, and would hold them for good.
        share = None if only else spec.eval_id
        images, pull_policy = _images(spec.config), (spec.config or {}).get("pull_policy", "missing")
        for attempt in range(DRAINING_RETRIES + 1):
            try:
                # A broker restart (seconds) is ridden out, as publishing is: only a longer outage fails the open.
                host = await patiently(lambda: self._place(redis, images, pull_policy, weight, share,
                                                           spec.sample_id, only), self.config.publish_timeout)
            except (RedisError, OSError) as exc:
                raise SandboxUnavailableError(f"Sandbox placement failed: the broker is unreachable ({exc}).") from exc
            self._count_opening(share, weight)
            try:
                await patiently(self._hold_lease, self.config.publish_timeout)
                meta = await self._calls.lifecycle("open", names.TASK_OPEN_SANDBOX,
                                                   [spec.model_dump(mode="json"), self._client_id], host.queue,
                                                   host.host, host.boot)
            except BaseException as exc:
                await self._release(host.host, weight, share)
                if (isinstance(exc, SandboxUnavailableError) and only is None and attempt < DRAINING_RETRIES
                        and self._is_lost(host.host, host.boot)):
                    # The host died after placement last saw it alive (a cached host list, a leased slot);
                    # whatever it opened went with it (its reaper or restart removes the container): place
                    # the sandbox again, as for a host that began draining.
                    log.info("dispatch.open_placed_again", host=host.host, sample=spec.sample_id)
                    self.placer.host_lost(host.host)
                    continue
                raise
            finally:
                self._count_opening(share, -weight)
            answer = meta.get("result") if meta.get("status") == "SUCCESS" else None
            if only is None and attempt < DRAINING_RETRIES and _refused_draining(answer):
                # The host began draining after placement last saw it (a cached host list, a leased
                # slot): give the slot back, let placement know, and place the sandbox again.
                await self._release(host.host, weight, share)
                self.placer.host_draining(host.host)
                continue
            break
        execs, dropped = _setup_execs(answer)
        if not isinstance(answer, dict) or "handle" not in answer:
            await self._release(host.host, weight, share)
            reason = answer.get("error", {}).get("message") if isinstance(answer, dict) else meta.get("result")
            error = SandboxUnavailableError(f"Could not create a sandbox on worker host '{host.host}': {reason}")
            attach_setup_execs(error, execs, dropped, host.host)
            raise error
        handle = str(answer["handle"])
        self._sandboxes[handle] = (host.host, host.boot)
        if share:
            self._sandbox_evals[handle] = (share, weight)
        log.debug("dispatch.sandbox_opened", host=host.host, sandbox=handle, sample=spec.sample_id)
        return SampleRoute(sample_id=spec.sample_id, sandbox=handle, queue=host.queue, host=host.host,
                           setup_execs=tuple(execs), setup_execs_dropped=dropped)

    def _count_opening(self, eval_id: str | None, weight: int) -> None:
        if eval_id:
            self._evals.add(eval_id)
            self._opening[eval_id] = self._opening.get(eval_id, 0) + weight
            if not self._opening[eval_id]:
                del self._opening[eval_id]

    def eval_counts(self) -> dict[str, int]:
        """What this dispatcher holds of each eval's fair share: its open sandboxes, those being opened,
        and what its placer holds or asked for."""
        counts = {e: self._opening.get(e, 0) + self.placer.holding(e) for e in self._evals}
        for eval_id, weight in self._sandbox_evals.values():
            counts[eval_id] = counts.get(eval_id, 0) + weight
        return counts

    async def _place(self, redis: Any, image: list[str] | None = None, pull_policy: str = "missing",
                     weight: int = 1, eval_id: str | None = None, sample_id: str | None = None,
                     only: str | None = None) -> Any:
        """Reserve a slot; while the fleet is busy (full, or this eval holds its fair share while another
        eval waits), wait — bounded by ``placement_wait``, or ``no_host_wait`` while no host is alive —
        and say so: in Redis (the ``toolfleet.sandbox.demand`` list the autoscaler watches), in the
        sample's transcript (``sandbox_wait`` info events, counted by the live display) and in the log.
        ``only``: the one host that may take it (a fork, on the host holding its snapshot)."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        token: str | None = None
        try:
            while True:
                try:
                    # have the image, else can pull it
                    host, held = await self.placer.reserve_timed(image, pull_policy, weight, eval_id, only)
                    self.placement_seconds.append(held - asked)
                    self.placement_resumed_seconds.append(loop.time() - asked)
                    if token is not None:
                        self._waited(eval_id, sample_id, loop.time() - asked, placed=True)
                    return host
                except (NoCapacityError, SandboxLostError) as exc:  # lost: the snapshot's host, waiting cannot help
                    bound = self.config.placement_wait
                    if isinstance(exc, NoLiveHostError):
                        bound = min(bound, self.config.no_host_wait)
                    if loop.time() - asked >= bound or isinstance(exc, (SandboxTooLargeError, SandboxLostError)):
                        if token is not None:
                            self._waited(eval_id, sample_id, loop.time() - asked, placed=False)
                        raise SandboxUnavailableError(str(exc)) from exc
                    if token is None:
                        self._waiting(eval_id, sample_id, str(exc))
                        token = await add_demand(redis, self._client_id, self.config.demand_ttl)
                        self._demand_owner_set = loop.time()
                    elif loop.time() - self._demand_owner_set >= self.config.demand_ttl / 3:
                        # our tokens name us: workers drop them once this key lapses (we were killed)
                        self._demand_owner_set = loop.time()  # set first: one refresh per burst of waiters
                        await keep_demand_owner(redis, self._client_id, self.config.demand_ttl)
                    await asyncio.sleep(min(1.0, max(0.0, asked + bound - loop.time())))
        finally:
            if token is not None:
                try:
                    await remove_demand(redis, token)
                    if eval_id and not self._waiters.get(eval_id):
                        await stop_waiting(redis, eval_id)
                except (RedisError, OSError):
                    pass

    def _waiting(self, eval_id: str | None, sample_id: str | None, reason: str) -> None:
        self._waiters[eval_id or ""] = self._waiters.get(eval_id or "", 0) + 1
        log.info("dispatch.sandbox_waiting", eval=eval_id, sample=sample_id, reason=reason)
        transcript().record(InfoEvent(source=SANDBOX_WAIT_SOURCE, data={"waiting": True, "reason": reason}))

    def _waited(self, eval_id: str | None, sample_id: str | None, seconds: float, placed: bool) -> None:
        key = eval_id or ""
        self._waiters[key] = self._waiters.get(key, 1) - 1
        if self._waiters[key] <= 0:
            del self._waiters[key]
        log.info("dispatch.sandbox_waited", eval=eval_id, sample=sample_id, waited_s=round(seconds, 1), placed=placed)
        transcript().record(InfoEvent(source=SANDBOX_WAIT_SOURCE, data={
            "waiting": False, "waited_s": round(seconds, 3), "placed": placed}))

    # --- the lease -----------------------------------------------------------------------------

    async def _hold_lease(self) -> None:
        """The lease must be alive before a worker sees the open; one SET covers every open of the next
        third of its TTL, and the opens asking while it is in flight wait for that one (a burst of
        opens would otherwise send one each)."""
        now = time.monotonic()
        if now - self._lease_set < self.config.lease_ttl / 3:
            return
        if self._lease_setting is None or self._lease_setting.done():
            self._lease_setting = asyncio.ensure_future(self._set_lease(now))
        await asyncio.shield(self._lease_setting)  # one caller cancelled must not cancel the others' SET

    async def _set_lease(self, now: float) -> None:
        await self._redis.set(names.lease_key(self._client_id), 1, ex=max(1, int(self.config.lease_ttl)))
        self._lease_set = now

    async def renew_lease(self) -> None:
        """Workers close the sandboxes of an orchestrator whose lease lapsed (it crashed)."""
        if not self._sandboxes:
            return
        try:
            await self._redis.set(names.lease_key(self._client_id), 1, ex=max(1, int(self.config.lease_ttl)))
            self._lease_set = time.monotonic()
            await keep_evals_alive(self._redis, sorted({e for e, _ in self._sandbox_evals.values()}))
            # One orchestrator runs an eval: its own count is the eval's (what a killed predecessor of the
            # same eval, or a Redis restart, left in Redis is put right).
            await set_eval_counts(self._redis, self.eval_counts())
        except (RedisError, OSError) as exc:
            log.debug("dispatch.lease_failed", error=str(exc))

    # --- a phase's network ----------------------------------------------------------------------

    async def set_network(self, route: SampleRoute, network_mode: str, allowed_hosts: list[str]) -> None:
        """Ask the host holding the sandbox to change its network policy (a signed task it admits)."""
        if route.sandbox is None:
            raise SandboxUnavailableError("This sample has no sandbox whose network could change.")
        host, boot = self._sandboxes.get(route.sandbox, (names.host_of_queue(route.queue), None))
        if host is None or self._is_lost(host, boot):
            raise SandboxUnavailableError(f"The worker host holding sandbox '{route.sandbox}' is gone.")
        try:
            answer = await self._calls.lifecycle(
                "network", names.TASK_SANDBOX_NETWORK,
                [route.sandbox, {"network_mode": network_mode, "allowed_hosts": list(allowed_hosts)}],
                names.host_queue(host), host, boot)
        except TimeoutError as exc:
            raise SandboxUnavailableError(f"Worker host '{host}' did not change the sandbox's network: {exc}") from exc
        result = answer.get("result") if answer.get("status") == "SUCCESS" else None
        if not isinstance(result, dict) or result.get("network_mode") != network_mode:
            reason = result.get("error", {}).get("message") if isinstance(result, dict) else answer.get("result")
            raise SandboxUnavailableError(f"Worker host '{host}' did not change the sandbox's network to "
                                          f"'{network_mode}': {reason}")

    # --- closing -------------------------------------------------------------------------------

    async def close(self, route: SampleRoute) -> None:
        if route.sandbox is None:
            return
        host, boot = self._sandboxes.pop(route.sandbox, (names.host_of_queue(route.queue), None))
        held = self._sandbox_evals.pop(route.sandbox, None)
        if held is not None:  # the eval's fair-share count, whatever becomes of the sandbox itself
            try:
                await release_eval(self._redis, *held)
            except (RedisError, OSError) as exc:
                log.debug("dispatch.eval_release_failed", error=str(exc))
        if host is None or self._is_lost(host, boot) or self._closed:
            return  # nothing left to close: the host (and the sandbox) is gone
        try:
            await self._calls.lifecycle("close", names.TASK_CLOSE_SANDBOX, [route.sandbox], names.host_queue(host),
                                        host, boot)
        except (SandboxUnavailableError, TimeoutError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.warning("dispatch.close_failed", sandbox=route.sandbox, host=host, error=str(exc))

    async def _release(self, host: str, weight: int = 1, eval_id: str | None = None) -> None:
        with contextlib.suppress(RedisError, OSError):  # the host resets its counter at restart
            await self.placer.release(host, weight, eval_id)  # after a leased slot's own count, never before
