"""Batch mode: model requests pooled into providers' batch APIs (``GenerateConfig.batch``).

Modules: ``_backend`` (the provider seam, ``BatchError``), ``_settings`` (options and defaults),
``_pool`` (queueing, submission, polling, hand-back), ``_resume`` (log records, resume matching),
``_scope`` (the eval a request belongs to). Providers implement ``BatchBackend`` beside themselves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._generate_config import BatchConfig
from ._backend import (
    PENDING,
    BatchBackend,
    BatchCheck,
    BatchError,
    BatchOutcome,
    BatchState,
)
from ._pool import BatchPool
from ._resume import RecordedRequest, ResumeTable, conversation_turn, request_key
from ._scope import BatchScope, active_batch_scope, batch_scope
from ._settings import BatchSettings, batch_settings

_POOL_ATTR = "_toolfleet_batch_pool"


def batch_pool(api: Any, value: bool | int | BatchConfig | None, model: str) -> BatchPool | None:
    """The pool ``api``'s requests go through with this ``batch`` setting (None: the provider has no batch
    API, or batching is off). One pool per provider instance and event loop, so every sample's requests
    meet in it."""
    if value is None or value is False:
        return None
    loop = asyncio.get_running_loop()
    cached = getattr(api, _POOL_ATTR, None)
    if cached is not None and cached[0] is loop and cached[1] == value:
        pool: BatchPool = cached[2]
        return pool
    backend = api.batch_backend()
    if backend is None:
        return None  # as Inspect: providers without a batch API ignore the option
    settings = batch_settings(value, backend.max_size)
    assert settings is not None
    pool = BatchPool(backend, settings, model)
    setattr(api, _POOL_ATTR, (loop, value, pool))
    return pool


__all__ = [
    "PENDING",
    "BatchBackend",
    "BatchCheck",
    "BatchError",
    "BatchOutcome",
    "BatchPool",
    "BatchScope",
    "BatchSettings",
    "BatchState",
    "RecordedRequest",
    "ResumeTable",
    "active_batch_scope",
    "batch_pool",
    "batch_scope",
    "batch_settings",
    "conversation_turn",
    "request_key",
]
