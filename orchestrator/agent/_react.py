"""``react``: the ReAct loop (SPEC §6.2).

Each turn: generate → (overflow / content-filter handling) → execute the tool calls → look for a
submission (score it if more attempts remain) → ``on_continue``. On exit the submit calls are
removed from the history so a parent agent never mistakes them for its own.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from orchestrator.approval._policy import ApprovalPolicy, approval_policy_scope, resolve_approval
from orchestrator.model._call_tools import execute_tools
from orchestrator.model._chat_message import ChatMessageSystem, ChatMessageUser
from orchestrator.model._model import Model, model_context
from orchestrator.review._policy import ReviewPolicy, resolve_review, review_policy_scope
from orchestrator.util._limits import check_limits, check_message_limit, record_turn

from ._agent import Agent, AgentState, agent
from ._react_model import handle_overflow, overflow_filter, resolve_generate, visible_tools
from ._submit import remove_submit, submission, submit_tool
from ._types import (
    DEFAULT_CONTINUE_PROMPT,
    AgentAttempts,
    AgentContinue,
    AgentPrompt,
    AgentSubmit,
    AttemptScorer,
    Compaction,
    MessageFilter,
)

MAX_CONTENT_FILTER_STOPS = 3  # consecutive refusals that end the loop

_scorer: ContextVar[AttemptScorer | None] = ContextVar("toolfleet_attempt_scorer", default=None)


@contextlib.contextmanager
def attempt_scorer(scorer: AttemptScorer | None) -> Iterator[None]:
    """Bind the scorer react uses for attempts (the eval runner binds the task's, per sample)."""
    token = _scorer.set(scorer)
    try:
        yield
    finally:
        _scorer.reset(token)


@agent
def react(
    *,
    name: str | None = None,
    description: str | None = None,
    prompt: str | AgentPrompt | None = AgentPrompt(),
    tools: Sequence[Any] | None = None,
    model: str | Model | Agent | None = None,
    attempts: int | AgentAttempts = 1,
    submit: bool | AgentSubmit = True,
    on_continue: str | AgentContinue | None = None,
    compaction: Compaction | None = None,
    truncation: Literal["auto", "disabled"] | MessageFilter = "disabled",
    approval: list[ApprovalPolicy] | str | Path | None = None,
    review: list[ReviewPolicy] | str | Path | None = None,
) -> Agent:
    """A ReAct agent: generate, call tools, repeat until it submits (or stops calling tools when ``submit=False``).

    Args:
      name: Display name (transcripts, handoffs).
      description: What the agent does (shown to a model that may hand off to it).
      prompt: System instructions (a string, or an ``AgentPrompt`` for every piece).
      tools: The tools the model may call.
      model: A model name, a ``Model``, or an Agent ``(state, tools)``; None: the active model.
      attempts: Submissions allowed (``AgentAttempts`` for scoring/messages).
      submit: Add a submit tool (``AgentSubmit`` to configure it); False: stop when no tool is called.
      on_continue: Continue message, or an async hook called after every turn.
      compaction: Keeps the history within the context window.
      truncation: On overflow without (successful) compaction: "auto" trims messages.
      approval: Approval policy while this agent runs (replaces the active one).
      review: Review policy while this agent runs (carried into agents it hands off to).
    """
    submit_config = submit if isinstance(submit, AgentSubmit) else (AgentSubmit() if submit else None)
    attempt_config = attempts if isinstance(attempts, AgentAttempts) else AgentAttempts(attempts=attempts)
    if attempt_config.attempts < 1:
        raise ValueError("attempts must be at least 1")
    submit_name = submit_config.name if submit_config else "submit"
    all_tools: list[Any] = list(tools or [])
    if submit_config is not None:
        all_tools.append(submit_tool(submit_config))
    system_message = _system_message(prompt, submit_name if submit_config else None, all_tools)
    generate, resolved_model, model_is_agent = resolve_generate(model, compaction)
    truncate = overflow_filter(truncation)
    approval_policy = resolve_approval(approval) if approval is not None else None
    review_policy = resolve_review(review) if review is not None else None

    async def execute(state: AgentState) -> AgentState:
        with contextlib.ExitStack() as scopes:
            if resolved_model is not None:
                # Nested agents (handoff, as_tool) inherit this model unless they name their own.
                scopes.enter_context(model_context(resolved_model))
            if approval_policy is not None:
                scopes.enter_context(approval_policy_scope(approval_policy))
            if review_policy is not None:
                scopes.enter_context(review_policy_scope(review_policy))
            if system_message is not None:
                state.messages.insert(0, system_message.model_copy())
            try:
                await _loop(state)
            finally:
                if submit_config is not None and not submit_config.keep_in_messages:
                    state.messages = remove_submit(state.messages, submit_name)
        return state

    async def _loop(state: AgentState) -> None:
        submissions = 0
        refusals = 0
        while True:
            check_limits()
            record_turn()
            await generate(state, visible_tools(all_tools))
            check_message_limit(len(state.messages))
            check_limits()
            output = state.output

            if output.stop_reason == "model_length":
                if await handle_overflow(state, compaction, truncate, model_is_agent):
                    continue
                break
            if output.stop_reason == "content_filter":
                refusals += 1
                if refusals >= MAX_CONTENT_FILTER_STOPS:
                    break
                if state.messages and state.messages[-1] is output.message:
                    state.messages.pop()  # retry from the same history; the refusal would only bias it
                continue
            refusals = 0

            tool_calls = bool(output.message.tool_calls) if not output.empty else False
            if tool_calls:
                result = await execute_tools(state.messages, all_tools)
                state.messages.extend(result.messages)
                check_message_limit(len(state.messages))
                if result.output is not None:
                    state.output = result.output
                if submit_config is not None:
                    answer = submission(result.messages, submit_name)
                    if answer is not None:
                        _record_answer(state, answer, submit_config)
                        submissions += 1
                        if submissions >= attempt_config.attempts:
                            break
                        correct, score = await _score(state, attempt_config)
                        if correct:
                            break
                        message = attempt_config.incorrect_message
                        if callable(message):
                            message = await message(state, score)
                        state.messages.append(ChatMessageUser(content=message))
                        check_message_limit(len(state.messages))
            elif submit_config is None:
                break  # no submit tool: a turn without tool calls is the answer

            if not await _continue(state, tool_calls):
                break

    async def _continue(state: AgentState, tool_calls: bool) -> bool:
        continue_prompt = _named(DEFAULT_CONTINUE_PROMPT, submit_name)
        if callable(on_continue):
            decision = await on_continue(state)
            if decision is False:
                return False
            if isinstance(decision, AgentState):
                # Adopt the new state's content in place: run() returns the object it passed in.
                state.messages = decision.messages
                if decision.has_output:
                    state.output = decision.output
            elif isinstance(decision, str):
                state.messages.append(ChatMessageUser(content=_named(decision, submit_name)))
            elif not tool_calls:
                state.messages.append(ChatMessageUser(content=continue_prompt))
        elif not tool_calls:
            text = _named(on_continue, submit_name) if isinstance(on_continue, str) else continue_prompt
            state.messages.append(ChatMessageUser(content=text))
        check_message_limit(len(state.messages))
        return True

    return execute


def _system_message(prompt: str | AgentPrompt | None, submit_name: str | None, tools: list[Any]) -> ChatMessageSystem | None:
    if prompt is None:
        return None
    if isinstance(prompt, str):
        prompt = AgentPrompt(instructions=prompt)
    from orchestrator.model._call_prepare import HANDOFF_ATTR

    has_handoff = any(hasattr(t, HANDOFF_ATTR) for t in tools)
    parts = [
        prompt.instructions,
        prompt.handoff_prompt if has_handoff else None,
        prompt.assistant_prompt,
        _named(prompt.submit_prompt, submit_name) if prompt.submit_prompt and submit_name else None,
    ]
    text = "\n\n".join(p for p in parts if p)
    return ChatMessageSystem(content=text) if text else None


def _named(template: str, submit_name: str) -> str:
    """Fill ``{submit}`` only: user text may hold other braces (JSON, code) that ``str.format`` would choke on."""
    return template.replace("{submit}", submit_name)


def _record_answer(state: AgentState, answer: str, config: AgentSubmit) -> None:
    output = state.output
    if config.answer_only:
        output.completion = answer
    else:
        # The answer joins the message text, which survives once the submit call is removed.
        output.completion = f"{output.completion}{config.answer_delimiter}{answer}".strip()
    state.output = output


async def _score(state: AgentState, config: AgentAttempts) -> tuple[bool, Any]:
    """Score the submission: (correct?, the scorer's value)."""
    scorer = config.scorer or _scorer.get()
    if scorer is None:
        raise RuntimeError(
            "react(attempts > 1) needs a scorer: pass AgentAttempts(scorer=...) or run inside a task "
            "whose runner binds one with attempt_scorer()."
        )
    value = scorer(state)
    if inspect.isawaitable(value):
        value = await value
    to_float: Callable[[Any], float] = config.score_value or score_to_float
    return to_float(value) == 1.0, value


def score_to_float(value: Any) -> float:
    """Common score values as a number: True/"C"/"correct"/"yes" → 1.0, their opposites → 0.0."""
    if hasattr(value, "value"):  # a Score object
        value = value.value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("c", "correct", "yes", "true", "1"):
            return 1.0
        if text in ("i", "incorrect", "no", "false", "0", "p", "partial", "n"):
            return 0.5 if text in ("p", "partial") else 0.0
        try:
            return float(text)
        except ValueError:
            return 0.0
    return 0.0


