"""Models, messages and tool-call execution (mirrors ``inspect_ai.model``)."""

from typing import TYPE_CHECKING, Any

from orchestrator.tool._content import (
    ContentDocument,
    ContentImage,
    ContentReasoning,
    ContentText,
    ContentToolUse,
)

from ._batch import BatchError
from ._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageBase,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from ._generate_config import BatchConfig, GenerateConfig, GenerateConfigArgs
from ._model import (
    Model,
    ModelAPI,
    ModelError,
    active_model,
    get_model,
    init_active_model,
    model_context,
    model_providers,
    modelapi,
)
from ._model_name import ModelName
from ._model_output import ChatCompletionChoice, ModelOutput, ModelUsage, StopReason
from ._providers._retry import RetryPolicy
from ._tool_call_parse import parse_tool_call
from ._usage import UsageCounter, current_usage, record_model_usage, usage_scope

if TYPE_CHECKING:  # what __getattr__ below resolves, for type checkers
    from orchestrator.execute import ExecuteToolsResult, execute_tools

__all__ = [
    "BatchConfig",
    "BatchError",
    "ChatCompletionChoice",
    "ChatMessage",
    "ChatMessageAssistant",
    "ChatMessageBase",
    "ChatMessageSystem",
    "ChatMessageTool",
    "ChatMessageUser",
    "ContentDocument",
    "ContentImage",
    "ContentReasoning",
    "ContentText",
    "ContentToolUse",
    "ExecuteToolsResult",
    "GenerateConfig",
    "GenerateConfigArgs",
    "Model",
    "ModelAPI",
    "ModelError",
    "ModelName",
    "ModelOutput",
    "ModelUsage",
    "RetryPolicy",
    "StopReason",
    "execute_tools",
    "UsageCounter",
    "active_model",
    "current_usage",
    "get_model",
    "init_active_model",
    "model_context",
    "model_providers",
    "modelapi",
    "parse_tool_call",
    "record_model_usage",
    "usage_scope",
]


def __getattr__(name: str) -> Any:
    # The tool-call engine lives above this package, in ``orchestrator.execute``: it asks approvers,
    # reviewers and the dispatcher, which all use models. Inspect's path to it stays here, resolved on
    # first use, so loading the model package never loads the engine (tests/test_architecture.py).
    if name in ("ExecuteToolsResult", "execute_tools"):
        from orchestrator.execute import ExecuteToolsResult, execute_tools

        return {"ExecuteToolsResult": ExecuteToolsResult, "execute_tools": execute_tools}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
