"""Content parts a tool may return besides plain scalars."""

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


Content = Annotated[Union[ContentText, ContentImage], Field(discriminator="type")]
