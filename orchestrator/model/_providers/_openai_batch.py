"""OpenAI Batch API behind ``BatchBackend``: a JSONL file of chat-completions requests uploaded with
``files.create(purpose="batch")``, a batch over it (``batches.create``, 24 h window), polled with
``batches.retrieve``; results from its output file and, for requests that failed or expired, its error
file (``files.content``). Any OpenAI-compatible server with these endpoints works the same way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from openai.types.chat import ChatCompletion

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._batch import BatchBackend, BatchCheck, BatchError, BatchOutcome, BatchState
from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput
from ._openai_wire import build_request, parse_completion
from ._sdk_api import RETRY_STATUS

if TYPE_CHECKING:
    from .openai import OpenAIAPI

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
MAX_REQUESTS = 50_000  # OpenAI's cap on requests per batch
TAG_KEY = "toolfleet_submission"  # the batch's metadata key naming the submission (``find``)
FIND_SLACK_S = 60.0  # clock skew allowed between this host and the provider's creation times

_STATES: dict[str, BatchState] = {"completed": "completed", "failed": "failed", "expired": "expired",
                                  "cancelled": "cancelled"}  # validating, in_progress, finalizing, cancelling: pending

_RETRY_CODES = {"batch_expired", "batch_cancelled", "rate_limit_exceeded", "server_error"}


def batch_input_file(requests: list[tuple[str, dict[str, Any]]]) -> bytes:
    """The JSONL the Batch API takes: one ``{"custom_id", "method", "url", "body"}`` per request."""
    return "".join(json.dumps({"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": body}) + "\n"
                   for cid, body in requests).encode()


def parse_batch_file(text: str) -> dict[str, BatchOutcome]:
    """Outcomes by custom_id from an output or error file; lines that make no sense are skipped
    (their requests then count as missing, and are retried)."""
    outcomes: dict[str, BatchOutcome] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            custom_id = record["custom_id"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        if not isinstance(custom_id, str):
            continue
        outcomes[custom_id] = _line_outcome(record)
    return outcomes


def _line_outcome(record: dict[str, Any]) -> BatchOutcome:
    error = record.get("error")
    if isinstance(error, dict) and error:
        code = str(error.get("code") or "error")
        return BatchError(f"{code}: {error.get('message') or 'no message'}", retryable=code in _RETRY_CODES)
    response = record.get("response")
    if not isinstance(response, dict):
        return BatchError("result line without a response")
    status = response.get("status_code")
    body = response.get("body")
    if status == 200 and isinstance(body, dict):
        return body
    message = body.get("error", {}).get("message") if isinstance(body, dict) and isinstance(body.get("error"), dict) \
        else None
    status_code = status if isinstance(status, int) else None
    retryable = status_code is None or status_code in RETRY_STATUS or status_code >= 500
    return BatchError(f"status {status}: {message or 'no message'}", retryable=retryable, status_code=status_code)


class OpenAIBatch(BatchBackend):
    max_size = MAX_REQUESTS

    def __init__(self, api: OpenAIAPI) -> None:
        self._api = api

    def request(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                config: GenerateConfig) -> dict[str, Any]:
        body = build_request(self._api.model_name, input, tools, tool_choice, config)
        body.update(self._api.extra_body or {})  # what the SDK's extra_body merges into a direct call
        return body

    def parse(self, body: dict[str, Any], tools: list[ToolInfo]) -> ModelOutput:
        return parse_completion(self._api.model_name, ChatCompletion.model_validate(body), tools)

    async def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str:
        client = self._api.client()
        uploaded = await client.files.create(file=("toolfleet-batch.jsonl", batch_input_file(requests),
                                                   "application/jsonl"), purpose="batch")
        batch = await client.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT,
                                            completion_window=COMPLETION_WINDOW,
                                            metadata={"created_by": "toolfleet", TAG_KEY: tag})
        return str(batch.id)

    async def find(self, tag: str, custom_ids: list[str], since: float) -> str | None:
        """The batch carrying ``tag`` in its metadata, among those created since ``since`` (the list
        comes newest first, so it stops at the first older one, a minute's clock skew allowed)."""
        async for batch in self._api.client().batches.list(limit=100):
            if (batch.metadata or {}).get(TAG_KEY) == tag:
                return str(batch.id)
            if batch.created_at and batch.created_at < since - FIND_SLACK_S:
                break
        return None

    async def check(self, batch_id: str) -> BatchCheck:
        batch = await self._api.client().batches.retrieve(batch_id)
        state = _STATES.get(batch.status, "pending")
        errors = [e.message or e.code or "" for e in (batch.errors.data or [])] if batch.errors else []
        counts = batch.request_counts
        return BatchCheck(state=state, error="; ".join(e for e in errors if e)[:1000] or None,
                          done=(counts.completed + counts.failed) if counts else 0, total=counts.total if counts else 0,
                          handle={"output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id})

    async def results(self, batch_id: str, check: BatchCheck) -> dict[str, BatchOutcome]:
        outcomes: dict[str, BatchOutcome] = {}
        for key in ("error_file_id", "output_file_id"):  # output last: a result there wins
            file_id = check.handle.get(key)
            if file_id:
                content = await self._api.client().files.content(file_id)
                outcomes.update(parse_batch_file(content.text))
        return outcomes

    async def cancel(self, batch_id: str) -> None:
        await self._api.client().batches.cancel(batch_id)
