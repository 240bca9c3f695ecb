"""Which sample is running, readable below the solver layer.

The sample runner binds the running sample's ``TaskState`` here (through
``orchestrator.solver``'s ``bind_sample_state``). Packages below the solver read its id and epoch
from here: an approval prompt names the sample asking, a batched model request is keyed by it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol


class RunningSample(Protocol):
    """What code below the solver may read of the running sample (a ``TaskState`` in practice)."""

    sample_id: int | str
    epoch: int


_running: ContextVar[RunningSample | None] = ContextVar("toolfleet_sample_state", default=None)


def running_sample() -> RunningSample | None:
    """The running sample's state (None outside a sample)."""
    return _running.get()


@contextlib.contextmanager
def bind_running_sample(state: RunningSample) -> Iterator[None]:
    token = _running.set(state)
    try:
        yield
    finally:
        _running.reset(token)
