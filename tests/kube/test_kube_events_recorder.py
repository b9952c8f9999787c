"""EventRecorder against the API-server stand-in: events.k8s.io/v1 Events as client-go's
recorder writes them. Repeats become a series (one Event, its count patched when the series
starts and when it ends), objects are named by uid, failures are retried, refusals dropped."""

from __future__ import annotations

from typing import Any

import pytest

from muster.cluster.kube import Backoff, KubeBackend
from muster.cluster.kube.events import EventRecorder, EventSettings
from muster.cluster.kube.references import Reference
from muster.cluster.kube.resources import kueue_resources
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)

T0 = 1_767_225_600.0
WORKLOAD = Reference(
    api_version="kueue.x-k8s.io/v1beta1", kind="Workload", namespace="default", name="train"
)


def recorder(backend: KubeBackend, now: list[float], **settings: Any) -> EventRecorder:
    made = EventSettings(**{"backoff": Backoff(initial_s=0.01, max_s=0.02), **settings})
    return EventRecorder(
        backend.transport,
        controller="muster.dev/admission",
        instance="watcher-local",
        settings=made,
        lookup={"Workload": kueue_resources("v1beta1")["Workload"]},
        clock=lambda: now[0],
    )


def stored(server: ApiServer) -> list[dict[str, Any]]:
    rt = server.registry.by_key(("events.k8s.io", "events"))
    assert rt is not None
    return list(server.api.store.objects(rt).values())


def pending(recorded: EventRecorder, note: str = "waiting for quota") -> None:
    recorded.record(WORKLOAD, type_="Warning", reason="Pending", note=note, action="Pending")


async def test_repeats_are_one_event_whose_series_counts_them(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"podSets": []},
        }
    )
    now = [T0]
    events = recorder(backend, now, finish_s=360.0)
    pending(events)
    await events.flush()
    now[0] += 10
    pending(events)  # a series starts: written at once
    await events.flush()
    for _ in range(3):  # counted, not written
        now[0] += 10
        pending(events)
    pending(events, note="waiting for a flavor")  # another reason to wait: its own Event
    await events.flush()
    by_note = {e["note"]: e for e in stored(server)}
    assert by_note["waiting for quota"]["series"]["count"] == 2
    assert "series" not in by_note["waiting for a flavor"]
    assert by_note["waiting for quota"]["regarding"]["uid"]  # read once, for kubectl describe
    assert by_note["waiting for quota"]["reportingController"] == "muster.dev/admission"
    # Quiet for finish_s: the series ends, its last count written.
    now[0] += 400
    events.tick()
    await events.flush()
    await events.close()
    by_note = {e["note"]: e for e in stored(server)}
    assert by_note["waiting for quota"]["series"]["count"] == 5
    assert len(stored(server)) == 2
    assert server.requests.count(verb="create", path="/events$") == 2
    assert server.requests.count(verb="patch", path="/events/") == 2
    assert server.requests.count(verb="get", path="/workloads/train$") == 1


async def test_failures_are_retried_and_refusals_dropped(
    server: ApiServer, backend: KubeBackend
) -> None:
    now = [T0]
    events = recorder(backend, now)
    server.faults.fail_next(2, status=500, verb="create", path="/events$")
    pending(events)
    await events.flush()
    assert len(stored(server)) == 1
    server.faults.fail_next(1, status=422, verb="create", path="/events$")
    pending(events, note="refused")
    await events.flush()
    await events.close()
    assert len(stored(server)) == 1
    assert (events.written, events.dropped) == (1, 1)


async def test_at_most_queue_size_events_wait(server: ApiServer, backend: KubeBackend) -> None:
    now = [T0]
    events = recorder(backend, now, queue_size=3, qps=0.5, burst=1)
    for i in range(5):
        pending(events, note=f"reason {i}")
    assert events.dropped == 2
    await events.close()


async def test_a_spam_of_events_is_dropped_past_the_queue_with_few_log_lines(
    server: ApiServer, backend: KubeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    # 5 000 objects each with an Event, where 3 may wait: a few log lines, not one per drop.
    now = [T0]
    events = recorder(backend, now, queue_size=3, qps=0.5, burst=1)
    with caplog.at_level("WARNING", logger="muster.cluster.kube.events"):
        for i in range(5000):
            ref = Reference(api_version="batch/v1", kind="Job", namespace="default", name=f"j{i}")
            events.record(ref, type_="Warning", reason="Invalid", note="bad", action="Validate")
    assert events.dropped == 4997
    assert len([r for r in caplog.records if "dropping" in r.getMessage()]) == 5
    await events.close()


async def test_the_uids_a_watch_teaches_are_remembered_for_the_newest_objects_only(
    server: ApiServer, backend: KubeBackend
) -> None:
    events = recorder(backend, [T0])
    for i in range(150_000):  # a watch that has seen this many Jobs come and go
        meta = {"name": f"j{i}", "namespace": "default", "uid": f"u{i}"}
        events.learn({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})
    assert events.uids_known == 100_000
    await events.close()
