"""The `muster.dev/*` annotations that script a simulation, and their parsers.

A scenario is plain Kueue YAML; these annotations say what the real world would have done:
when a workload (or a Node, Pod or gang object) arrives, how long it (or a pod) runs, when its
pods become ready and what each admission check answers. `scenario.py` parses them once, up
front; `runner.py` only reads the results. The contract is documented in docs/simulate-json.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, get_args

import msgspec

from muster.api.errors import key_path
from muster.api.times import NEVER_READY
from muster.api.wellknown import (
    ALTERNATIVES_ANNOTATION,
    PODS_READY_AFTER_ANNOTATION,
    PODS_UNREADY_AFTER_ANNOTATION,
    PODS_UNREADY_FOR_ANNOTATION,
)

SUBMIT_AFTER = "muster.dev/submit-after"
RUN_SECONDS = "muster.dev/run-seconds"
PODS_READY_AFTER = PODS_READY_AFTER_ANNOTATION
STOP_AFTER = "muster.dev/stop-after"
# Pods of a podset that finish for good while it runs (a Job's succeeded pods): Kueue's
# status.reclaimablePods, "podset:count[@secondsAfterStart][,...]".
RECLAIMABLE_PODS = "muster.dev/reclaimable-pods"
PODS_UNREADY_AFTER = PODS_UNREADY_AFTER_ANNOTATION
PODS_UNREADY_FOR = PODS_UNREADY_FOR_ANNOTATION
CHECK_PREFIX = "muster.dev/check."  # + AdmissionCheck name, on a workload (or its Job)
CHECK_RESULT = "muster.dev/check-result"  # on an AdmissionCheck: the default for every workload
# On an AdmissionCheck: the podSetUpdates (a JSON list, Kueue's fields) its scripted answers
# carry while Ready, as a controller's Ready entry of status.admissionChecks would.
CHECK_POD_SET_UPDATES = "muster.dev/check-pod-set-updates"
# On a ProvisioningRequestConfig: what the cluster-autoscaler does with each request made for
# it (sim/checks.py), "Condition@seconds" per attempt, as a check script.
PROVISIONING = "muster.dev/provisioning"

NEVER = NEVER_READY

CheckStateName = Literal["Ready", "Retry", "Rejected", "Pending"]
CHECK_STATES: tuple[str, ...] = get_args(CheckStateName)
_INT32_MAX = 2**31 - 1  # requeueAfterSeconds is an int32 in Kueue's API


class CheckAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """What one admission check answers for one quota reservation, and how long it takes."""

    state: CheckStateName
    delay_s: float = 0.0
    # A Retry's requeueAfterSeconds (Kueue's int32 of whole seconds; 0: none), from when it
    # answers: the workload queues again no earlier.
    requeue_after_s: int = 0


CheckScript = tuple[CheckAttempt, ...]  # attempt n uses element n; the last one repeats


class ReclaimStep(msgspec.Struct, frozen=True, kw_only=True):
    """`delay_s` after a run starts, `count` pods of podset `pod_set` are reclaimable."""

    pod_set: str
    count: int
    delay_s: float = 0.0


READY_AT_ONCE: CheckScript = (CheckAttempt(state="Ready"),)


class WorkloadScript(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the annotations of one workload say about its simulated life."""

    submit_after_s: float = 0.0
    run_s: float | None = None  # None: runs until the simulation ends
    pods_ready_after_s: float | None = 0.0  # None: pods never become ready
    pods_unready_after_s: float | None = None  # None: readiness is never lost
    pods_unready_for_s: float | None = None  # None: lost readiness never comes back
    # Seconds from an eviction until its pods are gone; None: its quota is free at once.
    stop_after_s: float | None = None
    checks: Mapping[str, CheckScript] = msgspec.field(default_factory=dict)  # check -> script
    reclaims: tuple[ReclaimStep, ...] = ()  # status.reclaimablePods as its pods finish


DEFAULT_SCRIPT = WorkloadScript()


class AnnotationError(ValueError):
    """One bad annotation value; `annotation` names it, str() says what is wrong."""

    def __init__(self, annotation: str, problem: str) -> None:
        super().__init__(problem)
        self.annotation = annotation
        self.problem = problem


