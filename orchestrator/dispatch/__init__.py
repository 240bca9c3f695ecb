"""Dispatchers: the seam between stage planning and execution."""

from typing import Any

from ._context import (
    active_dispatcher,
    current_route,
    reset_active_dispatcher,
    reset_route,
    set_active_dispatcher,
    set_route,
)
from ._dispatcher import (
    Dispatch,
    Dispatcher,
    SampleRoute,
)
from .inprocess import InProcessDispatcher

__all__ = [
    "CeleryDispatcher",
    "CeleryDispatcherConfig",
    "Dispatch",
    "Dispatcher",
    "InProcessDispatcher",
    "SampleRoute",
    "active_dispatcher",
    "current_route",
    "reset_active_dispatcher",
    "reset_route",
    "set_active_dispatcher",
    "set_route",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing Celery costs ~0.2 s, and embedded mode never needs it.
    if name in ("CeleryDispatcher", "CeleryDispatcherConfig"):
        from . import celery as _celery

        return getattr(_celery, name)
    raise AttributeError(f"module 'orchestrator.dispatch' has no attribute {name!r}")
