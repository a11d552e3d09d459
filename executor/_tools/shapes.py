"""A tool's spec in the shapes the model APIs take: OpenAI (strict mode), Anthropic, MCP, Gemini.

`Tool.spec` is the plain function shape, `{"name", "description", "parameters"}`
with a JSON schema. `spec_in_shape(spec, shape)` rewrites it for one API:

- `"openai"`: a Chat Completions tool, `{"type": "function", "function": {...,
  "strict": true}}`, its parameters rewritten for strict mode (see
  `strict_json_schema`); `"openai-responses"` the same for the Responses API
  (the function's fields at the top level).
- `"anthropic"`: `{"name", "description", "input_schema"}`.
- `"mcp"`: `{"name", "description", "inputSchema"}`, as an MCP `tools/list` lists it.
- `"gemini"`: a function declaration whose `parameters` are in Gemini's
  OpenAPI 3.0 subset (see `gemini_schema`).

Strict mode wants every property listed in `required`, so a parameter with a
default would become one the model must always send. Here it becomes
nullable instead, with the default named in its description, and `Tool`
takes a `null` for an optional parameter (or an optional field of a
dataclass or TypedDict) as "not given": the model may leave it out in effect,
as the signature says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, get_args

SpecShape = Literal["openai", "openai-responses", "anthropic", "mcp", "gemini"]
"""The API shapes `spec_in_shape` (and `Tool.spec_for`) writes."""

SHAPES: tuple[str, ...] = get_args(SpecShape)

# Keywords OpenAI's strict mode refuses; their values move into the description,
# where the model still reads them (and `Tool` still checks them).
_STRICT_UNSUPPORTED = (
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "contentEncoding",
    "contentMediaType",
)
_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
_TYPE_BEARING = ("type", "$ref", "anyOf", "oneOf", "enum", "const")
_REF_PREFIX = "#/$defs/"


def _note(schema: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """`schema` with `notes` appended to its description (in parentheses after text)."""
    if not notes:
        return schema
    joined = "; ".join(notes)
    description = schema.get("description")
    text = f"{description} ({joined})" if description else joined[:1].upper() + joined[1:]
    return {**schema, "description": text}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _accepts_null(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "enum" in schema and None in schema["enum"]:
        return True
    branches = schema.get("anyOf")
    return isinstance(branches, list) and any(
        isinstance(branch, Mapping) and _accepts_null(branch) for branch in branches
    )


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also accepts `null`, in the plainest form strict mode takes."""
    if _accepts_null(schema):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str) and not ({"$ref", "anyOf", "const"} & schema.keys()):
        widened: dict[str, Any] = {**schema, "type": [kind, "null"]}
        if "enum" in schema:
            widened["enum"] = [*schema["enum"], None]
        return widened
    if isinstance(schema.get("anyOf"), list):
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    inner = {key: value for key, value in schema.items() if key != "description"}
    outer: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if "description" in schema:
        outer["description"] = schema["description"]
    return outer


class _NotStrict(TypeError):
    pass