def annotation_path(annotation: str) -> str:
    """The field path of an annotation: `metadata.annotations["muster.dev/run-seconds"]`."""
    return key_path("metadata.annotations", annotation)


def parse_seconds(text: str) -> float:
    """A duration in seconds: a finite, non-negative decimal number such as "30" or "2.5"."""
    try:
        if not text.isascii() or "_" in text:  # float() would read "١٢" as 12, "1_0" as 10
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def parse_check_script(text: str) -> CheckScript:
    """Parse "State[(requeueAfterSeconds)][@delaySeconds][,...]" into one attempt per
    element; only a Retry takes a requeueAfterSeconds (whole seconds)."""
    attempts = []
    for i, element in enumerate(text.split(",")):
        head, at, delay = element.partition("@")
        word, _, after = head.partition("(")
        state, delay_s = _timed_element(word + at + delay, i, CHECK_STATES, what="state")
        after_s = _requeue_after(after, state, element=i) if "(" in head else 0
        attempts.append(
            CheckAttempt(state=state, delay_s=delay_s, requeue_after_s=after_s)  # type: ignore[arg-type]  # checked against CHECK_STATES
        )
    return tuple(attempts)


def _requeue_after(text: str, state: str, *, element: int) -> int:
    """What follows "State(": "seconds)", Kueue's int32 requeueAfterSeconds; Retry only."""
    seconds, closed, rest = text.partition(")")
    seconds = seconds.strip()
    if not closed or rest.strip():
        raise ValueError(f"element {element}: expected State(requeueAfterSeconds)")
    if state != "Retry":
        raise ValueError(f"element {element}: only Retry takes a requeueAfterSeconds")
    if not (seconds.isascii() and seconds.isdigit() and len(seconds) <= 10) or (
        int(seconds) > _INT32_MAX
    ):
        raise ValueError(
            f"element {element}: requeueAfterSeconds must be a whole number of seconds "
            f"from 0 to {_INT32_MAX}, got {seconds!r}"
        )
    return int(seconds)


def _timed_elements(text: str, allowed: tuple[str, ...], *, what: str) -> list[tuple[str, float]]:
    """The (word, delay) of each "Word[@delaySeconds]" element of `text`, comma-separated."""
    return [_timed_element(e, i, allowed, what=what) for i, e in enumerate(text.split(","))]


def _timed_element(
    element: str, i: int, allowed: tuple[str, ...], *, what: str
) -> tuple[str, float]:
    """The (word, delay) of element `i`, "Word[@delaySeconds]"; ValueError naming the element
    for a word not in `allowed` or a bad delay."""
    word, _, delay = element.strip().partition("@")
    word = word.strip()
    if word not in allowed:
        raise ValueError(f"element {i}: {what} must be one of {', '.join(allowed)}, got {word!r}")
    try:
        delay_s = parse_seconds(delay.strip()) if delay else 0.0
    except ValueError as exc:
        raise ValueError(f"element {i}: delay {exc}") from None
    return word, delay_s


ProvisioningCondition = Literal["Provisioned", "Failed", "CapacityRevoked"]
PROVISIONING_CONDITIONS: tuple[str, ...] = get_args(ProvisioningCondition)


class ProvisioningAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """The condition the cluster-autoscaler sets on one ProvisioningRequest, that many seconds
    after the request was created."""

    condition: ProvisioningCondition
    delay_s: float = 0.0


ProvisioningScript = tuple[ProvisioningAttempt, ...]  # attempt n uses element n; the last repeats


def parse_provisioning_script(text: str) -> ProvisioningScript:
    """Parse "Condition[@delaySeconds][,...]" (Provisioned, Failed, CapacityRevoked)."""
    return tuple(
        ProvisioningAttempt(condition=condition, delay_s=delay_s)  # type: ignore[arg-type]  # checked against PROVISIONING_CONDITIONS
        for condition, delay_s in _timed_elements(text, PROVISIONING_CONDITIONS, what="condition")
    )


