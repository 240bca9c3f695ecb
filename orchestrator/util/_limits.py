"""Limits on a sample or an agent run: messages, tokens, turns, time and working time.

A limit is inert configuration until it is entered (``with message_limit(10): ...`` or
``apply_limits([...])``); entering pushes it on a per-context stack so that checks made anywhere
below (the react loop, a nested agent) see every limit that encloses them. A breach raises
``LimitExceededError`` with ``source`` set to the limit, so ``apply_limits(catch_errors=True)``
can tell its own limits' breaches (returned to the caller) from an enclosing scope's (re-raised).

How each kind is measured:

- ``message_limit(n)``: the length of the conversation being appended to, checked by the agent
  loop after each append (``check_message_limit``); more than ``n`` messages is a breach.
- ``token_limit(n)``: tokens recorded in the usage scope that was current when the limit was
  entered, nested runs' tokens included (they roll up as child figures as they happen). Enter a
  sample-level token limit *inside* the sample's ``usage_scope``.
- ``turn_limit(n)``: model turns taken by agent loops while the limit is active (nested agents'
  turns included); the ``n + 1``-th turn is a breach (``record_turn``).
- ``time_limit(s)``: wall-clock seconds. Enforced by a timer that cancels the task that entered the
  limit (the cancellation becomes the ``LimitExceededError`` on exit, as ``asyncio.timeout`` does),
  so a call stuck in a tool or a model request is interrupted, not just noticed later.
- ``working_limit(s)``: wall-clock seconds minus time reported as waiting (``record_waiting_time``:
  queues, rate-limit backoff, sandbox start-up). Checked at checkpoints (``check_limits``).

Limits are objects with state once entered; a limit applied more than once (e.g. a handoff taken
twice) should be deep-copied per use, which is cheap before entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar, Token
from typing import Any

from ._limit import LimitExceededError, LimitType, _fmt


class Limit:
    """Base class: a bound of one kind. Entering it makes it active for the enclosed code."""

    type: LimitType = "custom"

    def __init__(self, limit: float | int | None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"A {self.type} limit cannot be negative (got {limit}).")
        self.limit = limit
        self._token: Token[tuple[Limit, ...]] | None = None

    # -- activation ------------------------------------------------------------------------
    def __enter__(self) -> "Limit":
        if self._token is not None:
            raise RuntimeError(f"This {self.type} limit is already active; deep-copy a limit to apply it twice.")
        self._start()
        self._token = _active.set((*_active.get(), self))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool | None:
        if self._token is not None:
            _active.reset(self._token)
            self._token = None
        return self._stop(exc)

    def _start(self) -> None:
        """Take the baseline this limit measures from."""

    def _stop(self, exc: BaseException | None) -> bool | None:
        """Release resources; may translate ``exc`` (the time limit turns its cancellation into a breach)."""
        return None

    # -- measurement -----------------------------------------------------------------------
    @property
    def usage(self) -> float | int:
        """How much of the limit has been used so far."""
        return 0

    def check(self) -> None:
        """Raise ``LimitExceededError`` if the limit is breached."""
        if self.limit is not None and self.usage > self.limit:
            raise self.error(self.usage)

    def error(self, value: float | int) -> LimitExceededError:
        return LimitExceededError(
            self.type, value=value, limit=self.limit, source=self,
            message=f"{self.type.capitalize()} limit exceeded: {_fmt(value)} (limit {_fmt(self.limit)}).",
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> "Limit":
        # A copy is a fresh, inactive limit with the same bound (baselines and timers are not copied).
        return type(self)(self.limit)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.limit!r})"


_active: ContextVar[tuple[Limit, ...]] = ContextVar("toolfleet_limits", default=())


def active_limits() -> tuple[Limit, ...]:
    """The limits enclosing the current code, outermost first."""
    return _active.get()


# -- the kinds -------------------------------------------------------------------------------------


class MessageLimit(Limit):
    type: LimitType = "message"

    def __init__(self, limit: int | None) -> None:
        super().__init__(limit)
        self._last = 0

    @property
    def usage(self) -> int:
        return self._last

    def check_count(self, count: int) -> None:
        self._last = count
        self.check()


class TokenLimit(Limit):
    type: LimitType = "token"

    def __init__(self, limit: int | None) -> None:
        super().__init__(limit)
        self._counter: Any = None
        self._baseline = 0

    def _start(self) -> None:
        from orchestrator.model._usage import current_usage  # lazy: util must not import model at load

        self._counter = current_usage()
        self._baseline = self._counter.limit_tokens

    @property
    def usage(self) -> int:
        return 0 if self._counter is None else self._counter.limit_tokens - self._baseline


class TurnLimit(Limit):
    type: LimitType = "turn"

    def __init__(self, limit: int | None) -> None:
        super().__init__(limit)
        self.turns = 0

    @property
    def usage(self) -> int:
        return self.turns


class TimeLimit(Limit):
    type: LimitType = "time"

    def __init__(self, limit: float | None) -> None:
        super().__init__(limit)
        self._started: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelling = 0

    def _start(self) -> None:
        self._started = time.monotonic()
        if self.limit is None:
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: checkpoints still enforce it
            task = None
        if task is not None:
            self._task = task
            self._cancelling = task.cancelling()
            self._handle = asyncio.get_running_loop().call_later(self.limit, self._fire)

    def _fire(self) -> None:
        if self._task is not None and not self._task.done():
            self._fired = True
            self._task.cancel(f"time limit of {_fmt(self.limit)} seconds")

    def _stop(self, exc: BaseException | None) -> bool | None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        fired, task = self._fired, self._task
        self._task, self._fired = None, False
        if fired and task is not None:
            # Withdraw our cancel request whatever happened (as asyncio.timeout does); if it is what
            # ended the block (and no outer cancel is pending), it becomes the breach.
            remaining = task.uncancel()
            if isinstance(exc, asyncio.CancelledError) and remaining <= self._cancelling:
                raise self.error(self.usage) from exc
        return None

    @property
    def usage(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started


class WorkingLimit(Limit):
    type: LimitType = "working"

    def __init__(self, limit: float | None) -> None:
        super().__init__(limit)
        self._started: float | None = None
        self.waiting = 0.0

    def _start(self) -> None:
        self._started = time.monotonic()

    @property
    def usage(self) -> float:
        return 0.0 if self._started is None else max(0.0, time.monotonic() - self._started - self.waiting)


def message_limit(limit: int | None) -> MessageLimit:
    """At most ``limit`` messages in the conversation (None: unlimited)."""
    return MessageLimit(limit)


def token_limit(limit: int | None) -> TokenLimit:
    """At most ``limit`` tokens (input + output, nested runs included) while active."""
    return TokenLimit(limit)


def turn_limit(limit: int | None) -> TurnLimit:
    """At most ``limit`` model turns (generations by agent loops, nested agents included)."""
    return TurnLimit(limit)


def time_limit(limit: float | None) -> TimeLimit:
    """At most ``limit`` seconds of wall-clock time."""
    return TimeLimit(limit)


def working_limit(limit: float | None) -> WorkingLimit:
    """At most ``limit`` seconds of working time (wall clock minus reported waiting)."""
    return WorkingLimit(limit)


# -- checkpoints (called by agent loops) -----------------------------------------------------------


def check_message_limit(count: int) -> None:
    """The conversation now holds ``count`` messages: raise if an active message limit is exceeded."""
    for limit in _active.get():
        if isinstance(limit, MessageLimit):
            limit.check_count(count)


def record_turn() -> None:
    """An agent loop is about to take a model turn: count it, raise if a turn limit is exceeded."""
    for limit in _active.get():
        if isinstance(limit, TurnLimit):
            limit.turns += 1
            limit.check()


def record_waiting_time(seconds: float) -> None:
    """Time spent waiting (not working) in the current context; subtracted by working limits."""
    for limit in _active.get():
        if isinstance(limit, WorkingLimit):
            limit.waiting += seconds


def check_limits() -> None:
    """Check every active token, time and working limit (outermost first)."""
    for limit in _active.get():
        if isinstance(limit, (TokenLimit, TimeLimit, WorkingLimit)):
            limit.check()


# -- apply_limits ----------------------------------------------------------------------------------


class LimitScope:
    """What ``apply_limits`` yields: after the block, the breach of one of its own limits (if caught)."""

    def __init__(self, limits: Sequence[Limit]) -> None:
        self.limits = list(limits)
        self.limit_error: LimitExceededError | None = None


@contextlib.contextmanager
def apply_limits(limits: Sequence[Limit], catch_errors: bool = False) -> Iterator[LimitScope]:
    """Activate ``limits`` for the block.

    With ``catch_errors`` a breach of one of *these* limits ends the block quietly and is left on
    ``scope.limit_error``; a breach of an enclosing scope's limit always propagates.
    """
    scope = LimitScope(limits)
    try:
        with contextlib.ExitStack() as stack:
            for limit in limits:
                stack.enter_context(limit)
            yield scope
    except LimitExceededError as exc:
        if catch_errors and any(exc.source is limit for limit in limits):
            scope.limit_error = exc
        else:
            raise
