"""A native tool's JSON schema, from its signature (pydantic) and Google-style docstring.

pydantic builds the schema (``create_model`` from the parameters, ``model_json_schema``);
``docstring_parser`` reads the summary and the ``Args:`` section. The schema is then tidied so
the prompt stays small and stable.

Invariants:
- The result is ``{"type": "object", "properties": ..., "required": [...],
  "additionalProperties": false}``; ``required`` (parameters without a default, in signature
  order) is left out when empty. A parameter named ``ctx`` and ``*args``/``**kwargs`` are not
  tool parameters.
- No ``title`` keys, no ``$defs``/``$ref`` (definitions are inlined), no ``"default": null`` and
  no ``"additionalProperties": true`` (both say nothing); other defaults are kept.
- ``X | None`` is ``{"type": [x, "null"]}`` when X is one plain type, else ``anyOf``.
- Keys come in one fixed order (``type`` first, ``description`` and ``default`` last), so the
  same function always gives the same text.
- A parameter type with no JSON schema is a ``TypeError`` at registration, not a silent ``{}``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import docstring_parser
import pydantic

FIRST_KEYS = ("type", "anyOf", "enum", "const", "items", "properties", "required")
LAST_KEYS = ("description", "default")
_NAMED = ("properties", "patternProperties")  # their keys are names, not schema keywords
_VALUES = ("default", "enum", "const", "examples", "required")  # data, not schemas


def schema_from_function(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """(description, JSON schema of the parameters) for ``fn``; see the module invariants."""
    doc = docstring_parser.parse(inspect.getdoc(fn) or "", docstring_parser.DocstringStyle.GOOGLE)
    arg_docs = {p.arg_name: " ".join((p.description or "").split()) for p in doc.params}
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
        if pname == "ctx" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        field = pydantic.Field(default, alias=pname, description=arg_docs.get(pname) or None)
        # Internal names p0, p1... so no parameter name can clash with pydantic's own.
        fields[f"p{i}"] = (hints.get(pname, Any), field)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    try:
        model = pydantic.create_model(f"{fn.__name__}_args", __config__=config, **fields)
        raw = model.model_json_schema(by_alias=True)
    except pydantic.PydanticUserError as e:
        raise TypeError(f"tool {fn.__name__}: a parameter type has no JSON schema ({e})") from e
    return (doc.description or "").strip(), tidy(raw, raw.get("$defs", {}))


def tidy(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` without titles, ``$ref``s, empty defaults; nullable types merged; keys ordered."""
    if isinstance(node, list):
        return [tidy(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return tidy({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (key == "additionalProperties" and value is True):
            continue
        if key == "default" and value is None:
            continue
        if key in _NAMED:
            out[key] = {name: tidy(schema, defs) for name, schema in value.items()}
        elif key in _VALUES:
            out[key] = value
        else:
            out[key] = tidy(value, defs)
    return _ordered(_merge_nullable(out))


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [{type: x, ...}, {type: null}]`` -> ``type: [x, "null"]`` when that is exact."""
    options = node.get("anyOf")
    null = {"type": "null"}
    if not (isinstance(options, list) and len(options) == 2 and null in options):
        return node
    other = options[0] if options[1] == null else options[1]
    if not isinstance(other.get("type"), str) or {"enum", "const"} & other.keys():
        return node  # null would fail an enum: keep anyOf
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    return {**other, "type": [other["type"], "null"], **rest}


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    first = [k for k in FIRST_KEYS if k in node]
    last = [k for k in LAST_KEYS if k in node]
    middle = [k for k in node if k not in first and k not in last]
    return {k: node[k] for k in (*first, *middle, *last)}