def _strict(node: object, path: str) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise _NotStrict(f"{path}: a schema must be an object, got {node!r}")
    schema = {key: value for key, value in node.items() if key not in ("title", "$schema")}
    notes: list[str] = []
    schema.pop("examples", None)
    if "default" in schema:
        notes.append(f"default: {_json(schema.pop('default'))}")
    for key in _STRICT_UNSUPPORTED:
        if key in schema:
            value = schema.pop(key)
            notes.append(f"{value} encoded" if key == "contentEncoding" else f"{key}: {value}")
    if "format" in schema and schema["format"] not in _STRICT_FORMATS:
        notes.append(f"format: {schema.pop('format')}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and any(token in pattern for token in _LOOKAROUND):
        notes.append(f"pattern: {schema.pop('pattern')}")
    if "allOf" in schema:
        raise _NotStrict(f"{path}: strict mode takes no allOf")
    if "oneOf" in schema:
        schema["anyOf"] = [*schema.get("anyOf", []), *schema.pop("oneOf")]
    if not any(key in schema for key in _TYPE_BEARING):
        raise _NotStrict(f"{path}: accepts any value (Any, or an untyped list or dict)")
    if "$ref" in schema and len(schema) > 1:
        # Strict mode takes no siblings beside a $ref, but does beside an anyOf.
        schema["anyOf"] = [{"$ref": schema.pop("$ref")}]
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if extra is not False and (extra is not None or not properties):
            raise _NotStrict(
                f"{path}: an object open to any keys (a dict) has no strict form; "
                "use a dataclass or TypedDict"
            )
        required = set(schema.get("required", ()))
        strict_properties: dict[str, Any] = {}
        for name, sub in properties.items():
            where = f"{path}.{name}"
            if name in required:
                strict_properties[name] = _strict(sub, where)
                continue
            # An optional property: nullable, null standing for "not given".
            sub = dict(sub) if isinstance(sub, Mapping) else sub
            default = sub.pop("default", _MISSING) if isinstance(sub, dict) else _MISSING
            if default is None:
                meanings = []  # null is the default itself
            elif default is _MISSING:
                meanings = ["null for the default"]
            else:
                meanings = [f"null for the default, {_json(default)}"]
            strict_properties[name] = _nullable(_note(_strict(sub, where), meanings))
        schema["properties"] = strict_properties
        schema["required"] = list(strict_properties)
        schema["additionalProperties"] = False
    if kind == "array" or (isinstance(kind, list) and "array" in kind):
        if "prefixItems" in schema:
            _widen_tuple(schema)
        items = schema.get("items")
        if not isinstance(items, Mapping) or not any(key in items for key in _TYPE_BEARING):
            raise _NotStrict(f"{path}: a list of any values has no strict form; give its item type")
        schema["items"] = _strict(items, f"{path}[]")
    if isinstance(schema.get("anyOf"), list):
        schema["anyOf"] = [
            _strict(branch, f"{path}|{index}") for index, branch in enumerate(schema["anyOf"])
        ]
    return _note(schema, notes)


class _Missing:
    pass


_MISSING = _Missing()


def _widen_tuple(schema: dict[str, Any]) -> None:
    """A tuple's positions as one item type (their union), with its length pinned."""
    positions = schema.pop("prefixItems")
    unique: list[Any] = []
    for item in positions:
        if item not in unique:
            unique.append(item)
    schema["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
    schema.setdefault("minItems", len(positions))
    schema.setdefault("maxItems", len(positions))


def strict_json_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameters schema rewritten for OpenAI's strict mode.

    Every object lists all its properties in `required` and refuses others
    (`additionalProperties: false`); an optional property becomes nullable,
    its description saying that `null` stands for its default; `default`,
    `title` and the keywords strict mode refuses (`uniqueItems`,
    `contentEncoding`, formats it does not know, ...) move into the
    description; a `$ref` with siblings becomes a one-branch `anyOf`; a tuple
    becomes a list of the union of its positions, its length pinned. The
    result is what the OpenAI Agents SDK's `ensure_strict_json_schema` leaves
    unchanged.

    Raises:
        TypeError: The schema has no strict form: the root is no object, or
            somewhere it accepts any value (`Any`, a bare `list`), an object
            open to any keys (`dict[str, T]`), or an `allOf`. The message
            names where.
    """
    if parameters.get("type") != "object" or "anyOf" in parameters:
        raise TypeError("no strict form: the parameters must be one object")
    defs = parameters.get("$defs")
    try:
        root = _strict({k: v for k, v in parameters.items() if k != "$defs"}, "parameters")
        if isinstance(defs, Mapping):
            root["$defs"] = {name: _strict(body, f"$defs.{name}") for name, body in defs.items()}
    except _NotStrict as error:
        raise TypeError(f"no strict form: {error}") from None
    return root


# --- Gemini ---------------------------------------------------------------------------

_GEMINI_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "properties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "minProperties",
        "maxProperties",
        "propertyOrdering",
    }
)
_GEMINI_FORMATS = {"string": {"enum", "date-time"}, "number": {"float", "double"}}
_GEMINI_FORMATS["integer"] = {"int32", "int64"}


def _resolve(
    ref: str, defs: Mapping[str, Any], seen: tuple[str, ...]
) -> tuple[Any, tuple[str, ...]]:
    if not ref.startswith(_REF_PREFIX) or ref[len(_REF_PREFIX) :] not in defs:
        raise TypeError(f"no Gemini form: cannot resolve {ref!r}")
    name = ref[len(_REF_PREFIX) :]
    if name in seen:
        raise TypeError(f"no Gemini form: {name} refers to itself, which OpenAPI cannot inline")
    return defs[name], (*seen, name)


def _gemini(node: object, defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    if node is True or node == {}:
        return {}
    if not isinstance(node, Mapping):
        raise TypeError(f"no Gemini form: a schema must be an object, got {node!r}")
    schema = dict(node)
    if "$ref" in schema:
        target, seen = _resolve(schema.pop("$ref"), defs, seen)
        # The referring schema's own words (a description) win over the definition's.
        schema = {**dict(target), **schema}
    notes: list[str] = []
    if "default" in schema and (default := schema.pop("default")) is not None:
        notes.append(f"default: {_json(default)}")
    if "const" in schema:
        schema["enum"] = [schema.pop("const")]
    if "oneOf" in schema:
        schema["anyOf"] = [*schema.get("anyOf", []), *schema.pop("oneOf")]
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        schema = {**dict(schema.pop("allOf")[0]), **schema}
    if "prefixItems" in schema:
        _widen_tuple(schema)
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            schema["nullable"] = True
        if len(kinds) == 1:
            schema["type"] = kinds[0]
        else:
            schema.pop("type")
            schema["anyOf"] = [{"type": k} for k in kinds]
        kind = schema.get("type")
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        rest = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
        if len(rest) < len(branches):
            schema["nullable"] = True
        if len(rest) == 1 and isinstance(rest[0], Mapping):
            schema.pop("anyOf")
            inner = _gemini(rest[0], defs, seen)
            merged = {**inner, **{k: v for k, v in schema.items() if k != "nullable"}}
            if schema.get("nullable"):
                merged["nullable"] = True
            schema, kind = merged, merged.get("type")
        else:
            schema["anyOf"] = [_gemini(b, defs, seen) for b in rest]
    if "enum" in schema:
        values = [v for v in schema["enum"] if v is not None]
        if len(values) < len(schema["enum"]):
            schema["nullable"] = True
        if values and all(isinstance(v, str) for v in values):
            schema["enum"] = values
            schema["type"] = kind = "string"
        else:
            # Gemini takes string enums only; stringified numbers would be refused by
            # the tool, so the values go into the description instead.
            del schema["enum"]
            notes.append("one of " + ", ".join(_json(v) for v in values))
            if "type" not in schema and values:
                schema["type"] = kind = _json_type(values[0])
    for key, words in (("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
        if key in schema:
            notes.append(f"{words} {schema.pop(key)}")
    if "multipleOf" in schema:
        notes.append(f"a multiple of {schema.pop('multipleOf')}")
    if "contentEncoding" in schema:
        notes.append(f"{schema.pop('contentEncoding')} encoded")
    if "format" in schema and schema["format"] not in _GEMINI_FORMATS.get(str(kind), set()):
        notes.append(f"format: {schema.pop('format')}")
    if isinstance(schema.get("properties"), Mapping):
        schema["properties"] = {
            name: _gemini(sub, defs, seen) for name, sub in schema["properties"].items()
        }
        if not schema.get("required"):
            schema.pop("required", None)
    if "items" in schema:
        schema["items"] = _gemini(schema["items"], defs, seen)
    cleaned = {key: value for key, value in schema.items() if key in _GEMINI_KEYS}
    return _note(cleaned, notes)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def gemini_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema rewritten into the OpenAPI 3.0 subset of Gemini's function declarations.

    `$ref`s are inlined from `$defs`; `type: [T, "null"]` and `anyOf` with a
    null branch become `nullable: true`; `const` a one-value `enum`; only
    string enums stay (other values are named in the description, since the
    tool would refuse them as text); a tuple becomes a list of the union of
    its positions; `additionalProperties`, `title` and the keywords the subset
    lacks are dropped, the ones that constrain (`default`, `exclusiveMinimum`,
    `multipleOf`, `contentEncoding`, unknown formats) named in the description.

    Raises:
        TypeError: A definition refers to itself (no inline form), or a
            `$ref` does not resolve.
    """
    defs = parameters.get("$defs")
    return _gemini(
        {key: value for key, value in parameters.items() if key != "$defs"},
        defs if isinstance(defs, Mapping) else {},
        (),
    )


# --- the shapes -----------------------------------------------------------------------


def spec_in_shape(
    spec: Mapping[str, Any], shape: str, *, strict: bool | None = None
) -> dict[str, Any]:
    """A function spec (`{"name", "description", "parameters"}`) in the shape one API takes.

    Args:
        spec: The spec, as `Tool.spec` gives it.
        shape: `"openai"`, `"openai-responses"`, `"anthropic"`, `"mcp"` or `"gemini"`.
        strict: For the OpenAI shapes: `None` (the default) writes strict mode
            where the schema has a strict form and `"strict": false` with the
            schema as it is where it has none; `True` insists (a `TypeError`
            where there is no strict form); `False` never rewrites.

    Raises:
        ValueError: An unknown shape, or `strict` given for a shape without it.
        TypeError: `strict=True` and the schema has no strict form, or the
            Gemini shape cannot inline a self-referring type.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown spec shape {shape!r}; the shapes are: {', '.join(SHAPES)}")
    if strict is not None and not shape.startswith("openai"):
        raise ValueError(f"strict applies to the OpenAI shapes, not to {shape!r}")
    name, description = spec["name"], spec.get("description", "")
    parameters: dict[str, Any] = dict(spec["parameters"])
    if shape == "anthropic":
        return {"name": name, "description": description, "input_schema": parameters}
    if shape == "mcp":
        return {"name": name, "description": description, "inputSchema": parameters}
    if shape == "gemini":
        declaration: dict[str, Any] = {"name": name, "description": description}
        converted = gemini_schema(parameters)
        # A function without parameters leaves them out: Gemini refuses an empty object.
        if converted.get("properties"):
            declaration["parameters"] = converted
        return declaration
    is_strict = False
    if strict is not False:
        try:
            parameters, is_strict = strict_json_schema(parameters), True
        except TypeError:
            if strict:
                raise
    function = {
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": is_strict,
    }
    if shape == "openai-responses":
        return {"type": "function", **function}
    return {"type": "function", "function": function}
