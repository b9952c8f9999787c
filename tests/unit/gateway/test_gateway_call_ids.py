"""A Submit without an idempotency key, and a trace the gateway starts, get fresh ids without a
system call per call (`os.urandom` hands the GIL to the gateway's gRPC threads); the ids stay
unique: two calls never share one, nor do a parent gateway process and its forked child."""

from __future__ import annotations

import os
import re

import pytest
from opentelemetry import trace

from muster.bus.envelope import new_event
from muster.bus.tracing import continue_trace
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.submit import fresh_submission, plan_submit

WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: w, namespace: ns}
spec:
  queueName: lq
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]
"""
# Version 00, ids not all zeros, the sampled flag (a recording tracer adds the random flag, 02).
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-0[13]")


@pytest.fixture
def no_system_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    def drawn(n: int) -> bytes:
        raise AssertionError(f"os.urandom({n}) called during a call")

    monkeypatch.setattr(os, "urandom", drawn)


@pytest.mark.usefixtures("no_system_randomness")
def test_submits_without_a_key_get_distinct_ids_without_a_system_call() -> None:
    one, two = (plan_submit(WORKLOAD, cluster="local") for _ in range(2))

    assert one[0].event_id != two[0].event_id


@pytest.mark.usefixtures("no_system_randomness")
def test_a_trace_the_gateway_starts_is_fresh_and_valid_without_a_system_call() -> None:
    parents = []
    for _ in range(2):
        with continue_trace({}, "gateway.Submit", kind=trace.SpanKind.SERVER, new_trace=True):
            env = new_event(
                "deleted", pb.WorkloadDeleted(), cluster="local", source="t", event_id="e"
            )
        parents.append(env.traceparent)

    assert all(TRACEPARENT.fullmatch(p) for p in parents), parents
    assert parents[0] != parents[1]


def test_a_forked_gateway_counts_its_submissions_under_a_prefix_of_its_own() -> None:
    fresh_submission()  # the parent has counted, as a running gateway has
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover  # the child's report is what the parent asserts
        os.write(write, fresh_submission().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        childs = pipe.read()
    parents = fresh_submission()

    assert childs.split(".")[0] != parents.split(".")[0]
