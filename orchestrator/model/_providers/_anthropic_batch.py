"""Anthropic Message Batches behind ``BatchBackend``: ``messages.batches.create`` with one
``{"custom_id", "params"}`` per request (``params`` is exactly a direct call's body), ``retrieve`` until
``processing_status`` is ``ended``, then the JSONL at the batch's ``results_url``. A batch always ends;
what failed is said per request (``errored``, ``expired``, ``canceled``), so the batch's own state is
``completed`` unless every request expired or it was cancelled.

The results file is read line by line here rather than through the SDK's decoder, so one broken line
costs only its own request (it counts as missing, and is retried), not the whole batch.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._batch import PENDING, BatchBackend, BatchCheck, BatchError, BatchOutcome
from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput
from ._anthropic_wire import build_request, parse_message

if TYPE_CHECKING:
    from .anthropic import AnthropicAPI

MAX_REQUESTS = 100_000  # Anthropic's cap on requests per batch
FIND_SLACK_S = 60.0  # clock skew allowed between this host and the provider's creation times
# Errors worth another try: the service's (not the request's) fault.
_RETRY_ERRORS = {"api_error", "overloaded_error", "rate_limit_error", "timeout_error"}


def parse_results_file(text: str) -> dict[str, BatchOutcome]:
    """Outcomes by custom_id from a batch's results JSONL; lines that make no sense are skipped."""
    outcomes: dict[str, BatchOutcome] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            custom_id, result = record["custom_id"], record["result"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        if isinstance(custom_id, str):
            outcomes[custom_id] = _result_outcome(result)
    return outcomes


def _result_outcome(result: Any) -> BatchOutcome:
    kind = result.get("type") if isinstance(result, dict) else None
    if kind == "succeeded" and isinstance(result.get("message"), dict):
        message: dict[str, Any] = result["message"]
        return message
    if kind == "errored":
        envelope = result.get("error")
        inner: Any = envelope.get("error") if isinstance(envelope, dict) and isinstance(envelope.get("error"), dict) \
            else envelope if isinstance(envelope, dict) else {}
        error_type = str(inner.get("type") or "error")
        return BatchError(f"{error_type}: {inner.get('message') or 'no message'}",
                          retryable=error_type in _RETRY_ERRORS)
    if kind in ("expired", "canceled"):
        return BatchError(f"request {kind} before the batch processed it")
    return BatchError(f"result of unknown type {kind!r}")


class AnthropicBatch(BatchBackend):
    max_size = MAX_REQUESTS

    def __init__(self, api: AnthropicAPI) -> None:
        self._api = api

    def request(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                config: GenerateConfig) -> dict[str, Any]:
        return build_request(self._api.model_name, input, tools, tool_choice, config)

    def parse(self, body: dict[str, Any], tools: list[ToolInfo]) -> ModelOutput:
        return parse_message(self._api.model_name, body, tools)

    async def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str:
        batch = await self._api.client().messages.batches.create(
            requests=[{"custom_id": cid, "params": body} for cid, body in requests])
        return str(batch.id)

    async def find(self, tag: str, custom_ids: list[str], since: float) -> str | None:
        """Message batches carry no metadata, and their requests can be read only as results: among the
        batches created since ``since`` (newest first), the ended one whose results hold these custom ids;
        ``PENDING`` while one of them has not ended (it may be the one)."""
        wanted, undecided = set(custom_ids), False
        async for batch in self._api.client().messages.batches.list(limit=100):
            if batch.created_at.timestamp() < since - FIND_SLACK_S:
                break
            if batch.processing_status != "ended":
                batch = await self._api.client().messages.batches.retrieve(batch.id)  # the list may lag behind
            if batch.processing_status != "ended":
                undecided = True
                continue
            if batch.results_url and wanted & set(parse_results_file(
                    await self._api.client().get(batch.results_url, cast_to=str))):
                return str(batch.id)
        return PENDING if undecided else None

    async def check(self, batch_id: str) -> BatchCheck:
        batch = await self._api.client().messages.batches.retrieve(batch_id)
        counts = batch.request_counts
        done = counts.succeeded + counts.errored + counts.canceled + counts.expired
        handle = {"results_url": batch.results_url}
        if batch.processing_status != "ended":
            return BatchCheck(state="pending", done=done, total=done + counts.processing, handle=handle)
        state = "cancelled" if batch.cancel_initiated_at is not None else \
            "expired" if done and counts.expired == done else "completed"
        return BatchCheck(state=state, done=done, total=done, handle=handle,  # type: ignore[arg-type]  # one of the Literal states
                          error=f"{counts.expired} of {done} requests expired" if state == "expired" else None)

    async def results(self, batch_id: str, check: BatchCheck) -> dict[str, BatchOutcome]:
        url = check.handle.get("results_url")
        if not url:
            return {}
        return parse_results_file(await self._api.client().get(url, cast_to=str))

    async def cancel(self, batch_id: str) -> None:
        await self._api.client().messages.batches.cancel(batch_id)
