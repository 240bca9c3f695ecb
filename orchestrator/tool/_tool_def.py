"""``ToolDef``: one normalised definition for a registered tool, a bare callable, or explicit fields.

Everything that can be computed once per tool is: the ``ToolInfo``, the Draft 7 validator and the
pydantic ``TypeAdapter`` per parameter. ``tool_defs()`` caches ``ToolDef``s per tool instance, so a
turn's calls do no reflection.
"""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from typing import Any

import fastjsonschema
import jsonschema
from pydantic import PydanticUserError, TypeAdapter, ValidationError

from ._errors import ToolParsingError
from ._registry import TOOL_META_ATTR, RunsOn, TimeoutBehavior, ToolMeta, ToolRef, tool_meta
from ._tool import Tool
from ._tool_info import ParsedFunction, ToolInfo, ToolParam, ToolParams, adaptable_hint, is_optional, parse_function

_UNSET: Any = object()


@lru_cache(maxsize=4096)
def _validator_for(schema_json: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(schema_json))


@lru_cache(maxsize=4096)
def _fast_check_for(schema_json: str) -> Callable[[Any], Any] | None:
    """A compiled Draft 7 check (fastjsonschema) used only to skip the slow path for valid input.

    ``jsonschema`` stays the authority: it produces the error messages, and input the compiled
    check rejects is re-checked by it (the two may differ on formats).
    """
    try:
        # use_default=False: the check must not write schema defaults into the model's arguments
        # (the ToolCall in the history keeps what the model sent, as in Inspect).
        return fastjsonschema.compile(json.loads(schema_json), use_default=False)
    except Exception:  # noqa: BLE001 - a schema fastjsonschema cannot compile: always take the slow path
        return None


