"""Models, messages and tool-call execution (mirrors ``inspect_ai.model``)."""

from ._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageBase,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from ._generate_config import GenerateConfig
from ._model_output import ChatCompletionChoice, ModelOutput, ModelUsage, StopReason

__all__ = [
    "ChatCompletionChoice",
    "ChatMessage",
    "ChatMessageAssistant",
    "ChatMessageBase",
    "ChatMessageSystem",
    "ChatMessageTool",
    "ChatMessageUser",
    "GenerateConfig",
    "ModelOutput",
    "ModelUsage",
    "StopReason",
]
