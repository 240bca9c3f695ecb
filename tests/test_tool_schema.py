"""Schema extraction and ToolDef normalisation."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

import pytest

from orchestrator.tool import ToolDef, ToolParams, set_tool_description, tool, tool_with
from orchestrator.tool._registry import ToolRef, rebuild_tool, tool_meta
from orchestrator.tool._tool_info import parse_function
from tests.support import sample_tools
from tests.support.sample_tools import Color, Person, Point


def props(func) -> dict[str, Any]:
    return ToolDef(func).info.parameters.json_schema()


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ("count", {"type": "integer"}),
        ("ratio", {"type": "number"}),
        ("flag", {"type": "boolean"}),
        ("name", {"type": "string"}),
        ("when", {"type": "string", "format": "date-time"}),
        ("day", {"type": "string", "format": "date"}),
        ("at", {"type": "string", "format": "time"}),
        ("numbers", {"type": "array", "items": {"type": "integer"}}),
        ("tags", {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        ("scores", {"type": "object", "additionalProperties": {"type": "number"}}),
        ("maybe", {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    ],
)
def test_schema_for_each_type(param: str, expected: dict[str, Any]) -> None:
    schema = props(sample_tools.typed())["properties"][param]
    schema.pop("description")
    assert schema == expected


def test_schema_for_structured_types_is_self_contained() -> None:
    schema = props(sample_tools.typed())
    p = schema["properties"]
    assert p["color"]["enum"] == ["red", "blue"]
    assert set(p["point"]["properties"]) == {"x", "y"}
    assert set(p["person"]["required"]) == {"name", "age"}
    assert p["box"]["type"] == "object" and set(p["box"]["properties"]) == {"width", "height"}
    # as in Inspect: nested models are inlined (no $defs) and closed like the top level
    assert p["points"]["items"]["properties"] == p["point"]["properties"] and "$defs" not in schema
    assert p["points"]["items"]["additionalProperties"] is False and p["box"]["additionalProperties"] is False
    assert schema["properties"]["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]


def test_required_are_params_without_defaults_and_no_extras() -> None:
    schema = props(sample_tools.typed())
    assert "maybe" not in schema["required"] and "maybe_missing" not in schema["required"]
    assert {"count", "when", "point", "pair"} <= set(schema["required"])
    assert schema["additionalProperties"] is False


def test_descriptions_from_google_numpy_and_rest_docstrings() -> None:
    async def google(a: int) -> str:
        """Google style.

        Args:
            a: the a param.
        """
        return ""

    async def numpy(a: int) -> str:
        """NumPy style.

        Parameters
        ----------
        a : int
            the a param.
        """
        return ""

    async def rest(a: int) -> str:
        """reST style.

        :param a: the a param.
        """
        return ""

    for func, desc in ((google, "Google style."), (numpy, "NumPy style."), (rest, "reST style.")):
        info = ToolDef(func).info
        assert info.description == desc
        assert info.parameters.properties["a"].description == "the a param."


def test_missing_tool_description_is_an_error() -> None:
    async def nodoc(a: int) -> str:
        return ""

    with pytest.raises(ValueError) as err:  # noqa: PT011 - the exact message is asserted below
        ToolDef(nodoc)
    assert str(err.value) == "Description not provided for tool function 'nodoc'"


def test_missing_parameter_description_is_an_error() -> None:
    async def half(a: int, b: int) -> str:
        """Half documented.

        Args:
            a: documented.
        """
        return ""

    with pytest.raises(ValueError) as err:  # noqa: PT011 - the exact message is asserted below
        ToolDef(half)
    assert str(err.value) == "Description not provided for parameter 'b' of function 'half'."


def test_parallel_defaults_to_false() -> None:
    assert ToolDef(sample_tools.noop_serial()).parallel is False
    assert ToolDef(sample_tools.noop()).parallel is True


def test_description_precedence() -> None:
    # signature + docstring < @tool(name=) < set_tool_description/tool_with < explicit ToolDef args
    base = sample_tools.add()
    assert ToolDef(base).name == "add" and ToolDef(base).description == "Add two integers."
    renamed = tool_with(sample_tools.add(), name="plus", description="Sum.", parameters={"x": "left"})
    d = ToolDef(renamed)
    assert (d.name, d.description, d.parameters.properties["x"].description) == ("plus", "Sum.", "left")
    explicit = ToolDef(renamed, name="sum2", description="Explicit.", parameters={"x": "LEFT"})
    described = (explicit.name, explicit.description, explicit.parameters.properties["x"].description)
    assert described == ("sum2", "Explicit.", "LEFT")
    described = set_tool_description(sample_tools.add(), description="Overridden.")
    assert ToolDef(described).description == "Overridden."
    assert ToolDef(described, description="Top.").description == "Top."


def test_override_of_unknown_parameter_is_an_error() -> None:
    with pytest.raises(ValueError, match="'z'"):
        ToolDef(sample_tools.add(), parameters={"z": "no such"})


def test_bare_callable_and_as_tool() -> None:
    async def execute(text: str) -> str:
        """Shout.

        Args:
            text: what to shout.
        """
        return text.upper()

    definition = ToolDef(execute, name="shout", description="Say it loudly.")
    as_tool = definition.as_tool()
    again = ToolDef(as_tool)
    assert (again.name, again.description) == ("shout", "Say it loudly.")
    assert again.parameters.properties["text"].description == "what to shout."


def test_explicit_params_with_kwargs_tool() -> None:
    params = ToolParams(properties={"a": {"type": "integer", "description": "a"}}, required=["a"])
    d = ToolDef(sample_tools.passthrough(), parameters=params)
    assert d.info.parameters.required == ["a"]
    assert d.deserialize({"a": 1, "b": 2}) == {"a": 1, "b": 2}


def test_deserialisation_into_annotated_types() -> None:
    d = ToolDef(sample_tools.typed())
    kwargs = d.deserialize({
        "count": 3, "ratio": 0.5, "flag": True, "name": "n",
        "when": "2024-01-02T03:04:05Z", "day": "2024-01-02", "at": "03:04:05",
        "color": "red", "point": {"x": 1, "y": 2}, "box": {"width": 1.0, "height": 2.0},
        "person": {"name": "a", "age": 3}, "numbers": [1, 2], "tags": ["a", "a", "b"],
        "pair": [1, "x"], "scores": {"a": 1.5}, "points": [{"x": 0, "y": 0}],
    })
    assert kwargs["when"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert kwargs["day"] == dt.date(2024, 1, 2) and kwargs["at"] == dt.time(3, 4, 5)
    assert kwargs["color"] is Color.RED
    assert kwargs["point"] == Point(1, 2) and isinstance(kwargs["points"][0], Point)
    assert kwargs["box"] == {"width": 1.0, "height": 2.0}
    assert isinstance(kwargs["person"], Person)
    assert kwargs["tags"] == {"a", "b"} and kwargs["pair"] == (1, "x")
    assert "maybe" not in kwargs  # omitted optional with a default: the function default applies


def test_missing_required_parameter_message() -> None:
    from orchestrator.tool import ToolParsingError

    with pytest.raises(ToolParsingError) as err:
        ToolDef(sample_tools.add()).deserialize({"x": 1})
    assert err.value.message == "Required parameter y not provided to tool call."


def test_registry_rebuilds_by_name_with_factory_arguments() -> None:
    @tool(name="greeter_for_test")
    def greeter(greeting: str = "hello"):
        async def execute(who: str) -> str:
            """Greet.

            Args:
                who: whom to greet.
            """
            return f"{greeting} {who}"

        return execute

    instance = greeter(greeting="hi")
    ref = tool_meta(instance).ref
    assert ref == ToolRef(name="greeter_for_test", params={"greeting": "hi"}, module=__name__)
    rebuilt = rebuild_tool(ref)
    assert ToolDef(rebuilt).name == "greeter_for_test"


def test_unknown_registry_name_names_the_module() -> None:
    from orchestrator.tool._registry import ToolNotRegisteredError

    with pytest.raises(ToolNotRegisteredError, match=r"--import mypkg\.tools"):
        rebuild_tool(ToolRef(name="never_registered", module="mypkg.tools"))


def test_schema_reflection_is_cached_per_code_object() -> None:
    a, b = sample_tools.add(), sample_tools.add()
    assert a is not b
    assert parse_function(a) is parse_function(b)


def test_optional_without_default_is_not_required_in_deserialisation() -> None:
    async def f(a: Optional[int]) -> str:  # noqa: UP045 - tool authors write typing.Optional: its schema is under test
        """F.

        Args:
            a: maybe.
        """
        return ""

    assert ToolDef(f).deserialize({}) == {"a": None}
