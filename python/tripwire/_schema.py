"""Hypothesis strategies of tool arguments, from what a harness knows of a tool: a JSON
schema (an MCP ``inputSchema``, an OpenAI ``parameters``, an Anthropic ``input_schema``), a
whole tool definition holding one, or a Python callable's signature.

Strings are drawn short and word-like, with spaces in them, and from what the schema itself
offers (``enum``, ``const``, ``default``, ``examples``, values quoted in its ``description``
such as ``'Europe/London'``): random text mostly reaches a tool's error path, and a lie
about whitespace shows where a value is accepted. ``values`` gives the candidates for an
argument by name (a real repository path, say).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

# Values a description quotes: 'Europe/London', "2024-01-15", `main`.
_QUOTED: Final = re.compile(r"""'([^'\s][^']{0,60})'|"([^"\s][^"]{0,60})"|`([^`\s][^`]{0,60})`""")
_WORDS: Final = st.text("abcdefghijklmnopqrstuvwxyzABC0123456789/:._-", min_size=1, max_size=8)
_TEXT: Final = st.lists(_WORDS, min_size=0, max_size=3).map(" ".join)
# How deep a schema is followed (a recursive $ref-free schema cannot be deeper than this).
_MAX_DEPTH: Final = 8


def definition_schema(definition: Any) -> tuple[str | None, dict[str, Any] | None, Any]:
    """``(name, input schema, annotations)`` of a tool definition (an MCP ``Tool``, or a dict
    as OpenAI, Anthropic or MCP write them), or ``(None, None, None)`` where it is none."""
    if not isinstance(definition, Mapping):
        dump = getattr(definition, "model_dump", None)
        if not callable(dump):
            return None, None, None
        definition = dump(mode="json", by_alias=True)
    function = definition.get("function")
    if isinstance(function, Mapping):
        definition = function
    for field in ("inputSchema", "input_schema", "parameters"):
        schema = definition.get(field)
        if isinstance(schema, Mapping):
            name = definition.get("name")
            return (
                (name if isinstance(name, str) else None),
                dict(schema),
                definition.get("annotations"),
            )
    return None, None, None


def is_schema(value: Any) -> bool:
    return isinstance(value, Mapping) and (
        "properties" in value or value.get("type") in ("object", "string", "integer", "number")
    )


def properties(schema: Mapping[str, Any]) -> list[str] | None:
    """The argument names a schema of an object declares, ``None`` where it does not say."""
    found = schema.get("properties")
    return list(found) if isinstance(found, Mapping) else None


def from_schema(
    schema: Mapping[str, Any], values: Mapping[str, Sequence[Any]] | None = None
) -> SearchStrategy[Any]:
    """Values a JSON schema accepts (its common subset: types, properties, required, enum,
    const, items, anyOf/oneOf, bounds)."""
    return _draw(schema, dict(values or {}), None, 0)


def _quoted(description: Any) -> list[str]:
    if not isinstance(description, str):
        return []
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(description)]


def _offered(schema: Mapping[str, Any]) -> list[Any]:
    offered: list[Any] = []
    examples = schema.get("examples")
    if isinstance(examples, list):
        offered += examples
    if "default" in schema and schema["default"] is not None:
        offered.append(schema["default"])
    return offered


def _draw(
    schema: Any, values: dict[str, Sequence[Any]], name: str | None, depth: int
) -> SearchStrategy[Any]:
    if name is not None and name in values:
        return st.sampled_from(list(values[name]))
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return _TEXT
    if "const" in schema:
        return st.just(schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return st.sampled_from(schema["enum"])
    for union in ("anyOf", "oneOf"):
        choices = schema.get(union)
        if isinstance(choices, list) and choices:
            return st.one_of([_draw(c, values, name, depth + 1) for c in choices])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_draw({**schema, "type": k}, values, name, depth + 1) for k in kind])
    if kind == "object" or (kind is None and "properties" in schema):
        return _object(schema, values, depth)
    if kind == "array":
        items = _draw(schema.get("items"), values, None, depth + 1)
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, 3))
        return st.lists(items, min_size=low, max_size=high)
    if kind == "integer":
        low, high = schema.get("minimum", -3), schema.get("maximum", 50)
        return st.integers(low, max(low, high))
    if kind == "number":
        low, high = schema.get("minimum", -3), schema.get("maximum", 50)
        return st.one_of(st.integers(int(low), int(max(low, high))), st.floats(low, high))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    offered = _offered(schema) + _quoted(schema.get("description"))
    text = _TEXT if kind in (None, "string") else st.none()
    return st.one_of(st.sampled_from(offered), text) if offered else text


def _object(
    schema: Mapping[str, Any], values: dict[str, Sequence[Any]], depth: int
) -> SearchStrategy[dict[str, Any]]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return st.dictionaries(_WORDS, _TEXT, max_size=3)
    required = set(schema.get("required") or ())
    fields = {key: _draw(sub, values, key, depth + 1) for key, sub in props.items()}

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        drawn: dict[str, Any] = {}
        for key, strategy in fields.items():
            if key in required or draw(st.booleans()):
                drawn[key] = draw(strategy)
        return drawn

    return build()


_SIMPLE: Final[dict[Any, dict[str, Any]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    list: {"type": "array"},
    dict: {"type": "object"},
    type(None): {"type": "null"},
}


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_annotation_schema(a) for a in typing.get_args(annotation)]}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin in (list, Sequence):
        inner = typing.get_args(annotation)
        return {"type": "array", "items": _annotation_schema(inner[0]) if inner else {}}
    return {"type": "string"}


def signature_schema(function: Callable[..., Any]) -> tuple[dict[str, Any], bool] | None:
    """A schema of a callable's keyword arguments from its annotations, and whether it also
    takes ``**kwargs``; ``None`` where it has no signature to read."""
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function)
    except (TypeError, ValueError, NameError):
        return None
    props: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            extra = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            continue
        props[param.name] = _annotation_schema(hints.get(param.name, str))
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "object", "properties": props, "required": required}, extra
