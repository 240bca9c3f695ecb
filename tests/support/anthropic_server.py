"""A Messages-API server on loopback, for driving the real ``anthropic`` SDK in tests.

The same scripted-reply machinery as ``openai_server`` (each POST pops the next ``Reply``; every
request is recorded), with Anthropic's shapes: ``message(...)`` builds a 200 ``Message`` from content
blocks, ``error(...)`` Anthropic's error envelope (``overloaded()`` is the 529). ``base_url`` is the
SDK's form, without ``/v1``. With no reply queued it answers 418, so an under-scripted test fails fast.

Message Batches too: ``POST /v1/messages/batches``, ``GET /v1/messages/batches`` (newest first),
``GET /v1/messages/batches/{id}`` (and its
``/results`` JSONL), ``POST .../{id}/cancel``; each request is answered like a direct one (queue, then
``responder``) when the batch is first retrieved, unless ``hold_batches`` is set. ``plan_batches`` as on
the OpenAI server: ``"fail"`` (every request ``errored`` with an ``api_error``), ``"expire"`` (every
request ``expired``), ``"malformed"`` (broken lines and results that are no message), ``"refuse"`` (500).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from .openai_server import OpenAIServer, RecordedRequest, Reply

__all__ = ["AnthropicServer", "Reply", "error", "message", "overloaded", "rate_limited", "text", "thinking", "tool_use"]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, input: Any, id: str | None = None) -> dict[str, Any]:
    """A ``tool_use`` block; ``input`` is sent as given (pass a non-object to test malformed calls)."""
    return {"type": "tool_use", "id": id or f"toolu_{uuid.uuid4().hex[:10]}", "name": name, "input": input}


def thinking(value: str, signature: str = "sig-1") -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def message(*content: dict[str, Any] | str, stop_reason: str | None = None, model: str = "claude-test",
            usage: dict[str, int] | None = None) -> Reply:
    """A 200 ``Message``; strings become text blocks; the stop reason follows from the blocks if not given."""
    blocks = [text(c) if isinstance(c, str) else c for c in content]
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
    return Reply(body={
        "id": f"msg_{uuid.uuid4().hex[:10]}", "type": "message", "role": "assistant", "model": model,
        "content": blocks, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 5},
    })


def error(status: int, message: str, kind: str = "invalid_request_error",
          headers: dict[str, str] | None = None) -> Reply:
    """Anthropic's error envelope."""
    return Reply(status=status, headers=headers or {},
                 body={"type": "error", "error": {"type": kind, "message": message}})


def overloaded(retry_after: str | None = None) -> Reply:
    return error(529, "Overloaded", "overloaded_error", {"retry-after": retry_after} if retry_after else None)


def rate_limited(retry_after: str = "0") -> Reply:
    return error(429, "Number of request tokens has exceeded your per-minute rate limit", "rate_limit_error",
                 {"retry-after": retry_after})


Responder = Callable[[dict[str, Any]], Reply]


class AnthropicServer(OpenAIServer):
    """``with AnthropicServer() as server: server.enqueue(message("hi")); ... server.base_url``.

    ``responder(body) -> Reply`` answers once the queue is empty: concurrent samples each get the answer
    their own conversation calls for (queued replies, e.g. a 429 and a 529, still come first).
    """

    def __init__(self, responder: Responder | None = None) -> None:
        super().__init__(responder)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def _no_reply(self) -> Reply:
        return error(418, "no scripted reply left on the test server")

    def _route(self, request: RecordedRequest, raw: bytes) -> Reply | bytes:
        parts = request.path.split("?")[0].rstrip("/").split("/")
        if "batches" not in parts:
            if request.method == "POST":
                return self._next(request)
            # e.g. the preflight's models.list: answered, not recorded, no reply used up
            return error(404, f"nothing at {request.method} {request.path}", "not_found_error")
        with self._lock:
            self.requests.append(request)
        at = parts.index("batches")
        rest = parts[at + 1:]
        if request.method == "POST" and not rest:
            return self._create_message_batch(request.body)
        if request.method == "GET" and not rest:  # every batch, newest first, on one page
            with self._lock:
                data = [_public(b) for b in reversed(list(self.batches.values()))]
            return Reply(body={"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                               "last_id": data[-1]["id"] if data else None})
        with self._lock:
            batch = self.batches.get(rest[0]) if rest else None
        if batch is None:
            return error(404, f"no batch at {request.path}", "not_found_error")
        if request.method == "POST" and rest[1:] == ["cancel"]:
            self._end_message_batch(batch, cancelled=True)
            return Reply(body=_public(batch))
        if request.method == "GET" and rest[1:] == ["results"]:
            if batch["processing_status"] != "ended":
                return error(400, "batch has not ended")
            return batch["_results"].encode()
        if request.method == "GET" and not rest[1:]:
            if batch["processing_status"] == "in_progress" and not self.hold_batches.is_set():
                self._end_message_batch(batch)
            return Reply(body=_public(batch))
        return error(404, f"nothing at {request.method} {request.path}", "not_found_error")

    def _create_message_batch(self, body: Any) -> Reply:
        with self._lock:
            plan = self._batch_plan.popleft() if self._batch_plan else "complete"
        if plan == "refuse":
            return error(500, "the batch service is down", "api_error")
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return error(400, "requests: a non-empty list is required")
        batch_id = f"msgbatch_{uuid.uuid4().hex[:12]}"
        batch = {"id": batch_id, "type": "message_batch", "processing_status": "in_progress",
                 "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0,
                                    "expired": 0},
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "expires_at": "2099-01-02T00:00:00Z", "ended_at": None,
                 "cancel_initiated_at": None, "archived_at": None, "results_url": None, "_plan": plan}
        with self._lock:
            self.batches[batch_id] = batch
            self.batch_inputs[batch_id] = requests
        if self.on_batch_created is not None:
            self.on_batch_created(batch_id)
        return Reply(body=_public(batch))

    def _end_message_batch(self, batch: dict[str, Any], cancelled: bool = False) -> None:
        plan = "cancel" if cancelled else batch["_plan"]
        lines: list[str] = []
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for n, item in enumerate(self.batch_inputs[batch["id"]]):
            cid = item["custom_id"]
            if plan in ("cancel", "expire"):
                kind = "canceled" if plan == "cancel" else "expired"
                result: dict[str, Any] = {"type": kind}
            elif plan == "fail":
                kind, result = "errored", {"type": "errored", "error": {"type": "error", "error": {
                    "type": "api_error", "message": "internal error while processing the batch"}}}
            elif plan == "malformed":
                lines.append("{not json" if n % 2 else json.dumps({"custom_id": cid, "result": {
                    "type": "succeeded", "message": {"content": "not a list of blocks"}}}))
                counts["succeeded"] += 1
                continue
            else:
                reply = self._reply_for(item["params"])
                if reply.status == 200:
                    kind, result = "succeeded", {"type": "succeeded", "message": reply.body}
                else:
                    kind, result = "errored", {"type": "errored", "error": reply.body}
            counts[kind] += 1
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        host, port = self._httpd.server_address[:2]
        batch.update(processing_status="ended", request_counts=counts, ended_at="2026-01-01T00:01:00Z",
                     results_url=f"http://{host!s}:{port}/v1/messages/batches/{batch['id']}/results",
                     _results="\n".join(lines) + "\n")
        if cancelled:
            batch["cancel_initiated_at"] = "2026-01-01T00:00:30Z"


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}
