"""The stand-in refuses a pod, or a Job's pod template, whose pod-level requests do not cover
its containers' total, as the real API server's validatePodResourceConsistency does (422
Invalid, one cause per resource, in Kubernetes' words); the pod that just fits is created."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kube_helpers import as_model, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

POD = """
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  resources: {requests: {cpu: "POD_CPU", memory: 1Gi}}
  initContainers:
  - {name: setup, image: busybox, resources: {requests: {cpu: "3"}}}
  containers:
  - {name: a, image: busybox, resources: {requests: {cpu: "1", memory: 512Mi}}}
  - {name: b, image: busybox, resources: {limits: {cpu: 1500m}}}
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      resources: {requests: {cpu: "1"}}
      containers:
      - {name: a, image: busybox, resources: {requests: {cpu: "1", memory: 2Gi}}}
      - {name: b, image: busybox, resources: {requests: {cpu: 500m}}}
"""


def _pod(cpu: str) -> Any:
    return as_model(client.V1Pod, yaml.safe_load(POD.replace("POD_CPU", cpu)))


def test_a_pod_whose_own_requests_cover_its_containers_is_created(core: client.CoreV1Api) -> None:
    """Containers 1 + 1.5 (b's limit is its request) = 2.5 cpu, the init container 3: 3."""
    created = core.create_namespaced_pod("default", _pod("3"))
    assert present(created.metadata).name == "p"


@pytest.mark.parametrize("cpu", ["2500m", "2"])
def test_a_pod_whose_own_requests_are_below_its_containers_total_is_422(
    core: client.CoreV1Api, cpu: str
) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", _pod(cpu))
    assert caught.value.status == 422
    causes = status_of(caught.value)["details"]["causes"]
    assert [(c["field"], c["message"]) for c in causes] == [
        (
            "spec.resources.requests[cpu]",
            f'Invalid value: "{cpu}": must be greater than or equal to aggregate container '
            "requests of 3",
        )
    ]


def test_a_jobs_template_below_its_containers_total_is_422(batch: client.BatchV1Api) -> None:
    """Only the resources the pod sets are compared: memory is the containers' alone."""
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job("default", as_model(client.V1Job, yaml.safe_load(JOB)))
    assert caught.value.status == 422
    causes = status_of(caught.value)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.template.spec.resources.requests[cpu]"]
    assert causes[0]["message"].endswith("aggregate container requests of 1500m")
