"""The size limits of a custom resource's schema (`maxItems`, `maxLength`, `maxProperties`),
checked on every create and update as the real API server does: a list, string or map past
its CRD's limit is refused with 422 Invalid naming the field, in apimachinery's words:

    spec.resourceGroups[0].flavors: Too many: 1000: must have at most 64 items
    spec.queueName: Too long: may not be more than 253 bytes

Kueue's CRDs bound resource groups, flavors, resources, names and podSets so; without this,
tests met only muster's own limits and never what a cluster answers first. `status` is not
checked (its writers are the controllers; the stand-in checks what users write).
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import Cause

Schema = dict[str, Any]  # an OpenAPI v3 structural schema
_NOT_CHECKED = frozenset({"apiVersion", "kind", "metadata", "status"})


def limit_causes(obj: dict[str, Any], schema: Schema | None) -> list[Cause]:
    """One cause per field of `obj` past a limit of `schema` (the whole object's)."""
    if schema is None:
        return []
    properties = schema.get("properties") or {}
    causes: list[Cause] = []
    for key, value in obj.items():
        sub = properties.get(key)
        if key not in _NOT_CHECKED and isinstance(sub, dict):
            causes += _walk(value, sub, key)
    return causes


def _walk(value: Any, schema: Schema, path: str) -> list[Cause]:
    causes = _own(value, schema, path)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                causes += _walk(item, items, f"{path}[{i}]")
    elif isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = properties.get(key) if isinstance(properties, dict) else None
            if sub is None and isinstance(extra, dict):
                sub = extra
            if isinstance(sub, dict):
                causes += _walk(child, sub, f"{path}.{key}")
    return causes


# (what a value is, its schema's limit, the cause's reason, the API server's words)
_LIMITS = (
    (list, "maxItems", "FieldValueTooMany", "Too many: {size}: must have at most {limit} items"),
    (str, "maxLength", "FieldValueTooLong", "Too long: may not be more than {limit} bytes"),
    (
        dict,
        "maxProperties",
        "FieldValueTooMany",
        "Too many: {size}: must have at most {limit} items",
    ),
)


def _own(value: Any, schema: Schema, path: str) -> list[Cause]:
    """The limit `value` itself is past, if any (its items are walked by the caller)."""
    for type_, keyword, reason, words in _LIMITS:
        limit = schema.get(keyword)
        if isinstance(value, type_) and _over(len(value), limit):
            return [Cause(reason, path, words.format(size=len(value), limit=limit))]
    return []


def _over(size: int, limit: object) -> bool:
    return isinstance(limit, int) and not isinstance(limit, bool) and size > limit
