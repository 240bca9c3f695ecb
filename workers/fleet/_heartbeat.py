"""Worker-host liveness and capacity in Redis: one hash per host that expires unless refreshed.

A host is *alive* while ``toolfleet:host:<host>`` exists (it carries a TTL of a few heartbeat
intervals). ``boot`` changes every time the worker process starts, so the orchestrator can tell a
restarted host (whose sandboxes are gone) from a live one. ``draining`` is set on SIGTERM: the host
finishes its running calls but takes no new sandboxes. ``images`` lists the Docker image tags the
host has (refreshed every few seconds) and ``registries`` those it pulls from (``--registry``), so
placement prefers hosts that have a sample's image (else can pull it) and ``toolfleet eval``'s preflight
can tell a missing image before the first sample starts. The tools the host registered at start go in a
key of their own beside the hash (``_tool_manifest``): written once, re-written only if Redis lost it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import BaseModel
from redis.asyncio import Redis
from redis.exceptions import RedisError

from . import _names
from ._tool_manifest import ToolManifest, read_tool_manifests

__all__ = ["HostRecord", "Heartbeat", "ToolManifest", "claim_identity", "read_tool_manifests"]

log = structlog.get_logger("toolfleet.heartbeat")


LIST_FIELDS = ("images", "image_patterns", "sandbox_types", "registries", "network_modes", "keys")


class HostRecord(BaseModel):
    """What a host publishes about itself (all fields are strings in the Redis hash)."""

    host: str
    queue: str
    node: str
    boot: str
    slots: int  # sandboxes this host accepts
    sandboxes: int = 0  # slots its live sandboxes take (one per container: a multi-service sandbox has several)
    running: int = 0  # calls executing now
    draining: bool = False
    ts: float = 0.0
    images: list[str] = []  # docker image tags present on the host ([] without Docker)
    image_patterns: list[str] = []  # images its admission rules run (--image); [] = not reported
    # sandbox types its admission rules run (docker; local with --allow-local); [] = not reported
    sandbox_types: list[str] = []
    registries: list[str] = []  # registries it pulls missing images from (--registry); [] = it never pulls
    allow_root: bool = False  # a sandbox command may run as root here (--allow-root-user)
    # Network modes it gives a sandbox a network of its own for (--allow-network, enforced by its host);
    # [] = its host enforces no policy (or it does not report): only lone 'none' sandboxes there.
    network_modes: list[str] = []
    # The ids of the fleet secrets it accepts (``Keyring.ids``: hash prefixes, never a secret); [] = not
    # reported. An orchestrator whose signing key is not among them would have every message rejected:
    # preflight says so, and placement passes such a host by. Unsigned, like the rest of the record: a
    # forgery can hide a host from an orchestrator (denial of service, which a broker writer has anyway),
    # never make it run anything.
    keys: list[str] = []

    def to_hash(self) -> dict[str, str]:
        return {k: json.dumps(v) if isinstance(v, list) else str(int(v) if isinstance(v, bool) else v)
                for k, v in self.model_dump().items()}

    @classmethod
    def from_hash(cls, data: dict[bytes | str, bytes | str]) -> HostRecord:
        decoded: dict[str, Any] = {(k.decode() if isinstance(k, bytes) else k):
                                   (v.decode() if isinstance(v, bytes) else v) for k, v in data.items()}
        decoded["draining"] = decoded.get("draining") in ("1", "True", "true")
        decoded["allow_root"] = decoded.get("allow_root") in ("1", "True", "true")
        try:
            for field in LIST_FIELDS:
                decoded[field] = json.loads(decoded.get(field) or "[]")
        except ValueError:
            decoded.update({field: [] for field in LIST_FIELDS})
        return cls.model_validate(decoded)


IMAGES_REFRESH_S = 5.0


def _local_image_tags() -> list[str]:
    """Tags of the images the local Docker daemon has ([] when there is no Docker)."""
    try:
        import docker

        client = docker.from_env(timeout=5)
    except Exception:  # noqa: BLE001 - no SDK, no daemon: this host has no images to offer
        return []
    try:
        return sorted({t for image in client.api.images() for t in (image.get("RepoTags") or [])
                       if t and not t.startswith("<none>")})
    except Exception:  # noqa: BLE001 - a daemon gone mid-listing offers no images either
        return []
    finally:
        client.close()


def claim_identity(broker_url: str, host: str, token: str, hold: float = 30.0, poll: float = 0.2) -> str | None:
    """Claim ``host`` as this worker's identity, or say why it cannot be (another live worker has it).

    The claim is one ``SET toolfleet:identity:<host> <token> NX`` (atomic: of two workers started at
    once under one name, exactly one gets it), held ``hold`` seconds until the heartbeat takes over
    refreshing it. A claim held by someone else is not proof of a live worker: one that just crashed
    leaves it until it expires. So watch (bounded by its TTL): the name's heartbeat record appearing
    or changing means a live duplicate; the claim expiring means the name is free, and is retried. An
    unreachable Redis is not checked here (the worker waits for it at start anyway).
    """
    import redis as redis_sync

    claim, beat = _names.identity_key(host), _names.heartbeat_key(host)
    client = redis_sync.Redis.from_url(broker_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        first = client.hgetall(beat)
        deadline = time.monotonic() + max(0, client.ttl(claim)) + hold + 1.0
        while time.monotonic() < deadline:
            if client.set(claim, token, nx=True, ex=max(1, int(hold))):
                return None
            time.sleep(poll)
            now = client.hgetall(beat)
            if now and (now.get(b"ts") != first.get(b"ts") or now.get(b"boot") != first.get(b"boot")):
                return (f"another live worker already uses the identity {host!r} (it heartbeats in Redis); "
                        "give this one another --hostname, or omit --hostname for a unique default.")
        return (f"the identity {host!r} is claimed in Redis by a worker that neither heartbeats nor lets go; "
                "give this one another --hostname.")
    except (redis_sync.RedisError, OSError):
        return None
    finally:
        client.close()


class Heartbeat:
    """Publishes the host record every ``interval`` seconds until stopped."""

    def __init__(self, redis: Redis, record: HostRecord, interval: float, ttl: float,
                 tools: ToolManifest | None = None) -> None:
        self._redis = redis
        self.record = record
        # The registry is complete before the worker starts beating (start-up flags import, messages never do).
        self.tools = tools if tools is not None else ToolManifest.from_registry()
        self.interval = interval
        self.ttl = ttl
        self._task: asyncio.Task[None] | None = None
        # async callables run after each beat (e.g. re-assert call claims)
        self._hooks: list[Callable[[], Awaitable[None]]] = []
        self._images_at = float("-inf")

    def on_beat(self, hook: Callable[[], Awaitable[None]]) -> None:
        self._hooks.append(hook)

    async def _refresh_images(self) -> None:
        if time.monotonic() - self._images_at < IMAGES_REFRESH_S:
            return
        self._images_at = time.monotonic()
        with contextlib.suppress(TimeoutError):  # keep the last list
            self.record.images = await asyncio.wait_for(asyncio.to_thread(_local_image_tags), 10.0)

    async def beat(self) -> None:
        await self._refresh_images()
        self.record.ts = time.time()
        key, ttl = _names.heartbeat_key(self.record.host), max(1, round(self.ttl))
        tools_key = _names.tools_key(self.record.host)
        async with self._redis.pipeline(transaction=True) as pipe:
            fields: dict[Any, Any] = self.record.to_hash()  # redis-py's Mapping type is invariant in its keys
            pipe.hset(key, mapping=fields)
            pipe.expire(key, ttl)
            pipe.sadd(_names.HOSTS_SET, self.record.host)
            pipe.set(_names.identity_key(self.record.host), self.record.boot, ex=ttl)
            # After a Redis restart the placement counter is gone: start it from what we hold.
            pipe.set(_names.slots_used_key(self.record.host), self.record.sandboxes, nx=True)
            pipe.expire(tools_key, ttl)  # 0: the manifest is not there (first beat, or Redis lost it)
            *_, tools_kept = await pipe.execute()
        if not tools_kept:
            await self._redis.set(tools_key, self.tools.to_json(), ex=ttl)
        for hook in self._hooks:
            await hook()

    async def reset_slots(self) -> None:
        """At start this process holds no sandboxes: whatever the counter said belonged to a dead process."""
        await self._redis.set(_names.slots_used_key(self.record.host), 0)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            try:
                await self.beat()
            except (RedisError, OSError) as exc:
                # Redis is down or restarting: keep trying; the key's TTL tells the fleet we are gone
                # only if the outage outlasts it.
                log.warning("heartbeat.failed", host=self.record.host, error=str(exc))
            await asyncio.sleep(self.interval)

    async def stop(self, remove: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if remove:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self._redis.delete(_names.heartbeat_key(self.record.host),
                                                          _names.identity_key(self.record.host),
                                                          _names.tools_key(self.record.host)), 5.0)
