"""Dispatchers: the seam between stage planning and execution."""

from ._dispatcher import (
    Dispatch,
    Dispatcher,
    SampleRoute,
    active_dispatcher,
    current_route,
    reset_active_dispatcher,
    reset_route,
    set_active_dispatcher,
    set_route,
)
from .inprocess import InProcessDispatcher

__all__ = [
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
