"""Live sandboxes by id: where a ``CallRequest.sandbox`` handle resolves to an environment.

A ``SandboxRegistry`` belongs to whoever opens sandboxes (a ``SandboxHost``: a worker's, or embedded
mode's), and the drivers it builds register what they create in it. Drivers built on their own (tests,
benchmarks) use the process's default registry, which the module-level functions reach.
"""

from __future__ import annotations

import threading

from orchestrator.util._sandbox import SandboxEnvironment, SandboxUnavailableError

__all__ = ["SandboxRegistry", "default_registry", "get", "live_ids", "register", "release"]


class SandboxRegistry:
    def __init__(self) -> None:
        self._live: dict[str, SandboxEnvironment] = {}
        self._lock = threading.Lock()  # Celery may run tasks in threads; registry access must be atomic

    def register(self, sandbox_id: str, env: SandboxEnvironment) -> str:
        with self._lock:
            self._live[sandbox_id] = env
        return sandbox_id

    def get(self, sandbox_id: str) -> SandboxEnvironment:
        """The live environment, or ``SandboxUnavailableError`` naming the id."""
        with self._lock:
            env = self._live.get(sandbox_id)
        if env is None:
            raise SandboxUnavailableError(
                f"Sandbox '{sandbox_id}' is not available on this host (destroyed or never created here).")
        return env

    def release(self, sandbox_id: str) -> SandboxEnvironment | None:
        with self._lock:
            return self._live.pop(sandbox_id, None)

    def live_ids(self) -> list[str]:
        with self._lock:
            return list(self._live)


_DEFAULT = SandboxRegistry()


def default_registry() -> SandboxRegistry:
    return _DEFAULT


def register(sandbox_id: str, env: SandboxEnvironment) -> str:
    return _DEFAULT.register(sandbox_id, env)


def get(sandbox_id: str) -> SandboxEnvironment:
    return _DEFAULT.get(sandbox_id)


def release(sandbox_id: str) -> SandboxEnvironment | None:
    return _DEFAULT.release(sandbox_id)


def live_ids() -> list[str]:
    return _DEFAULT.live_ids()
