"""Hostile manifests Submitted to a gateway in kube mode (it writes them into the API-server
stand-in as the caller): each is INVALID_ARGUMENT with one short line naming the object and
the field, nothing is half-written, and the gateway and every service go on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import grpc
import grpc.aio
import pytest
from budget import wait_s
from kube_services_helpers import running_stack
from test_kube_submit_e2e import kube_gateway

from muster.cluster.kube.settings import KubeConfig
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.auth_config import SecurityConfig

pytestmark = pytest.mark.timeout(60)

NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"


def job(name: str, *, namespace: str = "team-a", template: str = "") -> str:
    return textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          suspend: true
          template:
            {template}
            spec:
              restartPolicy: Never
              containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
        """)


COMPOSITE = """
apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {name: root, namespace: team-a}
spec:
  workloadRef: {workloadName: w, templateName: root}
  schedulingPolicy: {gang: {minGroupCount: 1}}
"""
WORKLOAD = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: {"w" * 64}, namespace: team-a}}
spec:
  queueName: lq
  podSets: [{{name: main, count: 1, template: {{spec: {{containers: [{{name: c, image: b}}]}}}}}}]
"""


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (COMPOSITE, "CompositePodGroup/team-a/root: not found: the API server serves no "
                    "CompositePodGroup in scheduling.k8s.io/v1alpha3, or namespace team-a"),
        (job("lost", namespace="nowhere"), "Job/nowhere/lost: not found: the API server "
                                           "serves no Job in batch/v1, or namespace nowhere"),
        (WORKLOAD, f"Workload/team-a/{'w' * 64}: metadata.name: must be no more than 63"),
        (job("tl", template=f"metadata: {{labels: {{l: {'v' * 64}}}}}"),
         "Job/team-a/tl: spec.template.metadata.labels.l: must be no more than 63"),
        (job("j" * 64), "Job/team-a/jjjj"),
    ],
    ids=["api-not-served", "no-namespace", "workload-name-64", "template-label-64", "job-64"],
)  # fmt: skip
async def test_a_hostile_submit_is_refused_naming_the_object_and_field(
    tmp_path: Path, manifest: str, problem: str
) -> None:
    async with running_stack(tmp_path) as stack:
        await stack.kubectl.apply(NAMESPACE)
        security = SecurityConfig(kube=KubeConfig(host=stack.server.url))
        async with (
            kube_gateway(stack.bus, security) as address,
            grpc.aio.insecure_channel(address) as channel,
        ):
            gateway = services_pb2_grpc.GatewayStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await gateway.Submit(
                    services_pb2.SubmitRequest(manifest=manifest), timeout=wait_s(None)
                )

        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details() or ""
        assert details.startswith(problem), details
        assert len(details) <= 512
        stack.check_alive()
