"""A Messages-API server on loopback, for driving the real ``anthropic`` SDK in tests.

The same scripted-reply machinery as ``openai_server`` (each POST pops the next ``Reply``; every
request is recorded), with Anthropic's shapes: ``message(...)`` builds a 200 ``Message`` from content
blocks, ``error(...)`` Anthropic's error envelope (``overloaded()`` is the 529). ``base_url`` is the
SDK's form, without ``/v1``. With no reply queued it answers 418, so an under-scripted test fails fast.
"""

from __future__ import annotations

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


def error(status: int, message: str, kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> Reply:
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
        super().__init__()
        self.responder = responder

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        if self.responder is not None and isinstance(request.body, dict):
            try:
                return self.responder(request.body)
            except Exception as exc:  # noqa: BLE001 - a broken test responder is a visible, non-retried 400
                return error(400, f"test responder failed: {type(exc).__name__}: {exc}")
        return error(418, "no scripted reply left on the test server")
