"""Gateway.Submit's pure part: manifests to planned events and envelopes, or the problems."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from muster.bus import decode
from muster.contracts.v1 import events_pb2
from muster.gateway.submit import (
    InvalidManifestError,
    envelopes,
    oversized,
    plan_submit,
)


def job(
    name: str = "train",
    *,
    namespace: str = "ml",
    queue: str | None = "team-a",
    parallelism: int = 3,
    cpu: str = "500m",
    memory: str = "2Gi",
) -> str:
    labels = f"labels: {{kueue.x-k8s.io/queue-name: {queue}}}" if queue else "labels: {}"
    return textwrap.dedent(
        f"""\
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: {name}
          namespace: {namespace}
          {labels}
        spec:
          parallelism: {parallelism}
          template:
            spec:
              containers:
              - name: c
                resources: {{requests: {{cpu: "{cpu}", memory: {memory}}}}}
        """
    )


CLUSTER_QUEUE = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: team-a, creationTimestamp: 2024-01-01T00:00:00Z}
    spec:
      namespaceSelector: {}
      resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 10}]}]
    """
)
LOCAL_QUEUE = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: team-a, namespace: ml}
    spec: {clusterQueue: team-a}
    """
)
WORKLOAD = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: Workload
    metadata: {name: w, namespace: ns, generation: 1}
    spec:
      podSets: [{name: main, count: 2, template: {spec: {containers: []}}}]
    """
)
BAD_WORKLOAD = WORKLOAD.replace("count: 2", "count: many")


def documents(*docs: str) -> str:
    return "\n---\n".join(docs)


def test_job_becomes_workload_submitted_with_queue_from_its_label() -> None:
    (event,) = plan_submit(job(), cluster="local")

    assert (event.kind, event.payload_field) == ("Workload", "submitted")
    assert event.key == event.workload
    assert event.key.startswith("ml/job-train-")
    payload = event.payload
    assert isinstance(payload, events_pb2.WorkloadSubmitted)
    assert payload.queue_name == "team-a"
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in payload.pod_sets] == [
        ("main", 3, {"cpu": "500m", "memory": "2Gi"})
    ]
    assert (payload.owner.kind, payload.owner.name, payload.owner.api_version) == (
        "Job",
        "train",
        "batch/v1",
    )
    manifest = json.loads(payload.manifest_json)
    assert manifest["kind"] == "Workload"
    assert manifest["metadata"]["name"] == event.key.split("/")[1]
    assert manifest["spec"]["queueName"] == "team-a"


def test_job_without_queue_label_goes_to_the_default_local_queue() -> None:
    (event,) = plan_submit(job(queue=None), cluster="local")

    assert isinstance(event.payload, events_pb2.WorkloadSubmitted)
    assert event.payload.queue_name == ""


def test_configuration_kinds_become_config_applied_with_the_document_as_written() -> None:
    cq, lq = plan_submit(documents(CLUSTER_QUEUE, LOCAL_QUEUE), cluster="local")

    assert (cq.kind, cq.key, cq.payload_field, cq.workload) == (
        "ClusterQueue",
        "team-a",
        "config_applied",
        "",
    )
    assert (lq.kind, lq.key) == ("LocalQueue", "ml/team-a")
    assert isinstance(cq.payload, events_pb2.ConfigApplied)
    written = json.loads(cq.payload.manifest_json)
    assert written["apiVersion"] == "kueue.x-k8s.io/v1beta1"  # not converted
    assert written["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert (cq.payload.kind, cq.payload.name) == ("ClusterQueue", "team-a")


def test_list_documents_are_unpacked_in_order() -> None:
    listed = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(LOCAL_QUEUE)]}
    )

    planned = plan_submit(documents(CLUSTER_QUEUE, listed, job()), cluster="local")

    assert [p.kind for p in planned] == ["ClusterQueue", "LocalQueue", "Workload"]


def test_every_problem_is_one_line_naming_object_and_field() -> None:
    with pytest.raises(InvalidManifestError) as caught:
        plan_submit(documents(CLUSTER_QUEUE, BAD_WORKLOAD, "- not an object\n"), cluster="local")

    assert caught.value.errors == (
        "Workload/ns/w: spec.podSets[0].count: expected an integer, got a string",
        "manifest document 3: (document): expected an object, got a list",
    )


def test_a_second_podset_with_min_count_is_refused_as_kueue_s_webhook_does() -> None:
    variable = "{name: %s, count: 2, minCount: 1, template: {spec: {containers: []}}}"
    two = WORKLOAD.replace(
        "podSets: [{name: main, count: 2, template: {spec: {containers: []}}}]",
        f"podSets: [{variable % 'a'}, {variable % 'b'}]",
    )
    with pytest.raises(InvalidManifestError) as caught:
        plan_submit(two, cluster="local")

    assert caught.value.errors == (
        "Workload/ns/w: spec.podSets[1].minCount: at most one podset may set minCount; "
        "spec.podSets[0] already does",
    )


