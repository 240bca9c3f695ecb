"""A chat-completions server on loopback, for driving the real ``openai`` SDK in tests.

Stdlib ``http.server`` in a background thread. Each chat completion pops the next scripted ``Reply``
(or, with the queue empty, asks ``responder(body)`` when one is given); every request but a GET outside
the Batch API is recorded (method, path, headers, JSON body) so tests can assert what the client sent. With no reply
queued and no responder it answers 418 (a status nobody retries), so a test that under-scripts fails
fast instead of hanging.

The Batch API too: ``POST /files`` (multipart, purpose "batch"), ``POST /batches``, ``GET /batches``
(every batch, newest first), ``GET /batches/{id}``, ``POST /batches/{id}/cancel``, ``GET /files/{id}/content``. A batch
is answered request by request like chat completions, when it is first retrieved, unless ``hold_batches`` is set
(it stays ``in_progress``). ``plan_batches(...)`` makes the next batches end otherwise: ``"fail"``
(rejected input), ``"expire"`` (every request expired, in the error file), ``"malformed"`` (an output
file of broken lines and bodies that are no completion) or ``"refuse"`` (the create call answers 500).
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any


def tool_call(name: str, arguments: dict[str, Any] | str, id: str | None = None) -> dict[str, Any]:
    """A wire tool call; pass a string to send arguments verbatim (e.g. malformed JSON)."""
    return {
        "id": id or f"call_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
    }


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
               finish_reason: str | None = None, model: str = "test-model",
               usage: tuple[int, int] | None = (10, 5)) -> Reply:
    """A 200 chat.completion with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return Reply(body=body)


