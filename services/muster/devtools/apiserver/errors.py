"""`ApiError`: a failure answered as a Kubernetes `Status` object, with one constructor per reason.

The shapes follow the real API server: `details.kind` is the resource (plural) for NotFound,
AlreadyExists and Conflict, and the Kind for Invalid; Invalid carries one cause per field.
"""

from __future__ import annotations

from http import HTTPStatus

import msgspec

from muster.devtools.apiserver.objects import JsonObj


class Cause(msgspec.Struct, frozen=True):
    """One field problem of an Invalid answer (`reason` is FieldValueRequired, ...)."""

    reason: str
    field: str
    message: str


class ApiError(Exception):
    """An API failure; `status()` is the body the server answers with."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JsonObj | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after_s = retry_after_s

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _resource_details(group: str, resource: str, name: str) -> JsonObj:
    details: JsonObj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def _qualified(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(group, resource)} "{name}" not found',
        details=_resource_details(group, resource, name),
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, resource)} "{name}" already exists',
        details=_resource_details(group, resource, name),
    )


def conflict(group: str, resource: str, name: str, problem: str) -> ApiError:
    """409 Conflict: a stale resourceVersion, a failed precondition, a pod already bound."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, resource)} "{name}": {problem}',
        details=_resource_details(group, resource, name),
    )


def precondition_failed(
    group: str, resource: str, name: str, *, field: str, wanted: object, actual: object
) -> ApiError:
    """409 Conflict: a uid or resourceVersion precondition does not hold."""
    problem = f"Precondition failed: {field} in precondition: {wanted}, {field} in object: {actual}"
    return conflict(group, resource, name, problem)


STALE_OBJECT = "the object has been modified; apply your changes to the latest version and retry"


def invalid(group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid with one cause per field, as validation failures are answered."""
    lines = [f"{c.field}: {c.message}" for c in causes]
    summary = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    details: JsonObj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [
        {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
    ]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {summary}', details=details)


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def bad_value(field: str, value: object, detail: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return Cause("FieldValueInvalid", field, f"Invalid value: {shown}: {detail}")


def unsupported(field: str, value: object, allowed: list[str]) -> Cause:
    options = ", ".join(f'"{a}"' for a in allowed)
    return Cause("FieldValueNotSupported", field, f'Unsupported value: "{value}": {options}')


def forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", field, f"Forbidden: {detail}")


def duplicate(field: str, value: object) -> Cause:
    return Cause("FieldValueDuplicate", field, f'Duplicate value: "{value}"')


def immutable(field: str, value: object) -> Cause:
    return bad_value(field, value, "field is immutable")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden_request(message: str, *, details: JsonObj | None = None) -> ApiError:
    return ApiError(403, "Forbidden", message, details=details)


def method_not_allowed(message: str = "the server does not allow this method") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {content_type}",
    )


def expired(message: str) -> ApiError:
    """410 Expired: a resourceVersion or continue token older than the kept history."""
    return ApiError(410, "Expired", message)


def too_large_resource_version(asked: int, current: int) -> ApiError:
    """504 Timeout: asked for a resourceVersion the store has not reached."""
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {asked}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def resource_not_served(path: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        "the server could not find the requested resource",
        details={
            "causes": [
                {"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}
            ]
        },
    )


def injected(code: int, *, retry_after_s: int | None) -> ApiError:
    """A failure the test asked for (Faults): the reason the real server gives for that code."""
    reasons = {
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }
    reason = reasons.get(code, HTTPStatus(code).phrase.replace(" ", ""))
    details: JsonObj | None = None
    if retry_after_s is not None:
        details = {"retryAfterSeconds": retry_after_s}
    message = f"injected fault: {HTTPStatus(code).phrase.lower()}"
    return ApiError(code, reason, message, details=details, retry_after_s=retry_after_s)
