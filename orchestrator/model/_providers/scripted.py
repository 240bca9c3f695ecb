"""The ``scripted`` model: replays given outputs or asks a Python policy — for tests, demos, benchmarks.

``get_model("scripted", outputs=[...])`` replays outputs in order (strings become plain assistant
text); ``get_model("scripted", policy=fn)`` calls ``fn(messages, tools)`` (sync or async) each turn.
Given nothing, or once the outputs run out, it answers the default output, as ``mockllm/model`` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model import ModelAPI
from .._model_output import ModelOutput

DEFAULT_OUTPUT = "Default output from mockllm/model"
_MESSAGE_IDS = {"choices": {"__all__": {"message": {"id"}}}}

ScriptedOutput = ModelOutput | str
ScriptedPolicy = Callable[[list[ChatMessage], list[ToolInfo]], ScriptedOutput | Awaitable[ScriptedOutput]]


class ScriptedModelAPI(ModelAPI):
    # Each get_model("scripted", ...) call must get its own replay queue.
    memoize = False

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, outputs: Iterable[ScriptedOutput] | ScriptedOutput | None = None,
                 policy: ScriptedPolicy | None = None, default_output: str = DEFAULT_OUTPUT,
                 custom_outputs: Iterable[ModelOutput] | Callable[..., Any] | None = None) -> None:
        super().__init__(model_name, base_url, api_key, config)
        if sum(x is not None for x in (outputs, policy, custom_outputs)) > 1:
            raise ValueError("Give the scripted model either outputs or a policy (or custom_outputs), not several")
        # Inspect's mockllm argument: a callable (input, tools, tool_choice, config) or outputs that,
        # unlike ``outputs``, raise once they run out instead of falling back to the default.
        self._custom = custom_outputs
        self._custom_iter: Iterator[Any] | None = None
        if custom_outputs is not None and not callable(custom_outputs):
            if not isinstance(custom_outputs, Iterable):
                raise ValueError(f"custom_outputs must be an Iterable, Generator, or Callable, got {custom_outputs}")
            self._custom_iter = iter(custom_outputs)
        if isinstance(outputs, (str, ModelOutput)):
            outputs = [outputs]
        # An iterator, not a list: a generator of outputs may be endless.
        self._outputs: Iterator[ScriptedOutput] | None = iter(outputs) if outputs is not None else None
        self._policy = policy
        self.default_output = default_output
        self.calls = 0  # how many times generate ran (handy in tests)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        self.calls += 1
        result: Any = None
        if self._custom is not None:
            result = await self._custom_output(input, tools, tool_choice, config)
        elif self._policy is not None:
            result = self._policy(input, tools)
            if inspect.isawaitable(result):
                result = await result
        elif self._outputs is not None:
            result = next(self._outputs, None)
        if result is None:
            return ModelOutput.from_content(self.model_name, self.default_output)
        if isinstance(result, str):
            return ModelOutput.from_content(self.model_name, result)
        if not isinstance(result, ModelOutput):
            raise TypeError(f"Scripted model outputs must be ModelOutput or str, not {type(result).__name__}")
        # Callers mutate outputs (react appends to the message text) and key on message ids; a
        # replayed or shared object must not carry one sample's edits, or one id, into another.
        # Dump + validate is a fresh copy at half the cost of a deepcopy, and re-mints the ids.
        return ModelOutput.model_validate(result.model_dump(exclude=_MESSAGE_IDS))

    async def _custom_output(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                             config: GenerateConfig) -> Any:
        if self._custom_iter is None:
            result = self._custom(input, tools, tool_choice, config)  # type: ignore[misc,operator]  # set whenever _custom_iter is not
            return await result if inspect.isawaitable(result) else result
        try:
            output = next(self._custom_iter)
        except StopIteration:
            raise ValueError("custom_outputs ran out of values") from None
        if not isinstance(output, ModelOutput):
            raise ValueError(f"output must be an instance of ModelOutput; got {type(output)}; content: {output!r}")
        return output
