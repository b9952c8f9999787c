"""JSON object helpers shared by the API-server stand-in: copies, metadata access, timestamps.

Stored objects are plain decoded JSON (`JsonObj`) and are never mutated once committed: every
write builds a new dict, so watch events and list results can share them safely.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, TypeAlias

import msgspec

# The stand-in is one big decode boundary: Kubernetes objects stay untyped JSON here.
JsonObj: TypeAlias = dict[str, Any]
ObjKey: TypeAlias = tuple[str, str]  # (namespace, name); namespace "" when cluster-scoped

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def deep_copy(value: JsonObj) -> JsonObj:
    """A deep copy of a JSON object (an encode/decode round trip: faster than copy.deepcopy)."""
    copied: JsonObj = _decode(_encode(value))
    return copied


def encode(value: object) -> bytes:
    """Compact JSON bytes."""
    return _encode(value)


def decode(data: bytes) -> object:
    """Decoded JSON; msgspec.DecodeError when `data` is not JSON."""
    return _decode(data)


def meta(obj: JsonObj) -> JsonObj:
    """`obj.metadata`, created empty when missing or not an object."""
    value = obj.get("metadata")
    if not isinstance(value, dict):
        value = {}
        obj["metadata"] = value
    return value


def name_of(obj: JsonObj) -> str:
    value = meta(obj).get("name")
    return value if isinstance(value, str) else ""


def namespace_of(obj: JsonObj) -> str:
    value = meta(obj).get("namespace")
    return value if isinstance(value, str) else ""


def key_of(obj: JsonObj) -> ObjKey:
    return (namespace_of(obj), name_of(obj))


def resource_version_of(obj: JsonObj) -> int:
    """metadata.resourceVersion as an int; 0 when missing or not a number."""
    value = meta(obj).get("resourceVersion")
    try:
        return int(value) if value not in (None, "") else 0
    except (TypeError, ValueError):
        return -1


def string_map(value: object) -> dict[str, str]:
    """A label or annotation map, empty unless every key and value is a string."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def timestamp(now_s: float | None = None) -> str:
    """An RFC 3339 UTC time with second precision, as the API server writes metadata times."""
    moment = datetime.fromtimestamp(time.time() if now_s is None else now_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def lookup(obj: JsonObj, path: str) -> object:
    """The value at a dotted path (`spec.nodeName`), or None when any step is missing."""
    value: object = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
