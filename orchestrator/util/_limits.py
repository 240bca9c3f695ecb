"""Limits on a sample or an agent run: messages, tokens, turns, time and working time.

A limit is inert configuration until it is entered (``with message_limit(10): ...`` or
``apply_limits([...])``); entering pushes it on a per-context stack so that checks made anywhere
below (the react loop, a nested agent) see every limit that encloses them. A breach raises
``LimitExceededError`` with ``source`` set to the limit, so ``apply_limits(catch_errors=True)``
can tell its own limits' breaches (returned to the caller) from an enclosing scope's (re-raised).

How each kind is measured:

- ``message_limit(n)``: the length of the conversation. Agent and task states hold their messages
  in a list that checks every append (more than ``n`` is a breach) and ``Model.generate`` refuses
  an input of ``n`` messages or more (its answer could only exceed the limit). Only the innermost
  message limit is checked: each nested agent has a conversation of its own.
- ``token_limit(n)``: tokens recorded in the usage scope that was current when the limit was
  entered, nested runs' tokens included (they roll up as child figures as they happen). Enter a
  sample-level token limit *inside* the sample's ``usage_scope``. ``Model.generate`` refuses a
  request once a token limit is reached and checks again when the answer's usage is recorded.
- ``turn_limit(n)``: ``Model.generate`` calls completed while the limit is active (nested agents'
  turns included); the ``n + 1``-th is a breach, raised after it returns (``record_turn``).
- ``time_limit(s)``: wall-clock seconds. Enforced by a timer that cancels the task that entered the
  limit (the cancellation becomes the ``LimitExceededError`` on exit, as ``asyncio.timeout`` does),
  so a call stuck in a tool or a model request is interrupted, not just noticed later.
- ``working_limit(s)``: wall-clock seconds minus the sample's waits (``_working``: a model connection
  slot, rate-limit backoff and retried attempts, ``suspend_working_limit()`` blocks,
  ``record_waiting_time``). Enforced by a timer as the time limit is, and at checkpoints.

As in Inspect, a limit object may be entered once only (``RuntimeError`` on a second ``with``,
even after the first has ended): deep-copy it per use (a copy is fresh and inactive). Token limits
also meter ``type="output"`` tokens or a formula over ``input``/``output`` (``token_limit("output:1m")``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from ._limit_errors import LimitExceededError, LimitType
from ._timers import call_later
from ._token_metering import (
    LimitTokens,
    NoUsage,
    TokenLimit as TokenLimitSpec,
    TokenMetering,
    current_limit_tokens,
    parse_token_limit,
)
from ._working import (
    WorkingClock,
    bind_working_clock,
    report_waiting,
    reset_working_clock,
    sample_waiting,
    working_clock,
)

REUSE_MESSAGE = ("Each Limit may only be used once in a single 'with' block. Please create a new instance "
                 "of the Limit.")


class Limit:
    """Base class: a bound of one kind. Entering it makes it active for the enclosed code."""

    type: LimitType = "custom"

    def __init__(self, limit: float | int | None) -> None:
        self._validate(limit)
        self.limit = limit
        self._token: Token[tuple[Limit, ...]] | None = None
        self._entered = False

    def _validate(self, limit: float | int | None) -> None:
        if limit is not None and limit < 0:
            number = "float" if self.type in ("time", "working") else "integer"  # Inspect's wording
            raise ValueError(f"{self.type.capitalize()} limit value must be a non-negative {number} or None: {limit}")

    # -- activation ------------------------------------------------------------------------
    def __enter__(self) -> Limit:
        if self._entered:
            raise RuntimeError(REUSE_MESSAGE)
        self._entered = True
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

    @property
    def remaining(self) -> float | int | None:
        """What is left of the limit (None when unlimited)."""
        return None if self.limit is None else self.limit - self.usage

    def check(self, raise_for_equal: bool = False) -> None:
        """Raise ``LimitExceededError`` if the limit is exceeded (or, with ``raise_for_equal``, reached)."""
        if self.limit is None:
            return
        usage = self.usage
        if usage > self.limit or (raise_for_equal and usage == self.limit):
            raise self.error(usage)

    def error(self, value: float | int) -> LimitExceededError:
        status = "reached" if value == self.limit else "exceeded"
        return LimitExceededError(self.type, value=value, limit=self.limit, source=self,
                                  message=f"{self.type.capitalize()} limit {status}. value: {value:,}; limit: "
                                          f"{self.limit:,}")

    def __deepcopy__(self, memo: dict[int, Any]) -> Limit:
        # A copy is a fresh, inactive limit with the same bound (baselines and timers are not copied).
        return type(self)(self.limit)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.limit!r})"


_active: ContextVar[tuple[Limit, ...]] = ContextVar("toolfleet_limits", default=())
_suspended_turns: ContextVar[int] = ContextVar("toolfleet_turns_suspended", default=0)
_suspended_tokens: ContextVar[int] = ContextVar("toolfleet_tokens_suspended", default=0)


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
        """The last conversation length checked against this limit (Inspect raises here instead)."""
        return self._last

    def check(self, count: int | None = None, raise_for_equal: bool = False) -> None:  # type: ignore[override]  # Inspect's signature
        """Inspect's form: check a conversation of ``count`` messages (default: the last one checked)."""
        self.check_count(self._last if count is None else count, raise_for_equal)

    def check_count(self, count: int, raise_for_equal: bool = False) -> None:
        self._last = count
        if self.limit is not None and (count > self.limit or (raise_for_equal and count == self.limit)):
            status = "reached" if count == self.limit else "exceeded"
            raise LimitExceededError("message", value=count, limit=self.limit, source=self,
                                     message=f"Message limit {status}. count: {count:,}; limit: {self.limit:,}")


