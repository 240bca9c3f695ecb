"""Content parts of messages and tool results (mirrors Inspect's ``Content*`` types)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field


class ContentText(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ContentImage(BaseModel):
    type: Literal["image"] = "image"
    image: str  # URL or data: URI
    detail: Literal["auto", "low", "high"] = "auto"


class ContentReasoning(BaseModel):
    """Model reasoning (Inspect's part; kept in messages and logs, not sent back to OpenAI chat)."""

    type: Literal["reasoning"] = "reasoning"
    reasoning: str
    summary: str | None = None
    signature: str | None = None
    redacted: bool = False


class ContentDocument(BaseModel):
    """A document (Inspect's part: a path, URL or data URI, with its file name and MIME type)."""

    type: Literal["document"] = "document"
    document: str
    filename: str
    mime_type: str
    citations: bool = False


class ContentToolUse(BaseModel):
    """A server-side tool use the provider ran itself (Inspect's part), kept for the record."""

    type: Literal["tool_use"] = "tool_use"
    tool_type: Literal["web_search", "mcp_call", "code_execution"]
    id: str
    name: str
    context: str | None = None
    arguments: str
    result: str
    error: str | None = None


Content = Annotated[
    Union[ContentText, ContentImage, ContentReasoning, ContentDocument, ContentToolUse], Field(discriminator="type")
]
