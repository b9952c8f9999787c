"""One encoding of each payload, whoever sends it, and one reading with errors that name it."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from muster.api import decode_documents
from muster.api.model import LocalQueue, Workload
from muster.contracts.v1 import events_pb2
from muster.gateway.submit import plan_submit
from muster.payloads import (
    PayloadError,
    applied_document,
    applied_object,
    manifest_workload,
    workload_submitted,
)
from muster.watcher import translate

WORKLOAD = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: Workload
    metadata:
      name: train
      namespace: ml
      uid: uid-1
      ownerReferences:
      - {apiVersion: batch/v1, kind: Job, name: train, uid: job-1, controller: true}
    spec:
      queueName: team-a
      priority: 5
      podSets:
      - name: main
        count: 2
        template:
          spec:
            containers:
            - name: c
              resources: {requests: {memory: 2Gi, cpu: 500m}}
    """
)

LOCAL_QUEUE = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {name: lq, namespace: ml}
    spec: {clusterQueue: cq}
    """
)


def workload(text: str = WORKLOAD) -> Workload:
    (obj,), errors = decode_documents([yaml.safe_load(text)])
    assert not errors
    assert isinstance(obj, Workload)
    return obj


def test_gateway_and_watcher_send_the_same_submitted_payload() -> None:
    (planned,) = plan_submit(WORKLOAD, cluster="local", submission="s")
    from_gateway = planned.payload
    from_watcher = translate.submitted(workload()).payload
    assert from_gateway == from_watcher
    assert isinstance(from_gateway, events_pb2.WorkloadSubmitted)
    assert (from_gateway.owner.kind, from_gateway.owner.uid) == ("Job", "job-1")
    assert [(p.name, p.count, dict(p.requests)) for p in from_gateway.pod_sets] == [
        ("main", 2, {"cpu": "500m", "memory": "2Gi"})
    ]


def test_a_manifest_is_canonical_json_and_reads_back_as_the_same_workload() -> None:
    payload = workload_submitted(workload())
    text = payload.manifest_json
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    (again,), errors = decode_documents([json.loads(text)])
    assert not errors
    assert again == workload()


def test_gateway_and_watcher_send_the_same_config_applied_payload() -> None:
    (planned,) = plan_submit(LOCAL_QUEUE, cluster="local", submission="s")
    from_watcher = translate.config_applied(yaml.safe_load(LOCAL_QUEUE)).payload
    assert planned.payload == from_watcher
    assert isinstance(from_watcher, events_pb2.ConfigApplied)
    obj = applied_object(from_watcher)
    assert isinstance(obj, LocalQueue)
    assert (obj.meta.namespace, obj.meta.name, obj.cluster_queue) == ("ml", "lq", "cq")


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ("{", r"LocalQueue/ml/lq: manifest is not JSON \(JSONDecodeError"),
        ("[]", "LocalQueue/ml/lq"),
        (
            '{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue"}',
            r"LocalQueue/ml/lq document 1\): metadata.name: is required",
        ),
    ],
)
def test_a_broken_applied_manifest_is_an_error_naming_the_object(
    manifest: str, problem: str
) -> None:
    payload = events_pb2.ConfigApplied(kind="LocalQueue", name="ml/lq", manifest_json=manifest)
    with pytest.raises(PayloadError, match=problem):
        applied_object(payload)


def test_an_applied_document_must_be_a_json_object() -> None:
    payload = events_pb2.ConfigApplied(kind="LocalQueue", name="ml/lq", manifest_json="[1]")
    with pytest.raises(PayloadError, match="LocalQueue/ml/lq: manifest is a JSON list"):
        applied_document(payload)


def test_a_workload_reads_back_from_its_manifest_and_anything_else_is_an_error_naming_it() -> None:
    assert manifest_workload(workload_submitted(workload()).manifest_json, what="ml/train") == (
        workload()
    )
    queue = json.dumps(yaml.safe_load(LOCAL_QUEUE))
    with pytest.raises(PayloadError, match=r"^ml/train: manifest is a LocalQueue, not a Workload"):
        manifest_workload(queue, what="ml/train")


def test_a_manifest_nested_deeper_than_python_recurses_is_an_error_not_a_crash() -> None:
    payload = events_pb2.ConfigApplied(kind="LocalQueue", name="ml/lq", manifest_json="[" * 10**5)
    with pytest.raises(PayloadError, match=r"LocalQueue/ml/lq: manifest is not JSON \(Recursion"):
        applied_object(payload)
