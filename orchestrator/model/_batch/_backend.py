"""The provider seam of batch mode: one small ABC a provider implements over its batch API.

A backend knows its wire format (``request`` builds one request body, ``parse`` reads one result body)
and five calls: ``submit`` a batch, ``check`` its status, fetch its ``results``, ``cancel`` it, and ``find``
the batch a submission created when the process that sent it died before recording its id. It never
waits or retries; ``BatchPool`` decides when to call it and what a failure means for the waiting turns.

Errors: ``BatchError`` is what a waiting turn receives when its batch (or its one request in it) failed,
expired, was cancelled, or came back malformed or missing. ``retryable`` tells ``Model``'s retry loop
whether to try again (a new request in a later batch). Provider exceptions raised by ``submit`` (a 429,
a 500, a dropped connection) reach the turns as they are, judged by the provider's own ``should_retry``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator._errors import ToolfleetError
from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput

BatchState = Literal["pending", "completed", "failed", "expired", "cancelled"]


PENDING = "pending"  # ``find`` cannot tell yet: ask again later


class BatchError(ToolfleetError):
    """A batched request did not produce an output (its batch failed/expired, or its result was bad)."""

    def __init__(self, message: str, retryable: bool = True, status_code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


@dataclass
class BatchCheck:
    """A batch's status as the provider reports it. ``ended`` states carry what is needed to fetch results."""

    state: BatchState
    error: str | None = None  # why a batch failed/expired (the provider's words)
    done: int = 0  # requests finished so far (for the display), when the provider says
    total: int = 0
    handle: dict[str, Any] = field(default_factory=dict)  # provider data for ``results`` (e.g. output file ids)

    @property
    def ended(self) -> bool:
        return self.state != "pending"


# One request's outcome: the provider's result body, or the error it reported for that request.
BatchOutcome = dict[str, Any] | BatchError


class BatchBackend(ABC):
    """One provider's batch API. Implementations live beside the provider (``_providers/<name>_batch.py``)."""

    #: The provider's cap on requests per batch (``BatchConfig.max_size`` may lower it).
    max_size: int = 10_000

    @abstractmethod
    def request(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                config: GenerateConfig) -> dict[str, Any]:
        """The JSON body of one request, exactly as a direct call would send it (pure)."""

    @abstractmethod
    def parse(self, body: dict[str, Any], tools: list[ToolInfo]) -> ModelOutput:
        """A ``ModelOutput`` from one successful result body; raise on a malformed one (pure)."""

    @abstractmethod
    async def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str:
        """Create a batch of ``(custom_id, body)`` requests; return its id. ``tag`` names this submission
        (recorded in the eval log before it is sent): ``find`` looks the batch up by it after a crash."""

    @abstractmethod
    async def find(self, tag: str, custom_ids: list[str], since: float) -> str | None:
        """The id of the batch a submission tagged ``tag`` (holding these custom ids, sent at or after
        ``since``, wall clock) created; None when the provider has no such batch (it never accepted it);
        ``PENDING`` when it cannot tell yet (a candidate batch must end first)."""

    @abstractmethod
    async def check(self, batch_id: str) -> BatchCheck:
        """The batch's status now (one request)."""

    @abstractmethod
    async def results(self, batch_id: str, check: BatchCheck) -> dict[str, BatchOutcome]:
        """Every result the ended batch holds, by custom_id (requests it lacks are missing)."""

    @abstractmethod
    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to stop the batch (best effort)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Release clients."""
