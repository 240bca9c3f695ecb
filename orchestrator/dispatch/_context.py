"""What the running sample's context carries for dispatch: its route and the active dispatcher.

Apart from ``_dispatcher`` (the seam) so the seam never names an implementation: the default
dispatcher (embedded mode) is chosen here, above both.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ._dispatcher import Dispatcher, SampleRoute

__all__ = ["active_dispatcher", "current_route", "reset_active_dispatcher", "reset_route", "set_active_dispatcher",
           "set_route"]

_NO_ROUTE = SampleRoute()
_route: ContextVar[SampleRoute] = ContextVar("toolfleet_route", default=_NO_ROUTE)


def current_route() -> SampleRoute:
    return _route.get()


def set_route(route: SampleRoute) -> Any:
    return _route.set(route)


def reset_route(token: Any) -> None:
    _route.reset(token)


_active: ContextVar[Dispatcher | None] = ContextVar("toolfleet_dispatcher", default=None)


def active_dispatcher() -> Dispatcher:
    dispatcher = _active.get()
    if dispatcher is None:
        return _default_dispatcher()
    return dispatcher


def _default_dispatcher() -> Dispatcher:
    from .inprocess import InProcessDispatcher  # deferred: embedded mode's executor loads only when used

    return InProcessDispatcher.default()


def set_active_dispatcher(dispatcher: Dispatcher | None) -> Any:
    """Bind a dispatcher for the current context (returns a token for ``reset_active_dispatcher``)."""
    return _active.set(dispatcher)


def reset_active_dispatcher(token: Any) -> None:
    _active.reset(token)
