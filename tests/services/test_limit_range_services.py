"""LimitRanges through Submit and the admission service on a real nats-server: a container
that sets no request is charged its namespace's default, as Kueue charges it."""

from __future__ import annotations

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    flavor,
    local_queue,
    publish,
    start_admission,
)
from bus_helpers import EventLog
from gateway_helpers import running_gateway

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)

LIMIT_RANGE = """\
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: ns}
spec:
  limits:
  - {type: Container, defaultRequest: {cpu: "1"}, max: {cpu: "2"}}
"""


def _workload(name: str, container: str = "{name: c}") -> str:
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: {name}, namespace: ns}}
spec:
  queueName: lq
  podSets: [{{name: main, count: 2, template: {{spec: {{containers: [{container}]}}}}}}]
"""


async def test_submit_into_a_namespace_with_a_limit_range_charges_its_defaults(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await publish(
            bus,
            config_applied(flavor()),
            config_applied(cluster_queue(cpu="4")),
            config_applied(local_queue()),
        )
        over = "{name: c, resources: {requests: {cpu: 3}, limits: {cpu: 3}}}"
        manifest = "---\n".join(
            [LIMIT_RANGE, _workload("a"), _workload("b"), _workload("c"), _workload("big", over)]
        )
        async with running_gateway(bus) as gw:
            request = services_pb2.SubmitRequest(manifest=manifest)
            reply = await gw.gateway.Submit(request, timeout=10)
        assert (reply.objects[0].kind, reply.objects[0].key) == ("LimitRange", "ns/defaults")

        for name in ("a", "b"):
            admitted = await events.wait_for("admitted", workload=f"ns/{name}")
            (assignment,) = admitted.admitted.admission.pod_set_assignments
            assert dict(assignment.resource_usage) == {"cpu": "2"}  # 2 pods of 1 cpu default
        waiting = await events.wait_for("pending", workload="ns/c")
        assert "insufficient unused quota for cpu" in waiting.pending.message
        refused = await events.wait_for("pending", workload="ns/big")
        assert refused.pending.reason == "Misconfigured"
        assert refused.pending.message == (
            "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
            "containers[0]: cpu 3 is above the max 2 of LimitRange defaults"
        )
        assert events.matching("admitted", workload="ns/c") == []
    finally:
        await admission.stop()