class TokenLimit(Limit):
    """Tokens used while active. ``type="all"`` reads the usage counters (nested runs included);
    other types meter each model call's usage as ``Model.generate`` records it."""

    type: LimitType = "token"

    def __init__(self, limit: int | None, type: str = "all") -> None:
        super().__init__(limit)
        self._metering = TokenMetering(type)
        self.metering = type
        self._counter: LimitTokens | None = None  # the usage scope's, bound by orchestrator.model
        self._baseline = 0
        self._suspended = 0  # total tokens recorded while suspended (discounted from "all")
        self._usage: Any = None  # usage metered directly (types other than "all")

    def _start(self) -> None:
        self._counter = current_limit_tokens()
        self._baseline = self._counter.count
        self._usage = NoUsage()

    def record(self, usage: Any) -> None:
        """One model call's usage (called by ``Model.generate`` for every active token limit)."""
        if _suspended_tokens.get():
            self._suspended += usage.total_tokens
        elif self._usage is not None:
            self._usage = self._usage + usage

    @property
    def usage(self) -> int:
        if self._counter is None:
            return 0
        if self.metering == "all":
            return self._counter.count - self._baseline - self._suspended
        return self._metering.value(self._usage)

    def check(self, raise_for_equal: bool = False) -> None:
        if _suspended_tokens.get():
            return
        super().check(raise_for_equal)

    def error(self, value: float | int) -> LimitExceededError:
        status = "reached" if value == self.limit else "exceeded"
        label = {"all": f"Token limit {status}", "output": f"Output token limit {status}"}.get(
            self.metering, f"Token limit {status} ({self.metering})")
        return LimitExceededError("token", value=value, limit=self.limit, source=self,
                                  message=f"{label}. value: {value:,}; limit: {self.limit:,}")

    def __deepcopy__(self, memo: dict[int, Any]) -> TokenLimit:
        return TokenLimit(self.limit, self.metering)  # type: ignore[arg-type]  # a copy of a valid limit


class TurnLimit(Limit):
    type: LimitType = "turn"

    def __init__(self, limit: int | None) -> None:
        super().__init__(limit)
        self.turns = 0

    @property
    def usage(self) -> int:
        return self.turns


