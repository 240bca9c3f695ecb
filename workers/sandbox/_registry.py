"""Process-local registry of live sandboxes by id.

A ``CallRequest.sandbox`` id resolves to an environment on whichever process executes the call
(the worker that created it, or the orchestrator in embedded mode).
"""

from __future__ import annotations

import threading

from orchestrator.util._sandbox import SandboxEnvironment, SandboxUnavailableError

_live: dict[str, SandboxEnvironment] = {}
_lock = threading.Lock()  # Celery may run tasks in threads; registry access must be atomic


def register(sandbox_id: str, env: SandboxEnvironment) -> str:
    with _lock:
        _live[sandbox_id] = env
    return sandbox_id


def get(sandbox_id: str) -> SandboxEnvironment:
    """The live environment, or ``SandboxUnavailableError`` naming the id."""
    with _lock:
        env = _live.get(sandbox_id)
    if env is None:
        raise SandboxUnavailableError(f"Sandbox '{sandbox_id}' is not available on this host (destroyed or never created here).")
    return env


def release(sandbox_id: str) -> SandboxEnvironment | None:
    with _lock:
        return _live.pop(sandbox_id, None)


def live_ids() -> list[str]:
    with _lock:
        return list(_live)
