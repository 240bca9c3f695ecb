"""Which tools a worker registered at start, published beside its heartbeat for the orchestrator's preflight.

The manifest (tool registry name -> the module defining it) lives in its own key,
``toolfleet:host:<host>:tools``, not in the heartbeat hash: placement reads every host's hash on its
hot path, and a tool list (kilobytes) would ride along with each read. The registry never changes
after start (a message never imports anything), so the manifest is written once, and again only if
Redis lost it (a restart, an outage longer than its TTL): each beat refreshes its TTL with one
``EXPIRE``, whose answer says whether the key is still there.

Bounded both ways: a worker publishes at most ``MAX_MANIFEST_BYTES`` (beyond that it says the list is
incomplete, and preflight then takes that worker as possibly having any tool); a reader ignores a
value that is too large or malformed (that worker's tools are then unknown, never "missing").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ValidationError
from redis.asyncio import Redis

from orchestrator.tool._registry import registered_tool_modules

from . import _names

__all__ = ["MANIFEST_VERSION", "MAX_MANIFEST_BYTES", "ToolManifest", "read_tool_manifests"]

MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 64 * 1024  # ~1,000 tools with long module paths
MAX_NAME_CHARS = 200  # a registry name or module path longer than this is left out (and the list marked incomplete)


class ToolManifest(BaseModel):
    """The tools one worker's registry holds: registry name -> defining module ('' if unknown)."""

    v: int = MANIFEST_VERSION
    tools: dict[str, str] = {}
    complete: bool = True  # False: some were left out to stay within the bound

    @classmethod
    def of(cls, tools: Mapping[str, str | None]) -> ToolManifest:
        """The manifest of ``tools``, cut (and marked incomplete) to fit ``MAX_MANIFEST_BYTES``."""
        kept: dict[str, str] = {}
        size, complete = 64, True  # the envelope's own bytes
        for name in sorted(tools):
            module = tools[name] or ""
            entry = len(json.dumps(name)) + len(json.dumps(module)) + 2
            if len(name) > MAX_NAME_CHARS or len(module) > MAX_NAME_CHARS or size + entry > MAX_MANIFEST_BYTES:
                complete = False
                continue
            kept[name] = module
            size += entry
        return cls(tools=kept, complete=complete)

    @classmethod
    def from_registry(cls) -> ToolManifest:
        """What this process registered (built-ins and ``--import``s: the registry is complete by now)."""
        return cls.of(registered_tool_modules())

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def parse(cls, raw: bytes | str | None) -> ToolManifest | None:
        """A manifest read from Redis, or None when absent, too large, malformed or of another version."""
        if raw is None or len(raw) > 2 * MAX_MANIFEST_BYTES:
            return None
        try:
            manifest = cls.model_validate_json(raw)
        except (ValidationError, ValueError):
            return None
        return manifest if manifest.v == MANIFEST_VERSION else None

    def has(self, name: str) -> bool | None:
        """True / False; None when an incomplete list does not name it (it may have it)."""
        if name in self.tools:
            return True
        return False if self.complete else None


async def read_tool_manifests(redis: Redis, hosts: Sequence[str]) -> dict[str, ToolManifest | None]:
    """Each host's manifest (one MGET); None for a host that published none (an older worker) or a bad one."""
    if not hosts:
        return {}
    values = await redis.mget([_names.tools_key(h) for h in hosts])
    return {host: ToolManifest.parse(raw) for host, raw in zip(hosts, values, strict=True)}
