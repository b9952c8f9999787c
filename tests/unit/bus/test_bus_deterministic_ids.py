"""Writers whose events have ids of their own (the watcher's facts, the gateway's submissions)
draw no random id only to throw it away: `new_event(..., event_id=...)`."""

from __future__ import annotations

import uuid

import pytest

from muster.bus import envelope
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.submit import envelopes, plan_submit
from muster.watcher.handlers import WATCHER_ID_NAMESPACE, WatcherContext
from muster.watcher.pods import PodState, Sent, due_events

WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: w, namespace: ns}
spec:
  queueName: lq
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]
"""


@pytest.fixture
def no_random_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    def drawn() -> uuid.UUID:
        raise AssertionError("a random event id was drawn")

    monkeypatch.setattr("muster.bus.envelope.uuid.uuid4", drawn)


@pytest.mark.usefixtures("no_random_ids")
def test_the_watchers_events_draw_no_random_id() -> None:
    context = WatcherContext(cluster="local", outbox=None, marks=None)  # type: ignore[arg-type]
    pod = PodState(namespace="ns", name="w-0", uid="u0", workload="ns/w", pod_set="main")
    (out,) = due_events("ns/w", [pod], Sent())

    env = context.envelope(out)

    fact = f"local/ns/w/{out.id_key}"
    assert env.event_id == str(uuid.uuid5(WATCHER_ID_NAMESPACE, fact))


@pytest.mark.usefixtures("no_random_ids")
def test_the_gateways_submissions_draw_no_random_id() -> None:
    planned = plan_submit(WORKLOAD, cluster="local", submission="call-1")

    (env,) = envelopes(planned, cluster="local")

    assert env.event_id == planned[0].event_id
    assert env.type == "workload.submitted"


def test_an_event_without_an_id_of_its_own_still_gets_a_random_one() -> None:
    one, two = (
        envelope.new_event("deleted", pb.WorkloadDeleted(), cluster="local", source="t")
        for _ in range(2)
    )
    assert one.event_id != two.event_id
