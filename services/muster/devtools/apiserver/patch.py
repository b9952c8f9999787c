"""The three patch formats the stand-in accepts: JSON merge patch (RFC 7386), strategic merge
patch (built-in resources only, as on the real server) and JSON patch (RFC 6902).

Strategic merge knows the merge keys by field name (containers by `name`, conditions by `type`,
ownerReferences by `uid`, ...) rather than from Go struct tags, which is enough for the objects
muster writes; lists without a merge key are replaced, as the real server does.
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists merged element-wise by this key; "" marks a list of scalars merged as a set.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "taints": "key",
    "addresses": "type",
    "podIPs": "ip",
    "hostIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
    "finalizers": "",
}


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch plus merge-by-key lists and the `$patch`, `$retainKeys`,
    `$deleteFromPrimitiveList/` and `$setElementOrder/` directives."""
    if not isinstance(patch, dict):
        return patch
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = value if isinstance(value, list) else []
            result[field] = [v for v in result.get(field) or [] if v not in drop]
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, _MERGE_KEYS[key])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(target: Any, patch: list[Any], merge_key: str) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if not merge_key:  # a set of scalars: union, keeping the current order first
        return current + [v for v in patch if v not in current]
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [e for e in patch if not (isinstance(e, dict) and "$patch" in e)]
    for element in patch:
        if not isinstance(element, dict) or merge_key not in element:
            raise bad_request(
                f"strategic merge patch: list element without merge key {merge_key!r}"
            )
        at = next(
            (
                i
                for i, e in enumerate(current)
                if isinstance(e, dict) and e.get(merge_key) == element[merge_key]
            ),
            None,
        )
        if element.get("$patch") == "delete":
            if at is not None:
                del current[at]
        elif at is None:
            current.append(strategic_merge_patch({}, element))
        else:
            current[at] = strategic_merge_patch(current[at], element)
    return current


def _pointer(path: object) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _unprocessable(f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _parent(doc: Any, parts: list[str], path: object) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _unprocessable(f"json patch: path {path!r} does not exist")
    return node


def _get(doc: Any, path: object) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _unprocessable(f"json patch: path {path!r} does not exist")


def _remove(doc: Any, path: object) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    last = parts[-1] if parts else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _unprocessable(f"json patch: cannot remove {path!r}: it does not exist")


def _add(doc: Any, path: object, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _unprocessable(f"json patch: cannot replace {path!r}: it does not exist")
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent) - (1 if replace else 0):
            raise _unprocessable(f"json patch: index out of range in {path!r}")
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise _unprocessable(f"json patch: path {path!r} does not exist")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 over a copy the caller owns (`target` is modified in place and returned)."""
    if not isinstance(operations, list):
        raise bad_request("json patch: the body must be a list of operations")
    doc = target
    for op in operations:
        if not isinstance(op, dict):
            raise bad_request("json patch: every operation must be an object")
        kind, path = op.get("op"), op.get("path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"json patch: {kind} needs a value")
        if kind == "add":
            doc = _add(doc, path, op["value"], replace=False)
        elif kind == "replace":
            doc = _add(doc, path, op["value"], replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"json patch: test failed at {path!r}")
        elif kind in ("move", "copy"):
            value = _get(doc, op.get("from"))
            if kind == "move":
                _remove(doc, op.get("from"))
            doc = _add(doc, path, _copy(value), replace=False)
        else:
            raise bad_request(f"json patch: unknown operation {kind!r}")
    return doc


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def apply_patch(target: dict[str, Any], content_type: str, body: Any, *, custom: bool) -> Any:
    """`target` (a copy the caller owns) with the patch applied; ApiError on a bad patch."""
    if content_type == MERGE_PATCH:
        if not isinstance(body, dict):
            raise bad_request("merge patch: the body must be a JSON object")
        return merge_patch(target, body)
    if content_type == STRATEGIC_MERGE_PATCH:
        if custom:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "strategic merge patch is not supported for custom resources",
            )
        if not isinstance(body, dict):
            raise bad_request("strategic merge patch: the body must be a JSON object")
        return strategic_merge_patch(target, body)
    if content_type == JSON_PATCH:
        return json_patch(target, body)
    raise ApiError(415, "UnsupportedMediaType", f"the patch type {content_type!r} is not supported")
