"""Metrics and traces of a scripted run through every service as its own process: what the
/metrics endpoints say matches what happened (3 admitted, 1 preempted with its reason, the
pending gauge back to 0), and one workload's spans, collected by an OTLP receiver from every
service, form one trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from bus_helpers import EventLog
from scrape_helpers import scrape, value

from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.devtools.otlp import OtlpReceiver
from muster.launcher.stack import Stack

pytestmark = pytest.mark.timeout(120)

KUEUE = "kueue.x-k8s.io/v1beta2"
CONFIG = f"""apiVersion: {KUEUE}
kind: ResourceFlavor
metadata: {{name: default}}
---
apiVersion: {KUEUE}
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 3}}]}}]
---
apiVersion: {KUEUE}
kind: LocalQueue
metadata: {{namespace: team, name: lq}}
spec: {{clusterQueue: cq}}
"""


def workload(name: str, *, priority: int, run_s: int) -> str:
    return f"""apiVersion: {KUEUE}
kind: Workload
metadata:
  namespace: team
  name: {name}
  annotations: {{muster.dev/run-seconds: "{run_s}"}}
spec:
  queueName: lq
  priority: {priority}
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]
"""


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-0"},
    "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
}


async def eventually(check: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Wait until `check()` holds: gauges are refreshed with the visibility views (≤ 0.1 s
    apart, later on a loaded machine), so a scrape may come before the last round shows."""
    async with asyncio.timeout(timeout_s):
        while not await asyncio.to_thread(check):  # noqa: ASYNC110  # nothing notifies of a scrape
            await asyncio.sleep(0.1)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver().start()
    yield otlp
    otlp.stop()


@pytest.fixture
async def stack(nats_server: str, tmp_path: Path, receiver: OtlpReceiver) -> AsyncIterator[Stack]:
    running = Stack(
        nats_url=nats_server,
        cluster="local",
        shards=1,
        speed=10,
        log_dir=tmp_path,
        environment={
            "MUSTER_METRICS_PORT": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    try:
        await running.start()
        yield running
    finally:
        await running.stop()


def metrics_of(stack: Stack, service: str) -> str:
    (svc,) = [s for s in stack.services if s.name == service]
    return svc.addresses["metrics"]


async def test_metrics_and_traces_follow_a_scripted_run(
    nats_server: str, stack: Stack, events: EventLog, receiver: OtlpReceiver
) -> None:
    backend = await SimBackend.connect(nats_server, cluster="local")
    await backend.apply(NODE)
    await backend.close()
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        gateway = services_pb2_grpc.GatewayStub(channel)
        await gateway.Submit(services_pb2.SubmitRequest(manifest=CONFIG))
        for name in ("a", "b", "c"):  # one call each: one trace each
            await gateway.Submit(
                services_pb2.SubmitRequest(manifest=workload(name, priority=0, run_s=30))
            )
        for name in ("a", "b", "c"):
            await events.wait_for("running", workload=f"team/{name}", timeout_s=20)
        await gateway.Submit(
            services_pb2.SubmitRequest(manifest=workload("urgent", priority=100, run_s=5))
        )
        evicted = await events.wait_for("evicted", timeout_s=20)
        victim = evicted.workload
        await events.wait_for("finished", workload="team/urgent", timeout_s=20)
        await events.wait_for_next("admitted", after=evicted, timeout_s=20)  # back in

    admission = metrics_of(stack, "admission-0")
    cq = {"cluster_queue": "cq", "replica_role": "leader"}

    def settled() -> bool:
        samples = scrape(admission)
        pending = value(samples, "kueue_pending_workloads", **cq)
        # The consumer's lag is read from NATS every LAG_EVERY_S (5 s): wait for a fresh read.
        lag = value(samples, "muster_consumer_pending_messages", consumer="admission-0")
        admitted = value(samples, "kueue_admitted_active_workloads", **cq)
        return pending == 0 and admitted == 3 and lag == 0

    await eventually(settled, timeout_s=20)
    samples = scrape(admission)
    assert value(samples, "kueue_admitted_workloads_total", **cq, priority_class="") == 5
    assert value(samples, "kueue_quota_reserved_workloads_total", **cq) == 5
    preempted = {"preempting_cluster_queue": "cq", "reason": "InClusterQueue"}
    assert value(samples, "kueue_preempted_workloads_total", **preempted) == 1
    assert value(samples, "kueue_evicted_workloads_total", **cq, reason="Preempted") == 1
    assert value(samples, "kueue_finished_workloads_total", **cq) == 1
    assert value(samples, "kueue_admission_wait_time_seconds_count", **cq) == 5
    assert value(samples, "muster_admission_round_duration_seconds_count", phase="decide")

    gateway_samples = scrape(metrics_of(stack, "gateway"))
    published = {"service": "gateway", "type": "workload.submitted"}
    assert value(gateway_samples, "muster_events_published_total", **published) == 4
    binder = scrape(metrics_of(stack, "binder"))
    bound = {"consumer": "binder-local", "type": "workload.gang_permitted", "outcome": "ack"}
    assert value(binder, "muster_events_consumed_total", **bound) == 5
    # Each pod was created on its node (placed before it existed): no bind, five creations.
    assert value(binder, "muster_create_bound_duration_seconds_count") == 5
    assert value(binder, "muster_pods_created_bound_total") == 5
    assert value(binder, "muster_bind_duration_seconds_count") == 0
    gangpermit = scrape(metrics_of(stack, "gangpermit"))
    assert value(gangpermit, "muster_placement_pass_duration_seconds_count")
    assert value(gangpermit, "muster_gangs_waiting") == 0

    await stack.stop()  # each service flushes its spans as it exits
    assert_one_trace(receiver, "team/a", expect={
        "gateway": {"gateway.Submit"},
        "admission": {"admission.admitted"},  # with its reservation: no quota_reserved
        "binder": {"binder.create", "handle workload.gang_permitted"},  # created on its node
        "gangpermit": {"gangpermit.gang_permitted"},
        "watcher": {"watcher.translate"},
    })  # fmt: skip
    assert_one_trace(receiver, victim, expect={
        "admission": {"admission.evicted"},
        "preemption": {"preemption.evict"},
        "binder": {"binder.evict"},
    })  # fmt: skip


def assert_one_trace(receiver: OtlpReceiver, workload: str, *, expect: dict[str, set[str]]) -> None:
    """Every span about `workload` is in one trace, which holds `expect`'s spans per service."""
    spans = receiver.spans()
    about = [
        span
        for _, span in spans
        if any(a.key == "muster.workload" and a.value.string_value == workload
               for a in span.attributes)
    ]  # fmt: skip
    assert about, f"no span about {workload}"
    assert len({span.trace_id for span in about}) == 1, sorted({s.name for s in about})
    trace_id = about[0].trace_id
    names: dict[str, set[str]] = {}
    for service, span in spans:
        if span.trace_id == trace_id:
            names.setdefault(service, set()).add(span.name)
    for service, wanted in expect.items():
        assert wanted <= names.get(service, set()), (service, names)
