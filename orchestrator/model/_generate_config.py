"""Generation settings (mirrors ``inspect_ai.model.GenerateConfig``)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import TypedDict

DEFAULT_MAX_TOOL_OUTPUT = 16 * 1024


class BatchConfig(BaseModel):
    """How requests are pooled into a provider's batch API (Inspect's ``BatchConfig``; unset: defaults)."""

    model_config = ConfigDict(extra="forbid")

    size: int | None = Field(default=None, ge=1)  # send a batch once this many requests wait (default 100)
    max_size: int | None = Field(default=None, ge=1)  # at most this many per batch (default: the provider's cap)
    send_delay: float | None = Field(default=None, ge=0)  # send a partial batch after this many seconds (15)
    tick: float | None = Field(default=None, gt=0)  # seconds between looks at the queue and batches' status (15)
    max_batches: int | None = Field(default=None, ge=1)  # batches in flight at once per model (100)
    # failed status checks in a row before a batch's requests fail (1000)
    max_consecutive_check_failures: int | None = Field(default=None, ge=1)


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
    # Provider batch API: True (defaults), a batch size, or a BatchConfig; False/None: one request at a time.
    batch: bool | int | BatchConfig | None = None

    @field_validator("batch")
    @classmethod
    def _batch_size_positive(cls, value: bool | int | BatchConfig | None) -> bool | int | BatchConfig | None:
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"a batch size is at least 1, got {value}")
        return value

    def merge(self, other: GenerateConfig) -> GenerateConfig:
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
    batch: bool | int | BatchConfig | None


# No default object: one shared GenerateConfig would carry any change to it into every context.
_active_config: ContextVar[GenerateConfig | None] = ContextVar("toolfleet_generate_config", default=None)


def active_generate_config() -> GenerateConfig:
    config = _active_config.get()
    return GenerateConfig() if config is None else config


def set_active_generate_config(config: GenerateConfig) -> None:
    _active_config.set(config)
