"""A pod's overhead from its RuntimeClass, as Kueue charges it and the API server stores it.

Kueue (pkg/workload AdjustResources, before the LimitRanges) gives a podset whose template
names a `runtimeClassName` and sets no `overhead` the RuntimeClass's `overhead.podFixed`; a
template that sets its own keeps it. The API server's RuntimeClass admission does the same to
each pod it creates, and refuses a pod whose RuntimeClass does not exist or whose own overhead
differs from the RuntimeClass's.

Differs from Kueue: Kueue logs a missing RuntimeClass and charges the podset without overhead,
admitting a workload whose pods the API server will refuse. muster holds it inadmissible,
naming the field and the RuntimeClass, until the RuntimeClass appears (a RuntimeClass change
charges every workload not holding quota anew, as a LimitRange change does). A template
overhead that differs from its RuntimeClass's, or that names no RuntimeClass (Kueue charges it,
the API server accepts an overhead only from a RuntimeClass), is held the same way, for the
same reason.

Pure: the caller passes the RuntimeClasses of the workload's cluster, by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from muster.api.model import PodResources, RuntimeClass

RUNTIME_CLASS_PROBLEM: Final = "pod overhead validation failed"


def with_overhead(pod: PodResources, classes: Mapping[str, RuntimeClass]) -> PodResources:
    """`pod` with its RuntimeClass's overhead when it names one and sets none of its own;
    `pod` itself otherwise (and when the RuntimeClass is missing: `overhead_problem`)."""
    if not pod.runtime_class_name or pod.overhead:
        return pod
    found = classes.get(pod.runtime_class_name)
    if found is None or not found.overhead:
        return pod
    return msgspec.structs.replace(pod, overhead=found.overhead)


def overhead_problem(
    pod: PodResources, classes: Mapping[str, RuntimeClass], *, path: str
) -> str | None:
    """Why the API server would refuse pods of `pod` (`path` is its spec's): its RuntimeClass
    does not exist, its own overhead is not the RuntimeClass's, or it sets an overhead and
    names no RuntimeClass; None when none of these."""
    name = pod.runtime_class_name
    if not name:
        return f"{path}.overhead: set without a runtimeClassName" if pod.overhead else None
    found = classes.get(name)
    if found is None:
        return f'{path}.runtimeClassName: RuntimeClass "{name}" not found'
    if pod.overhead and dict(pod.overhead) != dict(found.overhead):
        return f'{path}.overhead: does not match the overhead.podFixed of RuntimeClass "{name}"'
    return None


def admitted_pod(pod: PodResources, found: RuntimeClass | None) -> PodResources | str:
    """`pod` as the API server's RuntimeClass admission stores it (`found` is the RuntimeClass
    it names, None when it names none or that one does not exist), or why it refuses it, in
    Kubernetes' words (the 403's reason after `pods "<name>" is forbidden: `)."""
    name = pod.runtime_class_name
    if name and found is None:
        return f'pod rejected: RuntimeClass "{name}" not found'
    fixed = found.overhead if found is not None else {}
    if fixed:
        if pod.overhead and dict(pod.overhead) != dict(fixed):
            return "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        return msgspec.structs.replace(pod, overhead=fixed)
    if pod.overhead:
        return "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    return pod
