"""Content parts of messages and tool results (mirrors Inspect's ``Content*`` types)."""

from __future__ import annotations

import mimetypes
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue, model_validator


def _internal() -> Any:
    # Provider-internal data (Inspect's ``internal``): kept on the part, left out of the JSON when
    # absent so wire and log payloads are unchanged for the common case.
    return Field(default=None, exclude_if=lambda value: value is None)


class ContentText(BaseModel):
    type: Literal["text"] = "text"
    internal: JsonValue | None = _internal()
    text: str


class ContentImage(BaseModel):
    type: Literal["image"] = "image"
    internal: JsonValue | None = _internal()
    image: str  # URL or data: URI
    detail: Literal["auto", "low", "high"] = "auto"


class ContentReasoning(BaseModel):
    """Model reasoning (Inspect's part; kept in messages and logs, not sent back to OpenAI chat)."""

    type: Literal["reasoning"] = "reasoning"
    internal: JsonValue | None = _internal()
    reasoning: str
    summary: str | None = None
    signature: str | None = None
    redacted: bool = False


class ContentDocument(BaseModel):
    """A document (Inspect's part: a path, URL or data URI, with its file name and MIME type)."""

    type: Literal["document"] = "document"
    internal: JsonValue | None = _internal()
    document: str
    filename: str = ""
    mime_type: str = ""
    citations: bool = False

    @model_validator(mode="before")
    @classmethod
    def _infer_name_and_type(cls, data: Any) -> Any:
        # As Inspect: a missing file name / MIME type is read off the document (path or data URI).
        if not isinstance(data, dict) or not isinstance(data.get("document"), str) or not data["document"]:
            return data
        document, filename, mime_type = data["document"], data.get("filename"), data.get("mime_type")
        if document.startswith("data:"):
            mime_type = mime_type or document[5:].split(";", 1)[0].split(",", 1)[0] or "application/octet-stream"
            filename = filename or f"document.{mime_type.split('/')[-1]}"
        else:
            filename = filename or PurePosixPath(document).name
            mime_type = mime_type or mimetypes.guess_type(document)[0] or "application/octet-stream"
        return {**data, "filename": filename, "mime_type": mime_type}


class ContentToolUse(BaseModel):
    """A server-side tool use the provider ran itself (Inspect's part), kept for the record."""

    type: Literal["tool_use"] = "tool_use"
    internal: JsonValue | None = _internal()
    tool_type: Literal["web_search", "mcp_call", "code_execution"]
    id: str
    name: str
    context: str | None = None
    arguments: str
    result: str
    error: str | None = None


Content = Annotated[
    ContentText | ContentImage | ContentReasoning | ContentDocument | ContentToolUse, Field(discriminator="type")
]
