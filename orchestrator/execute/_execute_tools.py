"""``execute_tools``: run the last assistant message's tool calls, stage by stage.

Per call, in order: parse errors → lookup → approval → validation (``_prepare``), then the
call itself through the active ``Dispatcher`` (deserialisation and execution happen on the
executing side), then truncation and review (``_finish``). Results are spliced back in the
order the model declared the calls, whatever order they complete in.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from orchestrator._wire import CallOutcome
from orchestrator.approval._policy import active_approval_policy
from orchestrator.dispatch._context import active_dispatcher, current_route
from orchestrator.dispatch._dispatcher import Dispatch
from orchestrator.dispatch.inprocess import InProcessDispatcher
from orchestrator.log._transcript import span
from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant, ChatMessageTool
from orchestrator.model._model_output import ModelOutput
from orchestrator.review._policy import active_review_policy, review_policy_scope
from orchestrator.tool._tool_def import ToolDef, tool_def

from ._finish import FinishContext, cancelled_event, complete_call, finish_unexecuted, keep_result
from ._planner import plan_stages
from ._prepare import HANDOFF_ATTR, Prepared, prepare_call, runs_locally


class ExecuteToolsResult(NamedTuple):
    """What ``execute_tools`` returns; a tuple, so ``messages, output = await execute_tools(...)`` works."""

    messages: list[ChatMessage]
    output: ModelOutput | None = None  # set when a handoff's agent produced one


async def execute_tools(
    messages: Sequence[ChatMessage],
    tools: Sequence[Any],
    max_output: int | None = None,
    approval: list[Any] | None = None,
    review: list[Any] | None = None,
) -> ExecuteToolsResult:
    """Execute the tool calls of the last assistant message and return the messages to append.

    ``approval`` / ``review`` replace the active policies for the duration of this call.
    """
    if not messages or not isinstance(messages[-1], ChatMessageAssistant) or not messages[-1].tool_calls:
        return ExecuteToolsResult([])
    message: ChatMessageAssistant = messages[-1]
    definitions = [tool_def(t) for t in tools]
    enabled = {d.name: d for d in definitions if d.is_enabled_now()}
    review_policy = review if review is not None else active_review_policy()
    with review_policy_scope(review_policy):
        return await _execute(message, list(messages), enabled, max_output,
                              approval if approval is not None else active_approval_policy(), review_policy)


async def _execute(
    message: ChatMessageAssistant,
    history: list[ChatMessage],
    enabled: dict[str, ToolDef],
    max_output: int | None,
    approval: list[Any] | None,
    review: list[Any] | None,
) -> ExecuteToolsResult:
    calls = list(message.tool_calls or [])
    stages = plan_stages(calls, lambda c: (d := enabled.get(c.function)) is not None and d.parallel)
    ctx = FinishContext(message=message, history=history, max_output=max_output, review=review)
    route = current_route()
    results: dict[str, ChatMessageTool] = {}
    extra: dict[str, list[ChatMessage]] = {}  # a handoff's agent messages, spliced after its result
    output: ModelOutput | None = None

    for stage in stages:
        if len(stage) == 1 or approval is None:
            # Without approvers, preparing a call never waits on anyone: no tasks needed.
            prepared = [await prepare_call(c, enabled, message, history, approval, route.sample_id, route.sandbox)
                        for c in stage]
        else:  # approvers may wait (on a model or a person): ask about a stage's calls concurrently
            prepared = list(await asyncio.gather(
                *(prepare_call(c, enabled, message, history, approval, route.sample_id, route.sandbox) for c in stage)))
        runnable: list[Prepared] = []
        for p in prepared:
            if p.runnable:
                runnable.append(p)
            else:
                results[p.call.id] = finish_unexecuted(p)
        handoff = next((p for p in runnable if hasattr(p.tooldef.tool, HANDOFF_ATTR)), None)
        if handoff is not None:
            # A handoff is serial, so it is alone in its stage; later calls still run (as in Inspect).
            with span(name=handoff.call.function, type="tool"):
                handed = await _run_handoff(handoff, message, history, ctx)
                tool_message, extra[handoff.call.id], handoff_output = handed
            results[handoff.call.id] = tool_message
            output = handoff_output or output
            continue
        if runnable:
            for p, tool_message in await _run_stage(runnable, ctx):
                results[p.call.id] = tool_message

    # Splice in declared order; a handoff's agent messages follow its own result.
    ordered: list[ChatMessage] = []
    for c in message.tool_calls or []:
        if c.id in results:
            ordered.append(results[c.id])
            ordered.extend(extra.get(c.id, []))
    return ExecuteToolsResult(messages=ordered, output=output)


@dataclass(eq=False)
class _Track:
    """One dispatched call of a stage: its outcome future, and how far its finishing got."""

    p: Prepared
    future: asyncio.Future[CallOutcome] | None  # None: the call ran inline (one-call stage)
    outcome: CallOutcome | None = None
    message: ChatMessageTool | None = None  # set once its ToolEvent is recorded (review may follow)
    settled: bool = False  # finishing raised (a fatal outcome is recorded before it raises)


# Bound on waiting for cancelled calls to wind down once the stage is being abandoned.
_CANCEL_GRACE_SECONDS = 30.0


async def _finish(track: _Track, ctx: FinishContext) -> ChatMessageTool:
    track.outcome = await track.future  # type: ignore[misc]  # a dispatched track has its future
    with span(name=track.p.call.function, type="tool"):
        return await _complete(track, ctx)


async def _complete(track: _Track, ctx: FinishContext) -> ChatMessageTool:
    try:
        track.message = await complete_call(track.p, track.outcome, ctx)  # type: ignore[arg-type]  # set by the await above
    except asyncio.CancelledError:
        raise
    except BaseException:
        track.settled = True
        raise
    await ctx.review_executed(track.p, track.message, track.outcome.result)  # type: ignore[union-attr]  # both set by now
    return track.message


def _dispatch(p: Prepared) -> Dispatch:
    # In this process the ToolDef itself runs, so an explicit name, description or ToolParams given
    # to ToolDef(...) holds at execution as it does in the schema (Inspect executes the ToolDef).
    if runs_locally(p.tooldef):
        return Dispatch(p.sent, p.tooldef, local=True)  # type: ignore[arg-type]  # a ToolDef: tool_def() takes it as is
    return Dispatch(p.sent, p.tooldef.tool)


async def _run_stage(stage: list[Prepared], ctx: FinishContext) -> list[tuple[Prepared, ChatMessageTool]]:
    if len(stage) == 1:
        # A one-call stage (every serial call) runs inline: no task of its own, no stage bookkeeping.
        p = stage[0]
        dispatcher = InProcessDispatcher.default() if runs_locally(p.tooldef) else active_dispatcher()
        track = _Track(p, None)
        # The call runs inside its tool span, so what it does (a nested agent run) nests under it.
        with span(name=p.call.function, type="tool"):
            try:
                track.outcome = await dispatcher.run_one(_dispatch(p))
                return [(p, await _complete(track, ctx))]
            except BaseException as exc:
                await _abandon([track], [], exc)
                raise

    local = [p for p in stage if runs_locally(p.tooldef)]
    remote = [p for p in stage if not runs_locally(p.tooldef)]
    tracks: list[_Track] = []
    if local:
        in_process = InProcessDispatcher.default()
        for p, fut in zip(local, in_process.dispatch([_dispatch(p) for p in local]), strict=True):
            tracks.append(_Track(p, fut))
    if remote:
        dispatcher = active_dispatcher()
        for p, fut in zip(remote, dispatcher.dispatch([Dispatch(p.sent, p.tooldef.tool) for p in remote]), strict=True):
            tracks.append(_Track(p, fut))

    if not ctx.review:
        # Nothing to review: finish each call in completion order on this task (no task per call).
        return await _finish_in_completion_order(tracks, ctx)

    # Each call is finished (ToolEvent, then review) as soon as it completes, independently of its
    # siblings: reviews of parallel calls run concurrently, and a sibling's fatal error or a
    # ``terminate`` does not wait behind another call's pending review.
    tasks = [asyncio.ensure_future(_finish(t, ctx)) for t in tracks]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in tasks if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]  # not None: filtered above
    except BaseException as exc:
        # Fatal error, terminate, or cancellation: stop calls still running and reviews still pending.
        await _abandon(tracks, tasks, exc)
        raise
    return [(t.p, task.result()) for t, task in zip(tracks, tasks, strict=True)]


async def _as_completed(futures: list[asyncio.Future[CallOutcome]]) -> AsyncIterator[asyncio.Future[CallOutcome]]:
    """Yield futures as they complete: one done-callback each, one wake-up future per wait (O(n))."""
    done: deque[asyncio.Future[CallOutcome]] = deque()
    wake: list[asyncio.Future[None]] = []

    def on_done(future: asyncio.Future[CallOutcome]) -> None:
        done.append(future)
        if wake and not wake[-1].done():
            wake[-1].set_result(None)

    for future in futures:
        future.add_done_callback(on_done)
    loop = asyncio.get_running_loop()
    for _ in futures:
        while not done:
            wake.append(loop.create_future())
            await wake[-1]
        yield done.popleft()


async def _finish_in_completion_order(tracks: list[_Track],
                                      ctx: FinishContext) -> list[tuple[Prepared, ChatMessageTool]]:
    by_future = {t.future: t for t in tracks}
    try:
        async for future in _as_completed(list(by_future)):  # type: ignore[arg-type]  # tracks with futures only
            track = by_future[future]
            track.outcome = future.result()
            with span(name=track.p.call.function, type="tool"):
                await _complete(track, ctx)
    except BaseException as exc:
        await _abandon(tracks, [], exc)
        raise
    return [(t.p, t.message) for t in tracks]  # type: ignore[misc]  # every track finished


async def _abandon(tracks: list[_Track], tasks: Sequence[asyncio.Future[ChatMessageTool]],
                   cause: BaseException) -> None:
    """Cancel unfinished calls and reviews; executed results stay on record, the rest become ``cancelled``."""
    futures = [t.future for t in tracks if t.future is not None]
    for task in tasks:
        task.cancel()
    for future in futures:
        future.cancel()
    if tasks or futures:
        waits: list[asyncio.Future[Any]] = [*tasks, *futures]
        await asyncio.wait(waits, timeout=_CANCEL_GRACE_SECONDS)
    for task in tasks:  # siblings' own errors are superseded by ``cause``; retrieve them so none is "unretrieved"
        if task.done() and not task.cancelled():
            task.exception()
    for track in tracks:
        if track.message is not None or track.settled:
            continue  # ToolEvent recorded; a pending review was cancelled (and said so)
        outcome = track.outcome
        pending = track.future
        if outcome is None and pending is not None and pending.done() and not pending.cancelled() \
                and pending.exception() is None:
            outcome = pending.result()
        if outcome is not None:
            keep_result(track.p, outcome)  # executed, but the sample stopped before it was processed
        else:
            cancelled_event(track.p, cause)


async def _run_handoff(
    p: Prepared, message: ChatMessageAssistant, history: list[ChatMessage], ctx: FinishContext
) -> tuple[ChatMessageTool, list[ChatMessage], ModelOutput | None]:
    handler = getattr(p.tooldef.tool, HANDOFF_ATTR)
    tool_message, new_messages, output = await handler(p.call, message, history)
    await ctx.review_executed(p, tool_message, tool_message.text)
    return tool_message, new_messages, output
