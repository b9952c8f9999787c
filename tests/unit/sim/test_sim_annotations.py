"""Parsing the muster.dev/* scripting annotations."""

from __future__ import annotations

import pytest

from muster.sim.annotations import (
    DEFAULT_SCRIPT,
    AnnotationError,
    CheckAttempt,
    ReclaimStep,
    parse_check_script,
    parse_seconds,
    parse_workload_script,
)


@pytest.mark.parametrize(
    ("text", "attempts"),
    [
        ("Ready", [("Ready", 0)]),
        ("Ready@30", [("Ready", 30)]),
        ("Retry@5, Ready@2.5", [("Retry", 5), ("Ready", 2.5)]),
        ("Pending,Rejected@1", [("Pending", 0), ("Rejected", 1)]),
    ],
)
def test_parses_one_attempt_per_element(text: str, attempts: list[tuple[str, float]]) -> None:
    assert parse_check_script(text) == tuple(
        CheckAttempt(state=state, delay_s=delay)  # type: ignore[arg-type]
        for state, delay in attempts
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Okay", "element 0: state must be one of Ready, Retry, Rejected, Pending, got 'Okay'"),
        ("Ready,ready", "element 1: state must be one of"),
        ("Ready@-1", "element 0: delay must be a finite number of seconds >= 0, got '-1'"),
        ("Ready@soon", "element 0: delay must be a number of seconds, got 'soon'"),
        ("", "element 0: state must be one of"),
    ],
)
def test_rejects_bad_check_scripts_with_the_element(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem.replace("(", r"\(")):
        parse_check_script(text)


def test_a_retry_may_say_its_requeue_after_seconds() -> None:
    assert parse_check_script("Retry(60)@5, Retry ( 0 ), Ready@10") == (
        CheckAttempt(state="Retry", delay_s=5, requeue_after_s=60),
        CheckAttempt(state="Retry", delay_s=0, requeue_after_s=0),
        CheckAttempt(state="Ready", delay_s=10),
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Ready@1,Ready(5)", "element 1: only Retry takes a requeueAfterSeconds"),
        ("Retry(5", "element 0: expected State(requeueAfterSeconds)"),
        ("Retry(5)s", "element 0: expected State(requeueAfterSeconds)"),
        ("Retry(1.5)", "element 0: requeueAfterSeconds must be a whole number of seconds"),
        ("Retry(-1)", "element 0: requeueAfterSeconds must be a whole number of seconds"),
        ("Retry(2147483648)", "element 0: requeueAfterSeconds must be .* to 2147483647"),
        ("Retry(" + "9" * 5000 + ")", "element 0: requeueAfterSeconds must be"),
        ("Retyr(5)", "element 0: state must be one of Ready, Retry, Rejected, Pending"),
    ],
)
def test_rejects_a_bad_requeue_after_seconds_with_the_element(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem.replace("(", r"\(").replace(")", r"\)")):
        parse_check_script(text)


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "1s", ""])
def test_rejects_durations_that_are_not_finite_non_negative_seconds(text: str) -> None:
    with pytest.raises(ValueError, match="seconds"):
        parse_seconds(text)


def test_reads_every_workload_annotation() -> None:
    script = parse_workload_script(
        {
            "muster.dev/submit-after": "5",
            "muster.dev/run-seconds": "60.5",
            "muster.dev/pods-ready-after": "never",
            "muster.dev/stop-after": "1.5",
            "muster.dev/check.prov": "Retry,Ready@3",
            "example.com/other": "ignored",
        }
    )

    assert script.submit_after_s == 5
    assert script.run_s == 60.5
    assert script.pods_ready_after_s is None
    assert script.stop_after_s == 1.5
    assert script.checks == {
        "prov": (CheckAttempt(state="Retry"), CheckAttempt(state="Ready", delay_s=3))
    }


def test_defaults_without_annotations() -> None:
    script = parse_workload_script({"example.com/x": "y"})

    assert script is DEFAULT_SCRIPT
    assert (script.submit_after_s, script.run_s, script.pods_ready_after_s) == (0, None, 0)
    assert script.stop_after_s is None  # evicted quota is free at once


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("muster.dev/run-second", "10", "unknown annotation"),
        ("muster.dev/check.", "Ready", "unknown annotation"),
        ("muster.dev/run-seconds", "ten", "must be a number of seconds"),
        ("muster.dev/pods-ready-after", "later", "must be a number of seconds"),
        ("muster.dev/stop-after", "-1", "must be a finite number of seconds >= 0"),
        ("muster.dev/reclaimable-pods", "main", "element 0: expected podset:count"),
        ("muster.dev/reclaimable-pods", ":2@5", "element 0: expected podset:count"),
        ("muster.dev/reclaimable-pods", "main:1,main:-1", "element 1: count must be a whole"),
        ("muster.dev/reclaimable-pods", "main:1.5", "count must be a whole number of pods"),
        ("muster.dev/reclaimable-pods", "main:١", "count must be a whole number of pods"),
        ("muster.dev/reclaimable-pods", "main:9999999", "from 0 to 999999"),
        ("muster.dev/reclaimable-pods", "main:1@soon", "element 0: delay must be a number"),
        ("muster.dev/reclaimable-pods", "main:1@-3", "element 0: delay must be a finite"),
    ],
)
def test_names_the_bad_annotation(key: str, value: str, problem: str) -> None:
    with pytest.raises(AnnotationError, match=problem) as caught:
        parse_workload_script({key: value})

    assert caught.value.annotation == key


def test_reclaimable_pods_are_steps_timed_from_the_run_start() -> None:
    script = parse_workload_script({"muster.dev/reclaimable-pods": "main:1@10, workers : 3 @ 2.5"})

    assert script.reclaims == (
        ReclaimStep(pod_set="main", count=1, delay_s=10),
        ReclaimStep(pod_set="workers", count=3, delay_s=2.5),
    )