class _CancellingLimit(Limit):
    """A limit a timer enforces: it cancels the task that entered the block once the limit could be
    passed, and the cancellation becomes the breach on exit. Checkpoints (``check_limits``) check it
    too. Subclasses say when to check (``_arm``) and what counts as usage (``_elapsed``)."""

    def __init__(self, limit: float | None) -> None:
        super().__init__(limit)
        self._started: float | None = None
        self._ended: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelling = 0

    def _start(self) -> None:
        self._started = time.monotonic()
        self._bind()
        if self.limit is None:
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: checkpoints still enforce it
            task = None
        if task is not None:
            self._task = task
            self._cancelling = task.cancelling()
            self._arm()

    def _bind(self) -> None:
        """What the block needs bound while it runs (released in ``_unbind``)."""

    def _unbind(self) -> None:
        """Release what ``_bind`` bound."""

    def _arm(self) -> None:
        raise NotImplementedError

    def _breach(self) -> None:
        self._fired = True
        assert self._task is not None
        self._task.cancel(f"{self.type} limit of {self.limit} seconds")

    def _stop(self, exc: BaseException | None) -> bool | None:
        self._ended = time.monotonic()  # usage is frozen from here on
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._unbind()
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
        if self._started is None:
            return 0.0
        end = self._ended if self._ended is not None else time.monotonic()
        return self._elapsed(self._started, end)

    def _elapsed(self, start: float, end: float) -> float:
        return end - start


class TimeLimit(_CancellingLimit):
    type: LimitType = "time"

    def _arm(self) -> None:
        assert self.limit is not None
        self._handle = call_later(self.limit, self._fire)

    def _fire(self) -> None:
        if self._task is not None and not self._task.done():
            self._breach()

    def error(self, value: float | int) -> LimitExceededError:
        return LimitExceededError("time", value=value, limit=self.limit, source=self,
                                  message=f"Time limit exceeded. limit: {self.limit} seconds")


WORKING_CHECK_GRACE_S = 1.0


class WorkingLimit(_CancellingLimit):
    """Wall-clock seconds minus the sample's waits (``_working``), enforced as ``time_limit`` is, but
    checked up to ``WORKING_CHECK_GRACE_S`` late and re-armed while waits stretch it."""

    type: LimitType = "working"

    def __init__(self, limit: float | None) -> None:
        super().__init__(limit)
        self._clock: WorkingClock | None = None
        self._clock_token: Token[WorkingClock | None] | None = None

    def _bind(self) -> None:
        self._clock = working_clock()
        if self._clock is None:  # outside a sample: this limit keeps the clock its block's waits go to
            self._clock_token = bind_working_clock()
            self._clock = working_clock()

    def _unbind(self) -> None:
        if self._clock_token is not None:
            reset_working_clock(self._clock_token)
            self._clock_token = None

    def _arm(self) -> None:
        assert self.limit is not None
        # Check once working time could have passed the limit, plus a grace for waits reported after the
        # fact (a failed attempt, ``record_waiting_time``), as Inspect's once-a-second monitor allows.
        delay = max(0.0, self.limit - self.usage) + WORKING_CHECK_GRACE_S
        self._handle = call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._task is None or self._task.done() or self.limit is None:
            return
        if self.usage > self.limit:
            self._breach()
        else:
            self._arm()  # waits stretched it: check again when it could next be passed

    def error(self, value: float | int) -> LimitExceededError:
        return LimitExceededError("working", value=value, limit=self.limit, source=self,
                                  message=f"Working time limit exceeded. limit: {self.limit} seconds")

    def _elapsed(self, start: float, end: float) -> float:
        waited = self._clock.waiting(start, end) if self._clock is not None else 0.0
        return max(0.0, end - start - waited)


def message_limit(limit: int | None) -> MessageLimit:
    """At most ``limit`` messages in the conversation (None: unlimited)."""
    return MessageLimit(limit)


def token_limit(limit: int | str | TokenLimitSpec | None, type: str = "all") -> TokenLimit:
    """At most ``limit`` tokens while active, nested runs included.

    ``limit`` may be an int, a ``TokenLimit`` spec or a string (``"500k"``, ``"output:1m"``);
    ``type`` is ``"all"``, ``"output"`` or a formula over ``input``/``output``.
    """
    if isinstance(limit, str):
        limit = parse_token_limit(limit)
    if isinstance(limit, TokenLimitSpec):
        if type != "all":
            raise ValueError("Pass 'type' via either TokenLimit or the 'type' parameter, not both.")
        return TokenLimit(limit.tokens, limit.type)
    return TokenLimit(limit, type)


def turn_limit(limit: int | None) -> TurnLimit:
    """At most ``limit`` model turns (``Model.generate`` calls, nested agents included)."""
    return TurnLimit(limit)


def time_limit(limit: float | None) -> TimeLimit:
    """At most ``limit`` seconds of wall-clock time."""
    return TimeLimit(limit)


def working_limit(limit: float | None) -> WorkingLimit:
    """At most ``limit`` seconds of working time (wall clock minus reported waiting)."""
    return WorkingLimit(limit)


