"""``fork(snapshot, n)`` as the public API names it (``orchestrator.util.fork``).

The sandboxes are opened by whoever runs the sample (``orchestrator.eval._fork`` through the active
dispatcher), bound here for the sample's context: the shared layer never reaches for the dispatcher itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

from ._snapshot import Snapshot, SnapshotError

__all__ = ["bind_fork_opener", "fork", "reset_fork_opener"]

ForkOpener = Callable[[Snapshot, int], Any]
_opener: ContextVar[ForkOpener | None] = ContextVar("toolfleet_fork_opener", default=None)


def bind_fork_opener(opener: ForkOpener) -> Token[ForkOpener | None]:
    """What ``fork`` opens sandboxes with in this context (a sample's runner binds it)."""
    return _opener.set(opener)


def reset_fork_opener(token: Token[ForkOpener | None]) -> None:
    _opener.reset(token)


def fork(snapshot: Snapshot, n: int = 1) -> Any:
    """``async with fork(snapshot, n) as sandboxes:`` — ``n`` independent sandboxes opened from ``snapshot``
    on the host holding it, closed when the block ends (see ``orchestrator.eval._fork``)."""
    opener = _opener.get()
    if opener is None:
        raise SnapshotError("fork() opens sandboxes through a running eval: call it from a solver, scorer or tool.")
    return opener(snapshot, n)
