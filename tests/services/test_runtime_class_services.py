"""RuntimeClasses through Submit and the admission service on a real nats-server: a workload
naming one is charged its overhead per pod, as Kueue charges it; one naming a RuntimeClass that
does not exist waits, naming it, until it is submitted."""

from __future__ import annotations

import pytest
from admission_world import basic_config, running, start_admission
from bus_helpers import EventLog
from gateway_helpers import running_gateway
from workload_manifest import runtime_class_workload

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)


def _runtime_class(name: str) -> str:
    return f"""\
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {{name: {name}}}
handler: {name}
overhead: {{podFixed: {{cpu: 500m}}}}
"""


async def test_submit_charges_a_runtime_class_overhead_and_holds_a_missing_one(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()
        await basic_config(bus, cpu="4")
        manifest = "---\n".join([_runtime_class("kata"), runtime_class_workload("a", "kata")])
        async with running_gateway(bus) as gw:
            reply = await gw.gateway.Submit(
                services_pb2.SubmitRequest(manifest=manifest), timeout=10
            )
            assert (reply.objects[0].kind, reply.objects[0].key) == ("RuntimeClass", "kata")
            admitted = await events.wait_for("admitted", workload="ns/a")
            (assignment,) = admitted.admitted.admission.pod_set_assignments
            assert dict(assignment.resource_usage) == {"cpu": "2"}  # 2 pods of 500m + 500m

            waiting = runtime_class_workload("b", "gvisor")
            await gw.gateway.Submit(services_pb2.SubmitRequest(manifest=waiting), timeout=10)
            held = await events.wait_for("pending", workload="ns/b")
            assert held.pending.reason == "Misconfigured"
            assert held.pending.message == (
                "pod overhead validation failed: spec.podSets[0].template.spec."
                'runtimeClassName: RuntimeClass "gvisor" not found'
            )
            later = services_pb2.SubmitRequest(manifest=_runtime_class("gvisor"))
            await gw.gateway.Submit(later, timeout=10)
            admitted = await events.wait_for("admitted", workload="ns/b")
            (assignment,) = admitted.admitted.admission.pod_set_assignments
            assert dict(assignment.resource_usage) == {"cpu": "2"}
