"""Configuration types for ``react``: prompt, submit tool, attempts, continue hook, compaction."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from orchestrator.model._chat_message import ChatMessage
from orchestrator.model._model_output import ModelOutput

if TYPE_CHECKING:
    from ._agent import AgentState

# The continue and incorrect-answer strings are Inspect's, word for word (a ported agent's transcripts
# read the same); the system-prompt pieces below are toolfleet's own wording. ``{submit}``: the submit tool's name.
DEFAULT_CONTINUE_PROMPT = (
    "\nPlease proceed to the next step using your best judgement. If you believe you have completed "
    "the task, please call the `{submit}()` tool with your final answer.\n"
)
DEFAULT_CONTINUE_PROMPT_NO_SUBMIT = "\nPlease proceed to the next step using your best judgement.\n"
DEFAULT_INCORRECT_MESSAGE = "Your submission was incorrect. Please proceed and attempt to find the correct answer."
OVERFLOW_STOP_MESSAGE = "model context window exceeded"

DEFAULT_INSTRUCTIONS_PROMPT = (
    "You are a capable assistant working towards the best possible answer. Tools are available to "
    "you; each tool call's result arrives in the next message. Think through your plan before you "
    "act, and use as many turns of tool calls as the task needs."
)
DEFAULT_SUBMIT_PROMPT = "When you have finished and have an answer, report it by calling the `{submit}()` tool."
DEFAULT_HANDOFF_PROMPT = (
    "You work alongside other agents. A tool named `transfer_to_<agent_name>` hands the conversation "
    "to that agent; the transfer happens behind the scenes, so do not mention it to the user."
)


@dataclass
class AgentPrompt:
    """The pieces of react's system message (set a piece to None to leave it out)."""

    instructions: str | None = None
    handoff_prompt: str | None = DEFAULT_HANDOFF_PROMPT
    assistant_prompt: str | None = DEFAULT_INSTRUCTIONS_PROMPT
    submit_prompt: str | None = DEFAULT_SUBMIT_PROMPT


DEFAULT_SUBMIT_NAME = "submit"
DEFAULT_SUBMIT_DESCRIPTION = "Submit an answer for evaluation."


@dataclass
class AgentSubmit:
    """The submit tool: its name/description (None: the tool's own, else ``submit``), an
    alternative implementation (``tool``, which should return the answer), and how the answer
    lands in the output."""

    name: str | None = None
    description: str | None = None
    tool: Any = None
    answer_only: bool = False  # True: the completion is the answer alone
    answer_delimiter: str = "\n\n"  # between the message text and the appended answer
    keep_in_messages: bool = False  # keep submit calls and results in the history on exit


AttemptScorer = Callable[["AgentState"], Awaitable[Any]]


@dataclass
class AgentAttempts:
    """Several tries at the answer: score each submission below the limit; stop when correct."""

    attempts: int = 1
    # A string, or an async fn (state, scores: list[Score]) -> message.
    incorrect_message: str | Callable[[AgentState, list[Any]], Awaitable[str]] = DEFAULT_INCORRECT_MESSAGE
    # Scores the state (the answer is state.output.completion). None: the scorer bound with
    # ``attempt_scorer`` (the eval runner binds the task's scorer per sample).
    scorer: AttemptScorer | None = None
    score_value: Callable[[Any], float] | None = None  # score → [0, 1]; 1.0 is correct


AgentContinue = Callable[["AgentState"], Awaitable[Union[bool, str, "AgentState"]]]
"""Called after every turn: True continue (nudging if no tool calls), False/None stop, str a message, AgentState a new
state."""


class Compaction(ABC):
    """Keeps the conversation within the context window.

    ``compact`` is called before each generation (``force=False``: compact only if near the
    window) and after an overflow (``force=True``: must shrink if it can). Return the new message
    list, or None when nothing was done.
    """

    @abstractmethod
    async def compact(self, messages: list[ChatMessage], force: bool = False) -> list[ChatMessage] | None: ...

    def record_output(self, output: ModelOutput) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Called after each generation (e.g. to calibrate token counts)."""


MessageFilter = Callable[[list[ChatMessage]], Awaitable[list[ChatMessage]]]
