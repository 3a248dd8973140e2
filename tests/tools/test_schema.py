"""Tool schemas from signatures and docstrings: small, stable, and what jsonschema validates."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Literal

import jsonschema
import pydantic
import pytest

from luna.tools.schema import schema_from_function


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


async def everything(
    title: str,
    count: Annotated[int, pydantic.Field(ge=1, le=10)] = 3,
    tags: list[str] | None = None,
    mode: Literal["fast", "slow"] | None = None,
    colour: Colour = Colour.RED,
    where: Point | None = None,
    extra: dict[str, Any] | None = None,
    anything: Any = None,
    *args: Any,
    ctx: object = None,
    **kwargs: Any,
) -> str:
    """Do everything at once.

    A second paragraph
    on two lines.

    Args:
        title: The title (a parameter whose name is a JSON-schema keyword).
        count: How many,
            between one and ten.
        tags: Labels.
        mode: How to run.

    Returns:
        Nothing useful.
    """
    return ""


def test_schema_is_small_stable_and_keeps_what_matters() -> None:
    description, params = schema_from_function(everything)
    assert description == "Do everything at once.\n\nA second paragraph\non two lines."
    assert list(params) == ["type", "properties", "required", "additionalProperties"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["title"]
    props = params["properties"]
    assert list(props) == ["title", "count", "tags", "mode", "colour", "where", "extra", "anything"]
    assert props["title"] == {
        "type": "string",
        "description": "The title (a parameter whose name is a JSON-schema keyword).",
    }
    assert props["count"] == {
        "type": "integer",
        "maximum": 10,
        "minimum": 1,
        "description": "How many, between one and ten.",
        "default": 3,
    }
    assert props["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "description": "Labels.",
    }
    # null is not one of the enum values, so this one stays an anyOf
    assert props["mode"] == {
        "anyOf": [{"type": "string", "enum": ["fast", "slow"]}, {"type": "null"}],
        "description": "How to run.",
    }
    assert props["colour"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    point = {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
        "required": ["x"],
    }
    assert props["where"] == {**point, "type": ["object", "null"]}  # $defs inlined
    assert props["extra"] == {"type": ["object", "null"]}
    assert props["anything"] == {}
    text = json.dumps(params)
    assert '"title": {' in text and '"title": "' not in text  # the property stays, titles go
    assert "$ref" not in text and "$defs" not in text and '"default": null' not in text
    assert list(props["count"]) == ["type", "maximum", "minimum", "description", "default"]
    assert schema_from_function(everything) == (description, params)  # same input, same text


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"title": "t"}, None),
        ({"title": "t", "count": 10, "tags": None, "mode": "fast", "where": {"x": 1}}, None),
        ({"title": "t", "extra": {"any": ["thing"]}, "anything": [1, "a"]}, None),
        ({}, "'title' is a required property"),
        ({"title": "t", "count": 11}, "11 is greater than the maximum of 10"),
        ({"title": "t", "mode": "medium"}, "'medium' is not valid under any of the given schemas"),
        ({"title": "t", "colour": "green"}, "'green' is not one of ['red', 'blue']"),
        ({"title": "t", "where": {"y": 1}}, "'x' is a required property"),
        ({"title": "t", "ctx": 1}, "Additional properties are not allowed ('ctx' was unexpected)"),
    ],
)
def test_schema_validates_with_jsonschema(args: dict[str, Any], problem: str | None) -> None:
    _, params = schema_from_function(everything)
    jsonschema.Draft202012Validator.check_schema(params)
    errors = [e.message for e in jsonschema.Draft202012Validator(params).iter_errors(args)]
    if problem is None:
        assert errors == []
    else:
        assert any(problem in e for e in errors), errors


async def clashing(schema: str, json: int, model_config: bool = False, copy: str = "") -> str:
    """Parameter names that are also pydantic's own attributes."""
    return ""


def test_schema_parameter_names_never_clash_with_pydantic() -> None:
    description, params = schema_from_function(clashing)
    assert description == "Parameter names that are also pydantic's own attributes."
    assert list(params["properties"]) == ["schema", "json", "model_config", "copy"]
    assert params["required"] == ["schema", "json"]
    assert params["properties"]["model_config"] == {"type": "boolean", "default": False}


async def bare() -> str:
    return ""


def test_schema_of_a_function_without_parameters_or_docstring() -> None:
    assert schema_from_function(bare) == (
        "",
        {"type": "object", "properties": {}, "additionalProperties": False},
    )


class Opaque:
    """A class pydantic cannot describe."""


async def takes_opaque(thing: Opaque) -> str:
    """Takes something with no JSON form."""
    return ""


def test_schema_refuses_a_parameter_type_without_a_json_form() -> None:
    with pytest.raises(TypeError, match="takes_opaque"):
        schema_from_function(takes_opaque)