# -- checkpoints -----------------------------------------------------------------------------------


def check_message_limit(count: int, raise_for_equal: bool = False) -> None:
    """The conversation holds ``count`` messages: raise if the innermost message limit is exceeded
    (or reached, with ``raise_for_equal``). Outer message limits belong to other conversations."""
    limit = next((lim for lim in reversed(_active.get()) if isinstance(lim, MessageLimit)), None)
    if limit is not None:
        limit.check_count(count, raise_for_equal)


def record_turn() -> None:
    """A model turn completed: count it on every active turn limit, raise if one is exceeded."""
    if _suspended_turns.get():
        return
    turn_limits = [lim for lim in _active.get() if isinstance(lim, TurnLimit)]
    for limit in turn_limits:
        limit.turns += 1
    for limit in turn_limits:  # outermost first, as Inspect checks
        limit.check()


def record_token_usage(usage: Any) -> None:
    """A model call's usage, for token limits that meter more than the total."""
    for limit in _active.get():
        if isinstance(limit, TokenLimit):
            limit.record(usage)


def check_token_limit(raise_for_equal: bool = False) -> None:
    """Check every active token limit (outermost first)."""
    for limit in _active.get():
        if isinstance(limit, TokenLimit):
            limit.check(raise_for_equal)


def record_waiting_time(seconds: float) -> None:
    """The last ``seconds`` were spent waiting (not working); working limits do not count them."""
    report_waiting(seconds)


def suspend_working_limit() -> contextlib.AbstractContextManager[None]:
    """Time spent in the block is waiting, not working (as Inspect's: e.g. waiting on a person)."""
    return sample_waiting()


def check_limits() -> None:
    """Check every active token, time and working limit (outermost first)."""
    for limit in _active.get():
        if isinstance(limit, (TokenLimit, TimeLimit, WorkingLimit)):
            limit.check()


@contextlib.contextmanager
def _suspend(var: ContextVar[int]) -> Iterator[None]:
    token = var.set(var.get() + 1)
    try:
        yield
    finally:
        var.reset(token)


def suspend_turn_limit() -> contextlib.AbstractContextManager[None]:
    """Model calls in the block count toward no turn limit (auxiliary generations)."""
    return _suspend(_suspended_turns)


def suspend_token_limit() -> contextlib.AbstractContextManager[None]:
    """Tokens used in the block count toward no token limit, and token checks are skipped."""
    return _suspend(_suspended_tokens)


# -- sample_limits ---------------------------------------------------------------------------------


@dataclass
class SampleLimits:
    """The top-level (outermost) limits of the running sample; an unlimited stand-in where none is set."""

    token: Limit
    message: Limit
    turn: Limit
    working: Limit
    time: Limit
    cost: Limit


def sample_limits() -> SampleLimits:
    """The outermost active limit of each kind (what the sample runner entered)."""
    active = _active.get()
    if not active:
        raise RuntimeError("No limits are active. Is there a running sample?")

    def root(kind: type[Limit]) -> Limit:
        return next((lim for lim in active if isinstance(lim, kind)), None) or kind(None)

    return SampleLimits(token=root(TokenLimit), message=root(MessageLimit), turn=root(TurnLimit),
                        working=root(WorkingLimit), time=root(TimeLimit), cost=Limit(None))


# -- apply_limits ----------------------------------------------------------------------------------


class LimitScope:
    """What ``apply_limits`` yields: after the block, the breach of one of its own limits (if any)."""

    def __init__(self, limits: Sequence[Limit]) -> None:
        self.limits = list(limits)
        self.limit_error: LimitExceededError | None = None


@contextlib.contextmanager
def apply_limits(limits: Sequence[Limit], catch_errors: bool = False) -> Iterator[LimitScope]:
    """Activate ``limits`` for the block.

    A breach of one of *these* limits is left on ``scope.limit_error`` (and, with
    ``catch_errors``, ends the block quietly); a breach of an enclosing scope's limit always
    propagates.
    """
    scope = LimitScope(limits)
    try:
        with contextlib.ExitStack() as stack:
            for limit in limits:
                stack.enter_context(limit)
            yield scope
    except LimitExceededError as exc:
        if not any(exc.source is limit for limit in limits):
            raise
        scope.limit_error = exc
        if not catch_errors:
            raise
