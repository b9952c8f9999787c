"""Annotation `muster.dev/alternatives`: the other ways a workload may run, decoded and checked.

The value is a YAML (or JSON) list, in order of preference after the declared queue. Each entry
names a LocalQueue of the workload's namespace (`queueName`) and may replace the per-pod
`requests` (a resource set to 0 is dropped) and the expected `runSeconds`. `with_alternatives`
fills `Workload.alternatives` at the boundary (`muster simulate`, the decoder), so the admission
core never parses text. docs/routing.md describes the annotation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import msgspec

from muster.api.errors import FieldError, ObjectErrors, key_path
from muster.api.load import load_yaml
from muster.api.model import Alternative, ClusterQueue, Workload
from muster.api.names import check_reference
from muster.api.times import parse_seconds
from muster.api.wellknown import (
    ALTERNATIVES_ANNOTATION,
    ROUTING_POLICIES,
    ROUTING_POLICY_ANNOTATION,
)

FIELDS = ("queueName", "requests", "runSeconds")
ANNOTATION_PATH = key_path("metadata.annotations", ALTERNATIVES_ANNOTATION)


def with_alternatives(wl: Workload, *, who: str) -> tuple[Workload, list[FieldError]]:
    """`wl` with `alternatives` decoded from its annotation, and every problem found.

    `who` names the object in messages ("Job/ml/sd-3"). Without the annotation `wl` comes back
    as it is; with any problem, its alternatives are left empty.
    """
    text = wl.meta.annotations.get(ALTERNATIVES_ANNOTATION)
    if text is None:
        return wl, []
    alternatives, errors = parse_alternatives(
        text, who=who, declared_queue=wl.queue_name or "default"
    )
    if errors:
        return wl, errors
    return msgspec.structs.replace(wl, alternatives=alternatives), []


_UNMADE_PODS = (
    "cannot change the requests of pods muster does not create (a Pod, the pods of a gang); "
    "submit a Job or a Kueue Workload to run with other requests"
)
_JOBSET_PODS = (
    "cannot change the requests of a JobSet's pods: its controller passes only the labels, "
    "annotations, node selector and tolerations of a changed template on to its child Jobs; "
    "route it with queueName and runSeconds alone, or submit a Job or a Kueue Workload"
)


def unmade_pods_errors(annotations: Mapping[str, str], *, who: str) -> list[FieldError]:
    """Problems of `muster.dev/alternatives` on an object whose pods muster does not create (a
    Pod, a gang): every problem of the annotation, and each alternative that changes requests,
    which nothing could give those pods (docs/routing.md, "On Kubernetes")."""
    text = annotations.get(ALTERNATIVES_ANNOTATION)
    if text is None:
        return []
    alternatives, errors = parse_alternatives(text, who=who, declared_queue="")
    return errors + _requests_errors(alternatives, who=who, problem=_UNMADE_PODS)


def jobset_alternatives_errors(wl: Workload, *, who: str) -> list[FieldError]:
    """Each of JobSet workload `wl`'s alternatives that changes requests: the JobSet controller
    never gives its existing child Jobs other resources, so the pods would run with requests
    their quota did not cover (docs/routing.md, "On Kubernetes")."""
    return _requests_errors(wl.alternatives, who=who, problem=_JOBSET_PODS)


def _requests_errors(
    alternatives: tuple[Alternative, ...], *, who: str, problem: str
) -> list[FieldError]:
    return [
        FieldError(who, f"{ANNOTATION_PATH}[{i}].requests", problem)
        for i, alternative in enumerate(alternatives)
        if alternative.requests is not None
    ]


def routing_policy_errors(cq: ClusterQueue, *, who: str) -> list[FieldError]:
    """A ClusterQueue's `muster.dev/routing-policy` must name a policy (docs/routing.md)."""
    policy = cq.meta.annotations.get(ROUTING_POLICY_ANNOTATION)
    if policy is None or policy in ROUTING_POLICIES:
        return []
    problem = f"must be one of {', '.join(ROUTING_POLICIES)}, got {policy!r}"
    return [FieldError(who, key_path("metadata.annotations", ROUTING_POLICY_ANNOTATION), problem)]


def parse_alternatives(
    text: str, *, who: str, declared_queue: str
) -> tuple[tuple[Alternative, ...], list[FieldError]]:
    """The alternatives an annotation value lists, in order, and one FieldError per problem."""
    errs = ObjectErrors(who)
    documents, problem = load_yaml(text)
    if problem is not None:
        syntax = problem.problem.removeprefix("invalid YAML: ")
        if syntax != problem.problem:
            errs.add(ANNOTATION_PATH, f"invalid YAML at {problem.path}: {syntax}")
        else:
            errs.add(ANNOTATION_PATH, f"{problem.problem} ({problem.path})")
        return (), errs.errors
    if len(documents) > 1:
        errs.add(ANNOTATION_PATH, f"must be one YAML document, got {len(documents)}")
        return (), errs.errors
    value = documents[0] if documents else None
    if not isinstance(value, list) or not value:
        errs.add(ANNOTATION_PATH, f"must be a non-empty list of alternatives, got {_kind(value)}")
        return (), errs.errors
    alternatives: list[Alternative] = []
    listed: dict[str, str] = {declared_queue: "as the declared queue"}
    for i, entry in enumerate(value):
        path = f"{ANNOTATION_PATH}[{i}]"
        alternative = _alternative(entry, path, errs)
        if alternative is None:
            continue
        seen = listed.setdefault(alternative.queue_name, f"at [{i}]")
        if seen != f"at [{i}]":
            name = alternative.queue_name
            errs.add(f"{path}.queueName", f"duplicate: queue {name!r} is listed already {seen}")
        alternatives.append(alternative)
    return tuple(alternatives), errs.errors


def _alternative(entry: object, path: str, errs: ObjectErrors) -> Alternative | None:
    if not isinstance(entry, dict):
        errs.add(path, f"must be an object with {', '.join(FIELDS)}, got {_kind(entry)}")
        return None
    for field in sorted(set(entry) - set(FIELDS), key=str):
        errs.add(key_path(path, str(field)), f"unknown field; known: {', '.join(FIELDS)}")
    queue = entry.get("queueName")
    if not isinstance(queue, str) or not queue:
        errs.add(f"{path}.queueName", "is required: the name of a LocalQueue")
        return None
    check_reference(errs, queue, f"{path}.queueName")
    return Alternative(
        queue_name=queue,
        requests=_requests(entry.get("requests"), f"{path}.requests", errs),
        run_seconds=_seconds(entry.get("runSeconds"), f"{path}.runSeconds", errs),
    )


def _requests(value: object, path: str, errs: ObjectErrors) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        errs.add(path, f"must be a map of resource names to quantities, got {_kind(value)}")
        return None
    return errs.quantities({str(name): amount for name, amount in value.items()}, path)


def _seconds(value: object, path: str, errs: ObjectErrors) -> float | None:
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_seconds(value)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        errs.add(path, f"must be a finite number of seconds >= 0, got {value!r}")
        return None
    return seconds


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    names = {str: "a string", dict: "an object", bool: "a boolean"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a value")
