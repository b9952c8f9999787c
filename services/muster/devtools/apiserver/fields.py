"""Server-side field validation (`?fieldValidation=Strict`, as kubectl asks by default): a write
naming a field its kind does not have is refused, in the API server's words.

    400 BadRequest: Job in version "v1" cannot be handled as a Job: strict decoding error:
    unknown field "spec.suspnd", unknown field "spec.template.spec.nodeSelectr"

What a kind has: for a custom resource, its CRD's `openAPIV3Schema` (structural: `properties`,
`items`, `additionalProperties`, `x-kubernetes-preserve-unknown-fields`); for built-in kinds,
`builtin_schemas` (Jobs and Pods down to their containers, which is what is written to them in
tests); `metadata` always as ObjectMeta. Kinds without a schema are not checked, and neither
is `status`. `Warn` and `Ignore` accept unknown fields (a custom resource's are pruned on
store by the real server; the stand-in keeps them).
"""

from __future__ import annotations

from typing import Any, Final

from muster.devtools.apiserver.errors import ApiError
from muster.devtools.apiserver.objects import JsonObj

Schema = dict[str, Any]  # an OpenAPI v3 structural schema

_META_FIELDS: Final = frozenset(
    {
        "name", "generateName", "namespace", "uid", "labels", "annotations", "finalizers",
        "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
        "deletionGracePeriodSeconds", "managedFields", "selfLink", "ownerReferences",
    }
)  # fmt: skip
STRICT: Final = "Strict"


def strict_error(kind: str, version: str, unknown: list[str]) -> ApiError:
    """The API server's answer to a Strict write with unknown fields."""
    fields = ", ".join(f'unknown field "{path}"' for path in unknown)
    message = (
        f'{kind} in version "{version}" cannot be handled as a {kind}: '
        f"strict decoding error: {fields}"
    )
    return ApiError(400, "BadRequest", message)


def unknown_fields(obj: JsonObj, schema: Schema | None) -> list[str]:
    """Every field of `obj` that `schema` (the whole object's) does not declare, as paths."""
    found = [f"metadata.{k}" for k in (obj.get("metadata") or {}) if k not in _META_FIELDS]
    if schema is None:
        return found
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        sub = (schema.get("properties") or {}).get(key)
        if sub is None and not _open(schema):
            found.append(key)
        elif sub is not None:
            found += _walk(value, sub, key)
    return found


def _walk(value: Any, schema: Schema, path: str) -> list[str]:
    if _open(schema):
        return []
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return []
        return [p for i, item in enumerate(value) for p in _walk(item, items, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    found: list[str] = []
    for key, child in value.items():
        sub = properties.get(key) if isinstance(properties, dict) else None
        if sub is None and isinstance(extra, dict):
            sub = extra
        if sub is None:
            if isinstance(properties, dict) or extra is False:
                found.append(f"{path}.{key}")
            continue  # an object without declared fields: anything goes
        found += _walk(child, sub, f"{path}.{key}")
    return found


def _open(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))