def error(status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> Reply:
    """An OpenAI-style error envelope."""
    return Reply(status=status, headers=headers or {},
                 body={"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}})


class OpenAIServer:
    """``with OpenAIServer() as server: server.enqueue(completion("hi")); ... server.base_url``."""

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.requests: list[RecordedRequest] = []
        self.responder = responder
        self.hold_batches = threading.Event()  # set: batches stay in_progress
        # Called with a batch's id once it is created, before the creation is answered (a test kills
        # its client there: the provider accepted the batch, the client never learns its id).
        self.on_batch_created: Callable[[str], None] | None = None
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # id -> the batch object as last served
        self.batch_inputs: dict[str, list[dict[str, Any]]] = {}  # id -> its request lines, in creation order
        self._batch_plan: deque[str] = deque()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-test-server", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def plan_batches(self, *outcomes: str) -> None:
        """How the next batches end: "fail", "expire", "malformed", "refuse" or "complete"."""
        with self._lock:
            self._batch_plan.extend(outcomes)

    def paths(self, method: str = "POST") -> list[str]:
        return [r.path for r in self.requests if r.method == method]

    @property
    def direct_completions(self) -> int:
        """Generate requests made directly, not through a batch."""
        return sum(1 for r in self.requests if r.method == "POST" and "/batches" not in r.path
                   and not r.path.rstrip("/").endswith("/files"))

    def _reply_for(self, body: Any) -> Reply:
        """The answer to one generate request (direct, or an item of a batch)."""
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        if self.responder is not None and isinstance(body, dict):
            try:
                return self.responder(body)
            except Exception as exc:  # noqa: BLE001 - a broken test responder is a visible, non-retried 400
                return error(400, f"test responder failed: {type(exc).__name__}: {exc}")
        return self._no_reply()

    def _no_reply(self) -> Reply:
        return error(418, "no scripted reply left on the test server")

    def _next(self, request: RecordedRequest) -> Reply:
        """A direct generate request: recorded, then answered."""
        with self._lock:
            self.requests.append(request)
        return self._reply_for(request.body)

    # -- the Batch API ------------------------------------------------------------------------------

    def _upload(self, content_type: str, raw: bytes) -> Reply:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        if "file" not in parts or "purpose" not in parts:
            return error(400, "multipart upload needs 'file' and 'purpose'")
        data: Any = parts["file"].get_payload(decode=True) or b""  # decode=True: bytes
        file_id = f"file-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.files[file_id] = data
        return Reply(body={"id": file_id, "object": "file", "bytes": len(data), "created_at": 0,
                           "filename": parts["file"].get_filename() or "upload", "status": "processed",
                           "purpose": bytes(parts["purpose"].get_payload(decode=True) or b"").decode()})

    def _create_batch(self, body: Any) -> Reply:
        with self._lock:
            plan = self._batch_plan.popleft() if self._batch_plan else "complete"
            data = self.files.get(body.get("input_file_id", "")) if isinstance(body, dict) else None
        if plan == "refuse":
            return error(500, "the batch service is down")
        if data is None:
            return error(400, "unknown input_file_id", code="invalid_file")
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        batch_id = f"batch_{uuid.uuid4().hex[:12]}"
        batch = {"id": batch_id, "object": "batch", "endpoint": body.get("endpoint"), "errors": None,
                 "input_file_id": body["input_file_id"], "completion_window": body.get("completion_window"),
                 "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                 "metadata": body.get("metadata"), "_plan": plan}
        with self._lock:
            self.batches[batch_id] = batch
            self.batch_inputs[batch_id] = lines
        if self.on_batch_created is not None:
            self.on_batch_created(batch_id)
        return Reply(body=_public(batch))

    def _list_batches(self) -> Reply:
        """Every batch, newest first, on one page (as ``batches.list`` pages them)."""
        with self._lock:
            data = [_public(b) for b in reversed(list(self.batches.values()))]
        return Reply(body={"object": "list", "data": data, "has_more": False,
                           "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})

    def _retrieve_batch(self, batch_id: str) -> Reply:
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None:
            return error(404, f"no batch {batch_id}")
        if batch["status"] in ("validating", "in_progress"):
            if self.hold_batches.is_set():
                batch["status"] = "in_progress"
            else:
                self._finish(batch)
        return Reply(body=_public(batch))

    def _finish(self, batch: dict[str, Any]) -> None:
        plan, lines = batch["_plan"], self.batch_inputs[batch["id"]]
        out: list[str] = []
        errors: list[str] = []
        if plan == "fail":
            batch["status"] = "failed"
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "line": 1,
                                                           "message": "the input file is not valid"}]}
            return
        for n, line in enumerate(lines):
            cid = line["custom_id"]
            if plan == "expire":
                errors.append(json.dumps({"id": f"req_{n}", "custom_id": cid, "response": None, "error": {
                    "code": "batch_expired", "message": "not executed before the completion window expired"}}))
            elif plan == "malformed":
                out.append("{not json" if n % 2 else json.dumps(
                    {"id": f"req_{n}", "custom_id": cid, "response": {"status_code": 200, "body": {"bogus": 1}}}))
            else:
                reply = self._reply_for(line["body"])
                record = json.dumps({"id": f"req_{n}", "custom_id": cid, "error": None, "response": {
                    "status_code": reply.status, "request_id": f"r{n}", "body": reply.body}})
                (out if reply.status == 200 else errors).append(record)
        batch["status"] = "expired" if plan == "expire" else "completed"
        batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(errors)}
        for key, content in (("output_file_id", out), ("error_file_id", errors)):
            if content:
                file_id = f"file-{uuid.uuid4().hex[:12]}"
                with self._lock:
                    self.files[file_id] = ("\n".join(content) + "\n").encode()
                batch[key] = file_id

    def _cancel_batch(self, batch_id: str) -> Reply:
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None:
            return error(404, f"no batch {batch_id}")
        batch["status"] = "cancelled"
        return Reply(body=_public(batch))

    def _route(self, request: RecordedRequest, raw: bytes) -> Reply | bytes:
        """Batch and file endpoints here; any other POST is a direct generate request (``_next``)."""
        method, path, headers, body = request.method, request.path, request.headers, request.body
        parts = path.split("?")[0].rstrip("/").split("/")
        if method == "POST" and "batches" not in parts and parts[-1] != "files":
            return self._next(request)
        if "batches" not in parts and "files" not in parts:
            # e.g. the preflight's models.list: answered, not recorded (tests count generate requests)
            return error(404, f"nothing at {method} {path}")
        with self._lock:
            self.requests.append(request)
        if method == "POST" and path.endswith("/files"):
            return self._upload(headers.get("content-type", ""), raw)
        if method == "POST" and path.endswith("/batches"):
            return self._create_batch(body)
        if method == "POST" and len(parts) >= 2 and parts[-3:-2] == ["batches"] and parts[-1] == "cancel":
            return self._cancel_batch(parts[-2])
        if method == "GET" and parts[-1] == "batches":
            return self._list_batches()
        if method == "GET" and len(parts) >= 2 and parts[-2] == "batches":
            return self._retrieve_batch(parts[-1])
        if method == "GET" and parts[-1] == "content" and len(parts) >= 3 and parts[-3] == "files":
            with self._lock:
                data = self.files.get(parts[-2])
            return data if data is not None else error(404, "no such file")
        return error(404, f"nothing at {method} {path}")

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply | bytes:
        try:
            body: Any = json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = raw.decode("utf-8", "replace")
        return self._route(RecordedRequest(method, path, headers, body), raw)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server naming
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                reply = server._handle(method, self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                if isinstance(reply, bytes):  # a file's content
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                    return
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = payload.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                # the client may be gone (a test killed it mid-request): nobody to answer
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}
