"""Tool specifications sent to providers, and their extraction from signatures and docstrings.

Extraction is pure and cached per function code object: closures made by the same factory share
one schema, so per-call work never re-reflects a function.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, get_type_hints

import docstring_parser
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, TypeAdapter

from ._schema import self_contained


class ToolParam(BaseModel):
    """JSON Schema of one parameter (any JSON Schema keyword is allowed; nested schemas are typed)."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str] | None = None
    format: str | None = None
    description: str | None = None
    enum: list[Any] | None = None
    items: ToolParam | None = None
    properties: dict[str, ToolParam] | None = None
    additionalProperties: bool | ToolParam | None = None
    anyOf: list[ToolParam] | None = None
    required: list[str] | None = None


class ToolParams(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    type: str = "object"
    properties: dict[str, ToolParam] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)
    additionalProperties: bool = False
    defs: dict[str, Any] | None = Field(default=None, alias="$defs")

    def json_schema(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, by_alias=True)


class ToolInfo(BaseModel):
    """What a provider receives: name, description and a JSON Schema for the parameters."""

    name: str
    description: str
    parameters: ToolParams = Field(default_factory=ToolParams)


@dataclass(frozen=True)
class ParsedFunction:
    """What reflection yields for one function, before any override."""

    description: str | None
    params: ToolParams
    param_descriptions: dict[str, str]
    hints: dict[str, Any]  # annotated type per parameter (for deserialisation)
    accepts_kwargs: bool
    defaults: dict[str, Any]


_CACHE: dict[Any, ParsedFunction] = {}


def _cache_key(func: Callable[..., Any]) -> Any:
    code = getattr(func, "__code__", None)
    return code if code is not None else type(func)


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _docstring_type_schema(type_name: str | None) -> dict[str, Any]:
    mapping = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array",
               "dict": "object"}
    if type_name and type_name.strip() in mapping:
        return {"type": mapping[type_name.strip()]}
    return {}


@lru_cache(maxsize=512)
def _typeddict_clone(hint: Any) -> Any:
    fields = {k: adaptable_hint(v) for k, v in get_type_hints(hint).items()}
    clone = typing_extensions.TypedDict(hint.__name__, fields, total=hint.__total__)  # type: ignore[misc]  # built at run time
    clone.__module__ = hint.__module__
    return clone


def adaptable_hint(hint: Any) -> Any:
    """Pydantic on Python < 3.12 refuses ``typing.TypedDict``; rebuild such hints on typing_extensions."""
    if typing_extensions.is_typeddict(hint) and type(hint).__module__ == "typing":
        return _typeddict_clone(hint)
    args = typing.get_args(hint)
    if args and typing.get_origin(hint) is not typing.Annotated:
        new_args = tuple(adaptable_hint(a) for a in args)
        if new_args != args:
            try:
                return hint.copy_with(new_args)
            except AttributeError:
                return typing.get_origin(hint)[new_args]
    return hint


def _param_schema(hint: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A parameter's self-contained, closed schema (as Inspect builds it) and any recursive defs.

    A type pydantic cannot describe (a plain class) gets an open schema, as in Inspect: the model
    sees only the description, and the tool receives the JSON value as given.
    """
    try:
        schema = _strip_titles(TypeAdapter(adaptable_hint(hint)).json_schema())
    except PydanticUserError:
        return {}, {}
    return self_contained(schema, schema.pop("$defs", {}))


def parse_function(func: Callable[..., Any]) -> ParsedFunction:
    """Reflect a tool function's signature and docstring (cached per code object)."""
    key = _cache_key(func)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached

    target = func if inspect.isfunction(func) or inspect.ismethod(func) else type(func).__call__
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(target, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward refs: fall back to raw annotations
        hints = dict(getattr(target, "__annotations__", {}))
    hints.pop("return", None)

    doc = docstring_parser.parse(inspect.getdoc(func) or "")
    doc_params = {p.arg_name: p for p in doc.params}
    description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part) or None

    properties: dict[str, ToolParam] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    param_descriptions: dict[str, str] = {}
    defaults: dict[str, Any] = {}
    accepts_kwargs = False
    param_hints: dict[str, Any] = {}
    for pname, param in signature.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_kwargs = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        hint = hints.get(pname, param.annotation)
        schema: dict[str, Any]
        if hint is inspect.Parameter.empty:
            hint = Any
            schema = _docstring_type_schema(doc_params[pname].type_name if pname in doc_params else None)
        else:
            schema, needed = _param_schema(hint)
            defs.update(needed)
        param_hints[pname] = hint
        doc_param = doc_params.get(pname)
        if doc_param is not None and doc_param.description:
            param_descriptions[pname] = doc_param.description
            schema["description"] = doc_param.description
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            defaults[pname] = param.default
            with contextlib.suppress(Exception):  # a default pydantic cannot serialise: no "default" key
                schema["default"] = TypeAdapter(Any).dump_python(param.default, mode="json")
        properties[pname] = ToolParam(**schema)

    parsed = ParsedFunction(
        description=description,
        params=ToolParams(properties=properties, required=required, defs=defs or None),
        param_descriptions=param_descriptions,
        hints=param_hints,
        accepts_kwargs=accepts_kwargs,
        defaults=defaults,
    )
    _CACHE[key] = parsed
    return parsed


def is_optional(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    unions = (typing.Union, getattr(__import__("types"), "UnionType", None))
    return origin in unions and type(None) in typing.get_args(hint)
