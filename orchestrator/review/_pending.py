"""Reviews in flight, and how they end when something cancels them.

Each review in flight has a ``PendingReview`` handle, so an operator (a UI, a console command,
another thread) can cancel *that call* while its review is pending:

- cancelled by the operator (``PendingReview.cancel`` / ``cancel_review``): the sample stops as an
  operator limit (``TerminateSampleError``); the call's result stays in the transcript (its
  ``ToolEvent`` was recorded before review began); an ``InfoEvent`` says the review was cancelled;
  no ``ReviewEvent`` is recorded.
- cancelled because the sample stopped for another reason (a sibling's fatal error or
  ``terminate``, a time limit, the runner cancelling the sample): the review is cancelled, the
  result is kept, an ``InfoEvent`` says so, and the cancellation propagates unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from dataclasses import dataclass, field

from orchestrator.log._events import InfoEvent
from orchestrator.log._transcript import transcript
from orchestrator.tool._tool_call import ToolCall
from orchestrator.util._limit_errors import TerminateSampleError

from ._review import Review


@dataclass(eq=False)
class PendingReview:
    """A review waiting for its decision. ``cancel()`` is safe to call from any thread."""

    call: ToolCall
    sample_id: str | None
    _task: asyncio.Task[object] = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    reason: str | None = None
    cancelled_by_operator: bool = False
    done: bool = False

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the call under review: the sample stops as an operator limit, the result is kept."""
        if _in_loop(self._loop):
            self._cancel(reason)
        else:
            self._loop.call_soon_threadsafe(self._cancel, reason)

    def _cancel(self, reason: str | None) -> None:
        # Runs on the loop, so ``done`` cannot change under us: a review that already finished is
        # left alone (cancelling then would hit whatever the task is doing next).
        if self.done or self.cancelled_by_operator:
            return
        self.cancelled_by_operator = True
        self.reason = reason
        self._task.cancel()


_pending: list[PendingReview] = []
_pending_lock = threading.Lock()  # cancel_review may be called from an operator thread


def pending_reviews(sample_id: str | None = None) -> list[PendingReview]:
    """Reviews waiting for a decision (optionally only one sample's)."""
    with _pending_lock:
        return [p for p in _pending if sample_id is None or p.sample_id == sample_id]


def cancel_review(call_id: str, sample_id: str | None = None, reason: str | None = None) -> bool:
    """Cancel the call ``call_id`` whose review is pending; False when no such review is pending."""
    found = [p for p in pending_reviews(sample_id) if p.call.id == call_id]
    for p in found:
        p.cancel(reason)
    return bool(found)


async def run_pending(call: ToolCall, sample_id: str | None, review: Awaitable[Review]) -> Review:
    """Await ``review`` as a cancellable pending review of ``call`` (see the module docstring).

    No task of its own: an operator cancel cancels the awaiting task and is told apart from any
    other cancellation the way ``asyncio.timeout`` does it (our flag, then ``uncancel``).
    """
    task = asyncio.current_task()
    assert task is not None, "run_pending must run inside a task"
    handle = PendingReview(call=call, sample_id=sample_id, _task=task, _loop=asyncio.get_running_loop())
    with _pending_lock:
        _pending.append(handle)
    try:
        return await review
    except asyncio.CancelledError:
        if handle.cancelled_by_operator and task.uncancel() == 0:
            message = (f"Tool call {call.function} ({call.id}) was cancelled while its review was pending; "
                       "the result is kept.")
            if handle.reason:
                message += f" Reason: {handle.reason}"
            _info(call, message, "operator")
            raise TerminateSampleError(message) from None
        _info(call, f"Review of tool call {call.function} ({call.id}) was cancelled because the sample stopped; "
                    "the result is kept.", "sample_stopped")
        raise
    finally:
        handle.done = True
        with _pending_lock:
            _pending.remove(handle)


def _info(call: ToolCall, message: str, cause: str) -> None:
    transcript().record(InfoEvent(source="review", data={
        "message": message, "call_id": call.id, "function": call.function, "cancelled_by": cause,
    }))


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