def test_kinds_the_gateway_does_not_take_are_problems() -> None:
    topology = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
    config = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"

    with pytest.raises(InvalidManifestError) as caught:
        plan_submit(documents(topology, config), cluster="local")

    assert caught.value.errors == (
        "Topology/t: not used until topology-aware scheduling (cannot be submitted)",
        "Configuration: kind: is the scheduler's own configuration; it cannot be submitted",
    )


GANG_WORKLOAD = """apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {name: train, namespace: ml}
spec:
  podGroups: [{name: workers, policy: {gang: {minCount: 2}}}]
"""
GANG_POD = """apiVersion: v1
kind: Pod
metadata: {name: train-0, namespace: ml}
spec:
  schedulerName: muster
  workloadRef: {name: train, podGroup: workers}
  containers: [{name: c, resources: {requests: {cpu: 500m}}}]
"""


def test_cluster_objects_become_one_apply_command_each_for_the_binder() -> None:
    workload, pod = plan_submit(documents(GANG_WORKLOAD, GANG_POD), cluster="east", submission="k")

    assert (workload.kind, workload.key) == ("Workload.scheduling.k8s.io", "ml/train")
    assert (pod.kind, pod.key) == ("Pod", "ml/train-0")
    envs = envelopes([workload, pod], cluster="east")
    assert [e.type for e in envs] == ["cmd.apply", "cmd.apply"]
    (manifest,) = envs[1].apply_requested.manifests_json
    assert json.loads(manifest)["spec"]["workloadRef"] == {"name": "train", "podGroup": "workers"}
    assert [e.event_id for e in envs] == [workload.event_id, pod.event_id]
    again = plan_submit(documents(GANG_WORKLOAD, GANG_POD), cluster="east", submission="k")
    assert [p.event_id for p in again] == [workload.event_id, pod.event_id]


def test_a_bad_gang_object_is_refused_with_its_field() -> None:
    bad = GANG_WORKLOAD.replace("gang: {minCount: 2}", "basic: {}, gang: {minCount: 2}")

    with pytest.raises(InvalidManifestError) as caught:
        plan_submit(documents(bad, GANG_POD), cluster="local")

    assert caught.value.errors == (
        "Workload/ml/train: spec.podGroups[0].policy: must set exactly one of basic or gang",
    )


@pytest.mark.parametrize("manifest", ["", "---\n", "# only a comment\n"])
def test_a_manifest_without_objects_is_a_problem(manifest: str) -> None:
    with pytest.raises(InvalidManifestError) as caught:
        plan_submit(manifest, cluster="local")

    assert caught.value.errors == ("manifest: (document): has no object to submit",)


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(InvalidManifestError) as caught:
        plan_submit("apiVersion: v1\nkind: [\n", cluster="local")

    (line,) = caught.value.errors
    assert line.startswith("manifest: line 3: invalid YAML:")


def test_event_ids_are_the_same_for_a_retried_submit() -> None:
    first = plan_submit(documents(CLUSTER_QUEUE, job()), cluster="local", submission="call-1")
    again = plan_submit(documents(CLUSTER_QUEUE, job()), cluster="local", submission="call-1")

    assert [p.event_id for p in first] == [p.event_id for p in again]


@pytest.mark.parametrize("second", ["call-2", ""], ids=["another-key", "no-key"])
def test_the_same_content_in_another_submit_gets_new_event_ids(second: str) -> None:
    # 4 -> 0 -> 4: the second "4" must not be taken for a retry of the first.
    first = plan_submit(CLUSTER_QUEUE, cluster="local", submission="call-1")
    again = plan_submit(CLUSTER_QUEUE, cluster="local", submission=second)

    assert first[0].event_id != again[0].event_id


@pytest.mark.parametrize(
    ("changed", "cluster"),
    [
        pytest.param(WORKLOAD.replace("count: 2", "count: 3"), "local", id="content"),
        pytest.param(WORKLOAD, "other", id="cluster"),
        pytest.param(WORKLOAD.replace("generation: 1", "generation: 2"), "local", id="generation"),
    ],
)
def test_event_id_changes_with_content_cluster_or_generation(changed: str, cluster: str) -> None:
    (original,) = plan_submit(WORKLOAD, cluster="local", submission="k")
    (other,) = plan_submit(changed, cluster=cluster, submission="k")

    assert other.event_id != original.event_id


def test_envelopes_carry_the_planned_ids_and_decode_on_the_bus() -> None:
    planned = plan_submit(documents(CLUSTER_QUEUE, job()), cluster="east")

    envs = envelopes(planned, cluster="east", now_ns=1)

    assert [e.event_id for e in envs] == [p.event_id for p in planned]
    assert [e.type for e in envs] == ["config.applied", "workload.submitted"]
    assert envs[1].workload == planned[1].key
    assert all(e.cluster == "east" and e.source == "gateway" for e in envs)
    assert decode(envs[1].SerializeToString()).submitted == envs[1].submitted


def test_an_envelope_over_the_bus_limit_is_reported_with_its_size() -> None:
    envs = envelopes(plan_submit(job(), cluster="local"), cluster="local")
    size = len(envs[0].SerializeToString())

    assert oversized(envs, max_event_bytes=size) == []
    assert oversized(envs, max_event_bytes=size - 1) == [
        f"{envs[0].workload}: manifest too large: {size} bytes > {size - 1}"
    ]