def parse_reclaim_script(text: str) -> tuple[ReclaimStep, ...]:
    """Parse "podset:count[@delaySeconds][,...]": each element sets one podset's reclaimable
    pods that long after the run starts (the podset and its size are checked by scenario.py)."""
    steps = []
    for i, element in enumerate(text.split(",")):
        head, _, delay = element.partition("@")
        pod_set, colon, count = (part.strip() for part in head.partition(":"))
        if not colon or not pod_set:
            raise ValueError(f"element {i}: expected podset:count[@seconds], got {element!r}")
        if not (count.isascii() and count.isdigit() and len(count) <= 6):
            raise ValueError(
                f"element {i}: count must be a whole number of pods from 0 to 999999, got {count!r}"
            )
        try:
            delay_s = parse_seconds(delay.strip()) if delay else 0.0
        except ValueError as exc:
            raise ValueError(f"element {i}: delay {exc}") from None
        steps.append(ReclaimStep(pod_set=pod_set, count=int(count), delay_s=delay_s))
    return tuple(steps)


def parse_workload_script(
    annotations: Mapping[str, str], *, known: tuple[str, ...] | None = None
) -> WorkloadScript:
    """Read every `muster.dev/*` annotation of one workload (or, with `known`, of one Node, Pod
    or gang object, which may carry only the annotations `known` lists).

    Raises `AnnotationError` on the first bad value; unknown `muster.dev/*` keys are errors too,
    because a misspelt annotation would otherwise be ignored without a word.
    """
    if not any(key.startswith("muster.dev/") for key in annotations):
        return DEFAULT_SCRIPT
    allowed = KNOWN_ON_WORKLOADS if known is None else known
    submit_after_s = 0.0
    run_s: float | None = None
    pods_ready_after_s: float | None = 0.0
    unready: dict[str, float | None] = {}
    stop_after_s: float | None = None
    checks: dict[str, CheckScript] = {}
    reclaims: tuple[ReclaimStep, ...] = ()
    for key in sorted(annotations):
        if not key.startswith("muster.dev/"):
            continue
        value = annotations[key]
        try:
            if not is_known(key, allowed):
                raise ValueError(f"unknown annotation; known: {', '.join(allowed)}")
            if key == SUBMIT_AFTER:
                submit_after_s = parse_seconds(value)
            elif key == RUN_SECONDS:
                run_s = parse_seconds(value)
            elif key == ALTERNATIVES_ANNOTATION:
                continue  # muster.api.alternatives decodes and checks it (scenario.py)
            elif key == PODS_READY_AFTER:
                never = value.strip() == NEVER
                pods_ready_after_s = None if never else parse_seconds(value)
            elif key in (PODS_UNREADY_AFTER, PODS_UNREADY_FOR):
                never = key == PODS_UNREADY_FOR and value.strip() == NEVER
                unready[key] = None if never else parse_seconds(value)
            elif key == STOP_AFTER:
                stop_after_s = parse_seconds(value)
            elif key == RECLAIMABLE_PODS:
                reclaims = parse_reclaim_script(value)
            else:
                checks[key.removeprefix(CHECK_PREFIX)] = parse_check_script(value)
        except ValueError as exc:
            raise AnnotationError(key, str(exc)) from None
    return WorkloadScript(
        submit_after_s=submit_after_s,
        run_s=run_s,
        pods_ready_after_s=pods_ready_after_s,
        pods_unready_after_s=unready.get(PODS_UNREADY_AFTER),
        pods_unready_for_s=unready.get(PODS_UNREADY_FOR),
        stop_after_s=stop_after_s,
        checks=checks,
        reclaims=reclaims,
    )


def is_known(key: str, allowed: tuple[str, ...]) -> bool:
    if key.startswith(CHECK_PREFIX):
        return len(key) > len(CHECK_PREFIX) and CHECK_PREFIX + "<check>" in allowed
    return key in allowed


KNOWN_ON_WORKLOADS = (
    SUBMIT_AFTER,
    RUN_SECONDS,
    PODS_READY_AFTER,
    PODS_UNREADY_AFTER,
    PODS_UNREADY_FOR,
    STOP_AFTER,
    CHECK_PREFIX + "<check>",
    ALTERNATIVES_ANNOTATION,
    RECLAIMABLE_PODS,
)
# Cluster objects (issue 4): a Pod runs `run-seconds` once bound; a scheduling.k8s.io Workload's
# or a PodGroup's `run-seconds` is the default for its pods.
KNOWN_ON_PODS = (SUBMIT_AFTER, RUN_SECONDS)
KNOWN_ON_NODES = (SUBMIT_AFTER,)
