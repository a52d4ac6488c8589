"""The JSON schemas judges receive: `resolve` (``$ref`` and ``allOf`` followed), `types_of`, and
`validate_schema`, a minimal validator (a subset of draft 2020-12, enough for those schemas)."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["SchemaError", "validate_schema", "resolve", "types_of"]


def resolve(schema: Any, root: dict) -> dict:
    """``schema`` with its ``$ref`` (local, ``#/...``) followed and its ``allOf`` merged."""
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        seen += 1
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return {}
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part, {}) if isinstance(node, dict) else {}
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **extra} if extra else node
    if isinstance(schema, dict) and "allOf" in schema and isinstance(schema["allOf"], list):
        merged: dict = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in schema["allOf"]:
            sub = resolve(sub, root)
            for k, v in sub.items():
                if k == "properties":
                    merged.setdefault("properties", {}).update(v)
                elif k == "required":
                    merged["required"] = list(dict.fromkeys(list(merged.get("required", [])) + list(v)))
                else:
                    merged.setdefault(k, v)
        schema = merged
    return schema if isinstance(schema, dict) else {}


def types_of(schema: dict) -> list[str]:
    """The types ``schema`` allows (``null`` only when nothing else), guessed when it names none."""
    t = schema.get("type")
    if isinstance(t, list):
        return [x for x in t if x != "null"] or ["null"]
    if isinstance(t, str):
        return [t]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    if "enum" in schema and schema["enum"]:
        v = schema["enum"][0]
        return ["string" if isinstance(v, str) else "integer" if isinstance(v, int) else "number"]
    return ["string"]


class SchemaError(ValueError):
    """A value does not match its schema: the path in the value and why."""


def validate_schema(instance: Any, schema: dict, _root: Optional[dict] = None, _path: str = "$") -> None:
    """Raise :class:`SchemaError` when ``instance`` does not match ``schema`` (subset of draft 2020-12:
    type, properties, required, additionalProperties, items, enum, const, anyOf/oneOf/allOf, $ref,
    minimum/maximum, minItems/maxItems)."""
    root = _root if _root is not None else schema
    schema = resolve(schema, root)
    if "const" in schema and instance != schema["const"]:
        raise SchemaError(f"{_path}: expected const {schema['const']!r}")
    if "enum" in schema and instance not in schema["enum"]:
        raise SchemaError(f"{_path}: {instance!r} not in enum {schema['enum']!r}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            errs = []
            for sub in schema[key]:
                try:
                    validate_schema(instance, sub, root, _path)
                    break
                except SchemaError as e:
                    errs.append(str(e))
            else:
                raise SchemaError(f"{_path}: matches none of {key}: {errs}")
    t = schema.get("type")
    if t is not None:
        allowed = t if isinstance(t, list) else [t]
        if not any(_is_type(instance, a) for a in allowed):
            raise SchemaError(f"{_path}: {instance!r} is not of type {t}")
    if isinstance(instance, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in instance:
                raise SchemaError(f"{_path}: missing required property {req!r}")
        for k, v in instance.items():
            if k in props:
                validate_schema(v, props[k], root, f"{_path}.{k}")
            elif schema.get("additionalProperties") is False:
                raise SchemaError(f"{_path}: additional property {k!r} not allowed")
    if isinstance(instance, list):
        if "items" in schema and isinstance(schema["items"], dict):
            for i, v in enumerate(instance):
                validate_schema(v, schema["items"], root, f"{_path}[{i}]")
        if isinstance(schema.get("minItems"), int) and len(instance) < schema["minItems"]:
            raise SchemaError(f"{_path}: fewer than {schema['minItems']} items")
        if isinstance(schema.get("maxItems"), int) and len(instance) > schema["maxItems"]:
            raise SchemaError(f"{_path}: more than {schema['maxItems']} items")
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            raise SchemaError(f"{_path}: {instance} < minimum {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            raise SchemaError(f"{_path}: {instance} > maximum {schema['maximum']}")
    for sub in schema.get("allOf") or []:
        validate_schema(instance, sub, root, _path)


def _is_type(v: Any, t: str) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    return True
