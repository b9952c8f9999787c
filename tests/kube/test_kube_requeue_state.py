"""`status.requeueState.requeueAt` after a check's Retry with requeueAfterSeconds, on
Kubernetes, end to end: the test as the check's controller (as in test_kube_checks_e2e), every
service from its own flags on a real nats-server and the API-server stand-in. Kueue's workload
controller writes the Retry's lastTransitionTime + requeueAfterSeconds there, a metav1.Time; the
watcher carries that lastTransitionTime in the `admission_check` event and writes the same
instant, and admission requeues no earlier."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import eventually, running_stack, workload_of_job
from test_kube_checks_e2e import BUDGET, answer, check_when, job_yaml, queues
from test_kube_services_e2e import NODE

from muster.api.check_states import format_time
from muster.core.requeue_state import requeue_end_s

pytestmark = pytest.mark.timeout(90)

AFTER_S = 5  # the check's requeueAfterSeconds: long enough to read requeueAt meanwhile


async def test_a_check_retry_writes_the_requeue_at_admission_waits_for(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl, events = stack.kubectl, stack.events
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        await kubectl.apply(job_yaml("retry"))
        name = (await workload_of_job(kubectl, "ml", "retry"))["metadata"]["name"]
        key = f"ml/{name}"
        await check_when(kubectl, name, state="Pending")
        asked_s = time.time()
        await answer(kubectl, name, "Retry", "over budget for now", requeueAfterSeconds=AFTER_S)
        answered_s = time.time()

        async def retry_told() -> list[Any]:
            told = events.of(key, "workload.admission_check")
            return [e for e in told if e.admission_check.state == "Retry"]

        (told,) = await eventually(retry_told)
        # From the entry's lastTransitionTime (the whole second the answer was written in),
        # which the event carries, not from the event's own time.
        transitioned_s = told.admission_check.transitioned_unix_nano / 1e9
        assert int(asked_s) <= transitioned_s <= answered_s
        end_s = requeue_end_s(transitioned_s, AFTER_S)

        async def requeue_state() -> dict[str, Any] | None:
            workload = await kubectl.get("Workload", name, "ml")
            found: dict[str, Any] | None = ((workload or {}).get("status") or {}).get(
                "requeueState"
            )
            return found

        # Written with the eviction, no count (a Retry counts no PodsReady timeout).
        assert await eventually(requeue_state) == {"requeueAt": format_time(end_s)}
        await events.wait_for(key, "workload.requeued")
        (requeued,) = events.of(key, "workload.requeued")
        assert requeued.requeued.reason == "BackoffFinished"
        assert requeued.time_unix_nano / 1e9 >= end_s  # never before the instant written

        async def removed() -> bool:
            return await requeue_state() is None

        await eventually(removed)  # it queued again: Kueue clears requeueAt
