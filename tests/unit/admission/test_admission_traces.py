"""Admission publishes each decision in its own workload's trace, even when one round decides
for workloads of many traces; with no exporter no span is made, the ids still travel."""

from __future__ import annotations

import pytest
from admission_stream import (
    StoringPublisher,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    submitted,
    workload,
)

from muster.admission.handlers import Rounds
from muster.admission.state import AdmissionState
from muster.bus import tracing
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)


def traced(env: pb.Envelope, trace_id: str, sequence: int) -> pb.Envelope:
    env.traceparent = f"00-{trace_id}-{'1' * 16}-01"
    env.sequence = sequence
    return env


async def test_each_decision_goes_in_its_workloads_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "recording", lambda: False)  # no exporter: no spans
    state = AdmissionState()
    state.take_ownership(now_s=0.0)
    publisher = StoringPublisher()
    rounds = Rounds(state, publisher, clock=lambda: 10.0)
    config = [applied(m) for m in (flavor(), cluster_queue(cpu="10"), local_queue())]
    for i, env in enumerate(config, start=1):
        env.sequence = i
    await rounds.apply_batch(config)
    a, b = "a" * 32, "b" * 32
    await rounds.apply_batch(
        [traced(submitted(workload("a")), a, 10), traced(submitted(workload("b")), b, 11)]
    )
    traces = {(e.workload, e.traceparent.split("-")[1]) for e in publisher.stored}
    assert traces == {("ns/a", a), ("ns/b", b)}
    assert len(publisher.stored) == 2  # an admitted (with its reservation) each
