"""Timers that keep nothing of the sample that armed them (orchestrator/util/_timers.py): a cancelled
deadline stays in the loop's heap until the loop sweeps it, so one that held the sample's context
kept a finished sample's state alive, and thousands were then freed in one long loop iteration."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import pytest

from orchestrator.log import Transcript, bind_transcript
from orchestrator.model import ChatMessageAssistant, ChatMessageUser, ModelOutput, execute_tools, get_model
from orchestrator.tool import ToolCall, tool
from orchestrator.util import time_limit
from orchestrator.util._timers import LongDeadlines, arm, call_later

_state: ContextVar[object] = ContextVar("_state")


class _SampleState:
    """Stands for what a sample's context holds (its transcript, its usage scope)."""


async def _state_after(body: Callable[[], Awaitable[Any]]) -> weakref.ref[_SampleState]:
    """Run ``body`` in a task of its own, as a sample runs, with state bound in its context; a weak
    reference to that state once the task has finished and the collector has run."""

    async def sample() -> weakref.ref[_SampleState]:
        state = _SampleState()
        _state.set(state)
        await body()
        return weakref.ref(state)

    # A live timer due first keeps the cancelled ones in the loop's heap, as thousands of samples'
    # model waits do (the loop only drops cancelled timers at the heap's head, or in a sweep).
    keeper = asyncio.get_running_loop().call_later(600, lambda: None)
    try:
        ref = await asyncio.create_task(sample())
        await asyncio.sleep(0)  # the step that resumed us still holds the finished task
        gc.collect()
        assert any(h.cancelled() for h in asyncio.get_running_loop()._scheduled)  # still there, holding nothing
    finally:
        keeper.cancel()
    return ref


async def test_an_armed_deadline_fires_and_once_cancelled_holds_nothing() -> None:
    with pytest.raises(TimeoutError):  # noqa: PT012 - arming and waiting are the one act under test
        async with asyncio.timeout(None) as scope:
            arm(scope, 0.01)
            await asyncio.sleep(5)

    async def far_deadline() -> None:
        async with asyncio.timeout(None) as scope:
            arm(scope, 3600)
            await asyncio.sleep(0)
        assert scope.when() is not None and not scope.expired()

    assert (await _state_after(far_deadline))() is None


async def test_arm_with_none_sets_no_deadline() -> None:
    async with asyncio.timeout(None) as scope:  # noqa: ASYNC100 - the scope's deadline is what is checked
        arm(scope, None)
        assert scope.when() is None


async def test_call_later_runs_its_callback_in_an_empty_context() -> None:
    seen: list[Any] = []
    fired = asyncio.Event()

    async def body() -> None:
        def callback(tag: str) -> None:
            seen.append((tag, _state.get(None)))
            fired.set()

        call_later(0.01, callback, "fired")
        await asyncio.wait_for(fired.wait(), 5)
        call_later(3600, callback, "never").cancel()

    assert (await _state_after(body))() is None
    assert seen == [("fired", None)]


async def test_the_sample_path_frees_a_finished_samples_transcript() -> None:
    """Through the real path: a tool call's deadline, a model attempt's ceiling and a time limit."""

    @tool(name="timers_noop")
    def noop() -> Any:
        async def execute() -> str:
            """Return ok."""
            return "ok"

        return execute

    model = get_model("scripted", policy=lambda messages, tools: ModelOutput.from_content("scripted", "hi"))
    transcripts: list[weakref.ref[Transcript]] = []

    async def body() -> None:
        transcript = Transcript()
        transcripts.append(weakref.ref(transcript))
        with bind_transcript(transcript), time_limit(3600):
            calls = [ToolCall(id="c1", function="timers_noop", arguments={})]
            result = await execute_tools([ChatMessageUser(content="go"),
                                          ChatMessageAssistant(content="", tool_calls=calls)],
                                         [noop()])
            assert result.messages[0].text == "ok"
            await model.generate("hello")

    await _state_after(body)
    assert transcripts[0]() is None


async def test_long_deadlines_expire_in_order_and_leave_no_timer_behind() -> None:
    deadlines = LongDeadlines(delay=0.1, period=0.02)
    expired: list[int] = []

    async def call(i: int, work: float) -> None:
        try:
            async with asyncio.timeout(None) as scope:
                deadlines.add(scope)
                try:
                    await asyncio.sleep(work)
                finally:
                    deadlines.discard(scope)
        except TimeoutError:
            assert scope.expired()
            expired.append(i)

    # 50 calls that overrun the deadline, started 5 ms apart, and 50 that finish in time.
    async def staggered(i: int) -> None:
        await asyncio.sleep(0.005 * i)
        await call(i, 10.0)

    await asyncio.wait_for(
        asyncio.gather(*(staggered(i) for i in range(50)), *(call(100 + i, 0.01) for i in range(50))), 10)
    assert sorted(expired) == list(range(50))  # every overrun, none of the quick ones
    assert expired == sorted(expired)  # in the order they fell due
    assert len(deadlines) == 0 and not deadlines._check_pending  # nothing left to check, no timer


async def test_one_long_deadlines_per_loop_and_delay() -> None:
    first = LongDeadlines.of_running_loop(3600.0)
    assert LongDeadlines.of_running_loop(3600.0) is first
    assert LongDeadlines.of_running_loop(60.0) is not first


def test_a_closed_loop_takes_its_deadlines_with_it() -> None:
    """A worker or a test may run many loops in turn: their deadlines must not pile up."""

    async def one_call() -> None:
        deadlines = LongDeadlines.of_running_loop(3600.0)
        async with asyncio.timeout(None) as scope:
            deadlines.add(scope)
            await asyncio.sleep(0)
            deadlines.discard(scope)

    before = len(LongDeadlines._by_loop)
    for _ in range(5):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(one_call())  # its check is still pending when the loop closes
        loop.close()
        del loop
    gc.collect()
    assert len(LongDeadlines._by_loop) == before


async def test_a_call_without_a_timeout_of_its_own_gets_the_default_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.executor

    monkeypatch.setattr(workers.executor, "DEFAULT_CALL_DEADLINE", 0.2)

    @tool(name="timers_sleeper")
    def sleeper() -> Any:
        async def execute() -> str:
            """Sleep for a long time."""
            await asyncio.sleep(60)
            return "woke"

        return execute

    calls = [ToolCall(id="c1", function="timers_sleeper", arguments={})]
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(execute_tools(
        [ChatMessageUser(content="go"), ChatMessageAssistant(content="", tool_calls=calls)], [sleeper()]), 30)
    message = result.messages[0]
    assert message.error is not None and message.error.type == "timeout"
    assert "timed out after 0.2 seconds" in message.error.message
    assert asyncio.get_running_loop().time() - started >= 0.2