@lru_cache(maxsize=4096)
def _adapter_for(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(adaptable_hint(hint))


class ToolDef:
    """A tool's complete definition: callable, name, description, parameters and behaviour."""

    tool: Callable[..., Any]
    meta: ToolMeta
    parsed: ParsedFunction
    name: str
    description: str | None
    parameters: ToolParams

    def __init__(
        self,
        tool: Callable[..., Any] | ToolDef,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, str] | ToolParams | None = None,
        parallel: bool | None = None,
        viewer: Callable[..., Any] | None = None,
        max_output: int | None = _UNSET,
        timeout: float | None = _UNSET,
        timeout_behavior: TimeoutBehavior | None = None,
        needs_approval: bool | Callable[..., Any] | None = None,
        is_enabled: bool | Callable[..., Any] | None = None,
        runs_on: RunsOn | None = None,
        input_guardrails: Sequence[Callable[..., Any]] | None = None,
        output_guardrails: Sequence[Callable[..., Any]] | None = None,
    ) -> None:
        if isinstance(tool, ToolDef):
            base: ToolDef = tool
            self.tool = base.tool
            self.meta = copy.copy(base.meta)
            self.parsed = base.parsed
            self.name, self.description, self.parameters = base.name, base.description, base.parameters
        else:
            self.tool = tool
            meta = tool_meta(tool)
            self.parsed = parse_function(tool)
            self.meta = copy.copy(meta) if meta else ToolMeta(name=getattr(tool, "__name__", "tool"), ref=None)
            self.name = self.meta.name
            # Precedence: set_tool_description/tool_with > signature + docstring.
            self.description = self.meta.description or self.parsed.description
            if self.meta.prompt:  # Inspect's deprecated @tool(prompt=...) is appended
                self.description = f"{self.description}. {self.meta.prompt}" if self.description else self.meta.prompt
            params = self.parsed.params.model_copy(deep=True)
            _apply_param_descriptions(params, self.meta.param_descriptions, self.name)
            self.parameters = params

        # Explicit ToolDef arguments override everything extracted.
        if name is not None:
            self.name = name
            self.meta.name = name
        if description is not None:
            self.description = description
        if isinstance(parameters, ToolParams):
            self.parameters = parameters
        elif parameters:
            self.parameters = self.parameters.model_copy(deep=True)
            _apply_param_descriptions(self.parameters, parameters, self.name)
        for attr, value in (
            ("parallel", parallel),
            ("viewer", viewer),
            ("timeout_behavior", timeout_behavior),
            ("needs_approval", needs_approval),
            ("is_enabled", is_enabled),
            ("runs_on", runs_on),
        ):
            if value is not None:
                setattr(self.meta, attr, value)
        if max_output is not _UNSET:
            self.meta.max_output = max_output
        if timeout is not _UNSET:
            self.meta.timeout = timeout
        if input_guardrails is not None:
            self.meta.input_guardrails = tuple(input_guardrails)
        if output_guardrails is not None:
            self.meta.output_guardrails = tuple(output_guardrails)
        # Inspect checks descriptions only where it derives the schema itself: an explicit
        # ToolParams is taken as the caller wrote it.
        self._validate_descriptions(check_params=not isinstance(parameters, ToolParams))

    # -- behaviour options (read through to the metadata) ----------------------------------
    parallel = property(lambda self: self.meta.parallel)
    viewer = property(lambda self: self.meta.viewer)
    max_output = property(lambda self: self.meta.max_output)
    timeout = property(lambda self: self.meta.timeout)
    timeout_behavior = property(lambda self: self.meta.timeout_behavior)
    needs_approval = property(lambda self: self.meta.needs_approval)
    is_enabled = property(lambda self: self.meta.is_enabled)
    runs_on = property(lambda self: self.meta.runs_on)
    input_guardrails = property(lambda self: self.meta.input_guardrails)
    output_guardrails = property(lambda self: self.meta.output_guardrails)
    ref: ToolRef | None = property(lambda self: self.meta.ref)  # type: ignore[assignment]  # a read-only view of meta.ref

    def _validate_descriptions(self, check_params: bool = True) -> None:
        if not self.description:
            raise ValueError(f"Description not provided for tool function '{self.name}'")
        if not check_params:
            return
        for pname, param in self.parameters.properties.items():
            if not param.description:
                raise ValueError(f"Description not provided for parameter '{pname}' of function '{self.name}'.")

    @cached_property
    def info(self) -> ToolInfo:
        return ToolInfo(name=self.name, description=self.description, parameters=self.parameters)

    @cached_property
    def _schema_json(self) -> str:
        return json.dumps(self.parameters.json_schema(), sort_keys=True)

    @cached_property
    def _validator(self) -> jsonschema.Draft7Validator:
        return _validator_for(self._schema_json)

    @cached_property
    def _fast_check(self) -> Callable[[Any], Any] | None:
        return _fast_check_for(self._schema_json)

    def validation_errors(self, arguments: dict[str, Any]) -> list[str]:
        """Every Draft 7 validation error for these arguments (empty when valid)."""
        check = self._fast_check
        if check is not None:
            try:
                check(arguments)
                return []
            except fastjsonschema.JsonSchemaException:
                pass
        return [error.message for error in self._validator.iter_errors(arguments)]

    def deserialize(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Turn JSON arguments into the annotated Python types (raises ToolParsingError)."""
        return deserialize_arguments(self.parsed, arguments)

    def is_enabled_now(self) -> bool:
        enabled = self.meta.is_enabled
        return bool(enabled() if callable(enabled) else enabled)

    def as_tool(self) -> Tool:
        """Tag the callable so it is a valid tool with this definition's name and descriptions."""
        meta = copy.copy(self.meta)
        meta.description = self.description
        meta.param_descriptions = {k: p.description or "" for k, p in self.parameters.properties.items()}
        setattr(self.tool, TOOL_META_ATTR, meta)
        return self.tool

    def __repr__(self) -> str:
        return f"ToolDef(name={self.name!r}, parallel={self.parallel})"


def _apply_param_descriptions(params: ToolParams, descriptions: dict[str, str], tool_name: str) -> None:
    for pname, text in descriptions.items():
        param = params.properties.get(pname)
        if param is None:
            raise ValueError(f"Parameter '{pname}' does not exist on tool '{tool_name}'.")
        params.properties[pname] = ToolParam(**{**param.model_dump(exclude_none=True), "description": text})


def deserialize_arguments(parsed: ParsedFunction, arguments: dict[str, Any]) -> dict[str, Any]:
    if parsed.accepts_kwargs and not parsed.hints:
        return dict(arguments)
    kwargs: dict[str, Any] = dict(arguments) if parsed.accepts_kwargs else {}
    for pname, hint in parsed.hints.items():
        if pname in arguments:
            try:
                value = _adapter_for(hint).validate_python(arguments[pname])
            except ValidationError as exc:
                detail = "; ".join(e["msg"] for e in exc.errors())
                raise ToolParsingError(f"Error parsing argument '{pname}': {detail}") from exc
            except (TypeError, PydanticUserError):  # unhashable/unsupported hint: the JSON value as given
                value = arguments[pname]
            if isinstance(value, datetime) and value.tzinfo is None:
                value = value.replace(tzinfo=UTC)  # as Inspect: a naive time means UTC
            kwargs[pname] = value
        elif pname in parsed.defaults:
            continue
        elif is_optional(hint):
            kwargs[pname] = None
        else:
            raise ToolParsingError(f"Required parameter {pname} not provided to tool call.")
    return kwargs


_TOOLDEF_CACHE: weakref.WeakKeyDictionary[Any, tuple[Any, int, ToolDef]] = weakref.WeakKeyDictionary()


def tool_def(tool: Callable[..., Any] | ToolDef) -> ToolDef:
    """The cached ``ToolDef`` for a tool instance (rebuilt only if its overrides change)."""
    if isinstance(tool, ToolDef):
        return tool
    meta = tool_meta(tool)
    version = meta.version if meta is not None else 0
    try:
        cached = _TOOLDEF_CACHE.get(tool)
    except TypeError:  # not weak-referenceable
        return ToolDef(tool)
    # Rebuild when the tool's metadata was replaced (as_tool) or overridden (set_tool_description).
    if cached is None or cached[0] is not meta or cached[1] != version:
        cached = (meta, version, ToolDef(tool))
        _TOOLDEF_CACHE[tool] = cached
    return cached[2]


def tool_defs(tools: Sequence[Callable[..., Any] | ToolDef]) -> list[ToolDef]:
    return [tool_def(t) for t in tools]
