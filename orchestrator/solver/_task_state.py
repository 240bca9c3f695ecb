"""``TaskState``: what a solver works on — the sample's conversation, tools, output and scratch store.

Mirrors ``inspect_ai.solver.TaskState``. The sample runner binds the running sample's state to a context
variable so code deep inside a sample (scripted policies, tools running in the orchestrator) can reach it
with ``sample_state()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, cast

from orchestrator.model._chat_message import ChatMessage, ChatMessageUser
from orchestrator.model._model_output import ModelOutput
from orchestrator.scorer._target import Target
from orchestrator.tool._tool_call import ToolChoice
from orchestrator.util._limited_messages import MessageList
from orchestrator.util._running_sample import bind_running_sample, running_sample


class TaskState:
    def __init__(
        self,
        model: str,
        sample_id: int | str,
        epoch: int,
        input: str | list[ChatMessage],
        messages: list[ChatMessage],
        target: Target | None = None,
        choices: list[str] | None = None,
        output: ModelOutput | None = None,
        metadata: dict[str, Any] | None = None,
        message_limit: int | None = None,
        token_limit: int | None = None,
    ) -> None:
        self.model = model
        self.sample_id = sample_id
        self.epoch = epoch
        self.input = input
        self.messages = messages
        self.target = target or Target("")
        self.choices = choices
        self.output = output or ModelOutput(model=model)
        self.metadata = metadata or {}
        self.message_limit = message_limit
        self.token_limit = token_limit
        self.tools: list[Any] = []
        self.tool_choice: ToolChoice | None = None
        self.store: dict[str, Any] = {}

        self.scores: dict[str, Any] | None = None
        self.completed = False  # a solver sets this to stop the chain early

    @property
    def messages(self) -> list[ChatMessage]:
        """The conversation: a ``MessageList``, so growing it past the message limit raises."""
        return self._messages

    @messages.setter
    def messages(self, messages: list[ChatMessage]) -> None:
        self._messages = messages if isinstance(messages, MessageList) else MessageList(messages)

    @property
    def input_text(self) -> str:
        if isinstance(self.input, str):
            return self.input
        return next((m.text for m in self.input if isinstance(m, ChatMessageUser)), "")

    @property
    def user_prompt(self) -> ChatMessageUser:
        for message in self.messages:
            if isinstance(message, ChatMessageUser):
                return message
        raise ValueError("This sample's messages have no user prompt.")

    def __repr__(self) -> str:
        return f"TaskState(sample_id={self.sample_id!r}, epoch={self.epoch}, messages={len(self.messages)})"


def initial_messages(input: str | Sequence[ChatMessage]) -> list[ChatMessage]:
    if isinstance(input, str):
        return [ChatMessageUser(content=input, source="input")]
    return [m.model_copy(deep=True) for m in input]


def sample_state() -> TaskState | None:
    """The running sample's state (None outside a sample)."""
    return cast("TaskState | None", running_sample())  # only bind_sample_state binds it


@contextlib.contextmanager
def bind_sample_state(state: TaskState) -> Iterator[TaskState]:
    # Bound in util, so packages below this one can tell which sample is running.
    with bind_running_sample(state):
        yield state
