"""Generation settings (mirrors ``inspect_ai.model.GenerateConfig``)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Literal

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

DEFAULT_MAX_TOOL_OUTPUT = 16 * 1024


class GenerateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_seqs: list[str] | None = None
    max_retries: int | None = None
    timeout: float | None = None
    parallel_tool_calls: bool | None = None
    max_tool_output: int | None = None  # bytes; 0 disables truncation
    reasoning_tokens: int | None = None  # extended-thinking budget (Anthropic)
    cache_prompt: Literal["auto"] | bool | None = None  # Anthropic prompt caching ("auto": when tools are given)

    def merge(self, other: "GenerateConfig") -> "GenerateConfig":
        """``other``'s set values win."""
        return GenerateConfig(**{**self.model_dump(exclude_none=True), **other.model_dump(exclude_none=True)})


class GenerateConfigArgs(TypedDict, total=False):
    """``GenerateConfig``'s fields as keyword arguments (Inspect's ``**kwargs: Unpack[GenerateConfigArgs]``).

    Only the settings toolfleet implements; a test keeps the two in step.
    """

    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    stop_seqs: list[str] | None
    max_retries: int | None
    timeout: float | None
    parallel_tool_calls: bool | None
    max_tool_output: int | None
    reasoning_tokens: int | None
    cache_prompt: Literal["auto"] | bool | None


_active_config: ContextVar[GenerateConfig] = ContextVar("toolfleet_generate_config", default=GenerateConfig())


def active_generate_config() -> GenerateConfig:
    return _active_config.get()


def set_active_generate_config(config: GenerateConfig) -> None:
    _active_config.set(config)
