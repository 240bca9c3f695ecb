"""``react``: the ReAct loop (Inspect's ``react``; docs/porting-from-inspect.md lists the differences).

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
from orchestrator.execute._execute_tools import execute_tools
from orchestrator.model._chat_message import ChatMessageSystem, ChatMessageUser
from orchestrator.model._model import Model, model_context
from orchestrator.review._policy import ReviewPolicy, resolve_review, review_policy_scope
from orchestrator.tool._tool_def import ToolDef
from orchestrator.util._limits import check_limits

from ._agent import Agent, AgentState, agent
from ._react_model import handle_overflow, overflow_filter, resolve_generate, visible_tools
from ._submit import remove_submit, submission, submit_tool
from ._types import (
    DEFAULT_CONTINUE_PROMPT,
    DEFAULT_CONTINUE_PROMPT_NO_SUBMIT,
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
    prompt: str | AgentPrompt | None = AgentPrompt(),  # noqa: B008 - Inspect's signature; never mutated
    tools: Sequence[Any] | None = None,
    model: str | Model | Agent | None = None,
    attempts: int | AgentAttempts = 1,
    submit: bool | AgentSubmit | None = None,
    on_continue: str | AgentContinue | None = None,
    retry_refusals: int | None = None,
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
      submit: Add a submit tool (True/None; ``AgentSubmit`` to configure it); False: stop when no tool is called.
      on_continue: Continue message, or an async hook called after every turn (False/None stops).
      retry_refusals: Generate again (this many times) when the model refuses (content filter).
      compaction: Keeps the history within the context window.
      truncation: On overflow without (successful) compaction: "auto" trims messages.
      approval: Approval policy while this agent runs (replaces the active one).
      review: Review policy while this agent runs (carried into agents it hands off to).
    """
    if submit is False and isinstance(on_continue, str):
        raise ValueError("Passing a string to on_continue with no submit tool is not permitted, because in this "
                         "case the agent will always terminate when no tool calls are made.")
    submit_config = None if submit is False else (submit if isinstance(submit, AgentSubmit) else AgentSubmit())
    attempt_config = attempts if isinstance(attempts, AgentAttempts) else AgentAttempts(attempts=attempts)
    if attempt_config.attempts < 1:
        raise ValueError("attempts must be at least 1")
    all_tools: list[Any] = list(tools or [])
    submit_def = submit_tool(submit_config) if submit_config is not None else None
    if submit_def is not None:
        all_tools.append(submit_def)
    submit_name = submit_def.name if submit_def is not None else None
    system_message = _system_message(prompt, submit_name, all_tools)
    generate, resolved_model, model_is_agent = resolve_generate(model, compaction, retry_refusals)
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
                if submit_name is not None and submit_config is not None and not submit_config.keep_in_messages:
                    state.messages = remove_submit(state.messages, submit_name)
        return state

    async def _loop(state: AgentState) -> None:
        submissions = 0
        refusals = 0
        while True:
            # Message, token and turn limits are enforced by the model call and the message list.
            check_limits()
            await generate(state, visible_tools(all_tools))
            output = state.output

            if output.stop_reason == "model_length":
                if await handle_overflow(state, compaction, truncate, model_is_agent):
                    continue
                break
            if output.stop_reason == "content_filter":
                refusals += 1
                if refusals >= MAX_CONTENT_FILTER_STOPS:
                    break
            else:
                refusals = 0

            tool_calls = bool(output.message.tool_calls) if output.choices else False
            if tool_calls:
                result = await execute_tools(state.messages, all_tools)
                state.messages.extend(result.messages)
                if result.output is not None:
                    state.output = result.output
                if submit_name is not None and submit_config is not None:
                    answer = submission(result.messages, submit_name)
                    if answer is not None:
                        _record_answer(state, answer, submit_config)
                        submissions += 1
                        if submissions >= attempt_config.attempts:
                            break
                        correct, scores = await _score(state, attempt_config)
                        if correct:
                            break
                        message = attempt_config.incorrect_message
                        if callable(message):
                            message = await message(state, scores)
                        state.messages.append(ChatMessageUser(content=message))

            # As in Inspect, the output *after* the tools decides (a handoff's agent may have answered).
            if not await _continue(state, _has_tool_calls(state)):
                break

    async def _continue(state: AgentState, tool_calls: bool) -> bool:
        """After a turn: False ends the loop. Without a submit tool a text-only turn is the answer
        unless an ``on_continue`` callable says otherwise."""
        if submit_name is None:
            continue_prompt = DEFAULT_CONTINUE_PROMPT_NO_SUBMIT
        else:
            continue_prompt = _named(DEFAULT_CONTINUE_PROMPT, submit_name)
        if callable(on_continue):
            decision = await on_continue(state)
            if decision is True:
                if not tool_calls:
                    state.messages.append(ChatMessageUser(content=continue_prompt))
            elif isinstance(decision, str):
                state.messages.append(ChatMessageUser(content=_named(decision, submit_name or "submit")))
            elif isinstance(decision, AgentState):
                # Adopt the new state's content in place: run() returns the object it passed in.
                state.messages = decision.messages
                state.output = decision.output
            else:  # False or None
                return False
        elif not tool_calls:
            if submit_name is None:
                return False
            text = on_continue if isinstance(on_continue, str) else DEFAULT_CONTINUE_PROMPT
            state.messages.append(ChatMessageUser(content=_named(text, submit_name)))
        return True

    return execute


def _system_message(prompt: str | AgentPrompt | None, submit_name: str | None,
                    tools: list[Any]) -> ChatMessageSystem | None:
    """Instructions, the handoff prompt (with handoff tools), then the assistant prompt — followed by
    the submit prompt unless the assistant prompt names ``{submit}`` itself (as Inspect builds it)."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        prompt = AgentPrompt(instructions=prompt)
    from orchestrator.execute._prepare import HANDOFF_ATTR

    has_handoff = any(hasattr(t.tool if isinstance(t, ToolDef) else t, HANDOFF_ATTR) for t in tools)
    parts = [prompt.instructions, prompt.handoff_prompt if has_handoff else None]
    if prompt.assistant_prompt:
        if submit_name and "{submit}" not in prompt.assistant_prompt and prompt.submit_prompt:
            parts.append(f"{prompt.assistant_prompt}\n{_named(prompt.submit_prompt, submit_name)}")
        else:
            parts.append(_named(prompt.assistant_prompt, submit_name or "submit"))
    text = "\n\n".join(p for p in parts if p)
    return ChatMessageSystem(content=text)


def _has_tool_calls(state: AgentState) -> bool:
    output = state.output
    return bool(output.choices and output.message.tool_calls)


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


async def _score(state: AgentState, config: AgentAttempts) -> tuple[bool, list[Any]]:
    """Score the submission: (correct?, the scores — a list, as Inspect passes to ``incorrect_message``)."""
    scorer = config.scorer or _scorer.get()
    if scorer is None:
        raise RuntimeError(
            "react(attempts > 1) needs a scorer: pass AgentAttempts(scorer=...) or run inside a task "
            "whose runner binds one with attempt_scorer()."
        )
    value = scorer(state)
    if inspect.isawaitable(value):
        value = await value
    scores = _as_scores(value)
    to_float: Callable[[Any], float] = config.score_value or score_to_float
    return to_float(scores[0].value) == 1.0, scores


def _as_scores(value: Any) -> list[Any]:
    from orchestrator.scorer import Score

    values = value if isinstance(value, list) else [value]
    return [v if isinstance(v, Score) else Score(value=v) for v in values]


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


