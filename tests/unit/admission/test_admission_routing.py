"""Routing in the admission service's state: Routed events, the routed admission, the rebuild,
and shards that route only among the alternatives in their own cohort trees."""

from __future__ import annotations

import json
from typing import Any

import pytest
from admission_stream import KUEUE, Stream, applied, flavor, local_queue, reported, submitted

from muster.admission.shards import shard_of
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb
from muster.core.routing import Policy

LIGHT = WorkloadKey("ns/light")
TO_CPU = {"queueName": "cpu", "requests": {"nvidia.com/gpu": 0}, "runSeconds": 90}


def cluster_queue(
    name: str, *, cpu: str, gpu: str | None = None, policy: str | None = None
) -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": cpu}]
    covered = ["cpu"]
    if gpu is not None:
        resources.append({"name": "nvidia.com/gpu", "nominalQuota": gpu})
        covered.append("nvidia.com/gpu")
    meta: dict[str, Any] = {"name": name}
    if policy is not None:
        meta["annotations"] = {"muster.dev/routing-policy": policy}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": meta,
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": covered,
                    "flavors": [{"name": "default", "resources": resources}],
                }
            ],
        },
    }


def job(
    name: str,
    *,
    queue: str = "gpu",
    cpu: str = "1",
    gpu: int = 1,
    run_s: float = 30,
    alternatives: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    annotations = {"muster.dev/run-seconds": f"{run_s:g}"}
    if alternatives is not None:
        annotations["muster.dev/alternatives"] = json.dumps(alternatives)
    container = {"name": "c", "resources": {"requests": requests}}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


def light(*alternatives: dict[str, Any]) -> pb.Envelope:
    """A light job: 26 s on a GPU, or another way (`TO_CPU` unless told), behind the GPU jobs."""
    spec = job("light", cpu="4", run_s=26, alternatives=list(alternatives or [TO_CPU]))
    return submitted(spec, at_s=2.0)


def owning(**settings: Any) -> AdmissionState:
    state = AdmissionState(**settings)
    state.take_ownership(now_s=0.0)
    return state


def configure(stream: Stream, states: list[AdmissionState], *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        env = applied(manifest)
        for state in states:
            stream.run(state, env)


def gpu_and_cpu(
    stream: Stream, state: AdmissionState, *, policy: str | None = "fastest", cpu: str = "8"
) -> None:
    configure(
        stream,
        [state],
        flavor(),
        cluster_queue("gpu", cpu="40", gpu="1", policy=policy),
        cluster_queue("cpu", cpu=cpu),
        local_queue("gpu", cq="gpu"),
        local_queue("cpu", cq="cpu"),
    )


def busy_gpu(stream: Stream, state: AdmissionState, *, jobs: int = 4) -> None:
    """One GPU job running and `jobs - 1` waiting, 30 s each."""
    for i in range(jobs):
        stream.run(state, submitted(job(f"g{i}"), at_s=1.0 + i / 10))


def payloads(envs: list[pb.Envelope], key: str = LIGHT) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in envs if e.workload == key]


def caught_up(state: AdmissionState, *, now_s: float, key: str = LIGHT) -> list[str]:
    """What a rebuilt replica publishes about `key` when it takes ownership."""
    decisions = state.decisions(state.take_ownership(now_s=now_s))
    return [d.field for d in decisions if d.workload == key]


def test_a_light_workload_is_routed_to_cpu_and_admitted_there_with_its_alternatives_requests() -> (
    None
):
    stream, state = Stream(), owning()
    gpu_and_cpu(stream, state)
    busy_gpu(stream, state)

    out = stream.run(state, light())

    assert payloads(out) == ["routed", "admitted"]
    routed = out[0].routed
    assert (routed.from_cluster_queue, routed.to_cluster_queue, routed.queue_name) == (
        "gpu",
        "cpu",
        "cpu",
    )
    assert (routed.policy, routed.reason) == ("fastest", "Fastest")
    assert routed.message.startswith("routed from ClusterQueue gpu to cpu (LocalQueue cpu)")
    admitted = out[1].admitted
    assert admitted.admission.cluster_queue == "cpu"
    usage = admitted.admission.pod_set_assignments[0].resource_usage
    assert dict(usage) == {"cpu": "4"}  # no GPU
    (hint,) = admitted.hints
    assert dict(hint.requests) == {"cpu": "4"}
    assert dict(hint.annotations) == {"muster.dev/run-seconds": "90"}


def test_a_workload_on_its_declared_queue_gets_no_routed_requests_in_its_hints() -> None:
    stream, state = Stream(), owning()
    gpu_and_cpu(stream, state)

    out = stream.run(state, light())

    assert payloads(out) == ["routed", "admitted"]
    assert (out[0].routed.from_cluster_queue, out[0].routed.to_cluster_queue) == ("gpu", "gpu")
    assert out[1].admitted.admission.cluster_queue == "gpu"
    (hint,) = out[1].admitted.hints
    assert (dict(hint.requests), dict(hint.annotations)) == ({}, {})


@pytest.mark.parametrize(
    ("default", "annotation", "routed"),
    [
        (Policy.STATIC, None, False),
        (Policy.FASTEST, None, True),
        (Policy.FASTEST, "static", False),  # the ClusterQueue's annotation wins
        (Policy.STATIC, "fastest", True),
    ],
)
def test_the_default_policy_applies_where_the_cluster_queue_names_none(
    default: Policy, annotation: str | None, routed: bool
) -> None:
    stream, state = Stream(), owning(routing_policy=default)
    gpu_and_cpu(stream, state, policy=annotation)
    busy_gpu(stream, state)

    out = stream.run(state, light())

    assert ("routed" in payloads(out)) is routed
    admitted = stream.of("admitted", LIGHT)
    assert [e.admitted.admission.cluster_queue for e in admitted] == (["cpu"] if routed else [])


def test_rebuild_puts_a_routed_workload_back_without_announcing_it_again() -> None:
    stream, live = Stream(), owning()
    gpu_and_cpu(stream, live, cpu="4")
    busy_gpu(stream, live)
    stream.run(live, submitted(job("native", queue="cpu", cpu="4", gpu=0, run_s=10)))
    out = stream.run(live, light())
    assert payloads(out) == ["routed", "pending"]  # routed to cpu, where native runs
    assert out[0].routed.to_cluster_queue == "cpu"

    rebuilt = stream.rebuild()
    assert caught_up(rebuilt, now_s=12.0) == []
    assert rebuilt.engine.records[LIGHT].cluster_queue == "cpu"

    finished = stream.run(rebuilt, reported("finished", "ns/native", at_s=12.0), now_s=12.0)
    assert payloads(finished) == ["admitted"]
    assert finished[-1].admitted.admission.cluster_queue == "cpu"
    assert len(stream.of("routed", LIGHT)) == 1


def test_rebuild_does_not_announce_again_that_a_workload_stays() -> None:
    stream, live = Stream(), owning()
    gpu_and_cpu(stream, live, cpu="4")
    busy_gpu(stream, live, jobs=2)
    stream.run(live, submitted(job("native", queue="cpu", cpu="4", gpu=0, run_s=1000)))
    out = stream.run(live, light())
    assert payloads(out) == ["routed", "pending"]
    assert out[0].routed.message.startswith("stays in ClusterQueue gpu")

    rebuilt = stream.rebuild()
    assert caught_up(rebuilt, now_s=12.0) == []
    assert rebuilt.engine.records[LIGHT].cluster_queue == "gpu"
    assert len(stream.of("routed", LIGHT)) == 1


def test_rebuild_announces_a_route_a_dead_replica_never_published() -> None:
    stream, live = Stream(), owning()
    gpu_and_cpu(stream, live)
    busy_gpu(stream, live)
    out = stream.run(
        live,
        light(),
        publish=False,  # died before publishing
    )
    assert payloads(out) == ["routed", "admitted"]

    rebuilt = stream.rebuild()
    assert caught_up(rebuilt, now_s=12.0) == ["routed", "admitted"]


# crc32 puts the cohort trees "cq/gpu" and "cq/cpu" in shard 0 of 2, "cq/l40" in shard 1.
SHARD_OF = {"gpu": 0, "cpu": 0, "l40": 1}


def sharded() -> tuple[Stream, list[AdmissionState]]:
    for name, shard in SHARD_OF.items():
        assert shard_of(f"cq/{name}", shards=2) == shard
    stream = Stream()
    states = [owning(shard=i, shards=2, source=f"admission/{i}") for i in (0, 1)]
    configure(
        stream,
        states,
        flavor(),
        cluster_queue("gpu", cpu="40", gpu="1", policy="fastest"),
        cluster_queue("l40", cpu="40", gpu="1"),
        cluster_queue("cpu", cpu="8"),
        *(local_queue(name, cq=name) for name in SHARD_OF),
    )
    for state in states:
        busy_gpu(stream, state)
    return stream, states


def test_a_shard_routes_only_among_its_own_trees_and_says_which_it_left_out() -> None:
    stream, states = sharded()
    env = light({"queueName": "l40"}, TO_CPU)

    out = [e for state in states for e in stream.run(state, env)]

    assert [(e.source, e.WhichOneof("payload")) for e in out if e.workload == LIGHT] == [
        ("admission/0", "routed"),
        ("admission/0", "admitted"),
    ]
    routed = out[0].routed
    assert routed.to_cluster_queue == "cpu"  # l40 would be sooner, but shard 1 decides it
    assert routed.message.endswith(
        "; not considered: LocalQueue l40 (cohort tree cq/l40 is decided by admission shard 1)"
    )


def test_a_shard_owning_no_alternative_says_the_workload_stays() -> None:
    stream, states = sharded()
    env = light({"queueName": "l40"})

    out = [e for state in states for e in stream.run(state, env)]

    assert [(e.source, e.WhichOneof("payload")) for e in out if e.workload == LIGHT] == [
        ("admission/0", "routed"),
        ("admission/0", "pending"),
    ]
    routed = out[0].routed
    assert (routed.from_cluster_queue, routed.to_cluster_queue, routed.queue_name) == (
        "gpu",
        "gpu",
        "gpu",
    )
    assert routed.message == (
        "stays in ClusterQueue gpu; not considered: LocalQueue l40 (cohort tree cq/l40 is "
        "decided by admission shard 1)"
    )


def refused() -> pb.Envelope:
    message = "Job/ns/light: the API server refused to change its pod template's resources"
    return reported("requests_refused", LIGHT, pb.RequestsRefused(message=message), at_s=11.0)


def routed_to_cpu_then_refused(stream: Stream, state: AdmissionState) -> list[pb.Envelope]:
    gpu_and_cpu(stream, state)
    busy_gpu(stream, state)
    assert payloads(stream.run(state, light())) == ["routed", "admitted"]
    return stream.run(state, refused(), now_s=11.0)


def test_refused_requests_evict_the_workload_back_to_its_declared_queue_for_good() -> None:
    stream, state = Stream(), owning()

    out = routed_to_cpu_then_refused(stream, state)

    assert payloads(out) == ["routed", "evicted"]
    back = out[0].routed
    assert (back.from_cluster_queue, back.to_cluster_queue, back.queue_name) == (
        "cpu",
        "gpu",
        "gpu",
    )
    assert back.reason == "RequestsRefused"
    assert "refused to change its pod template's resources" in back.message
    assert out[1].evicted.reason == "RequestsRefused"
    assert state.engine.holds_quota(LIGHT)  # the CPU quota, until the binder says it stopped

    requeued = stream.run(state, reported("eviction_completed", LIGHT, at_s=12.0), now_s=12.0)
    assert payloads(requeued) == ["requeued", "pending"]
    assert state.engine.records[LIGHT].cluster_queue == "gpu"
    # However long the GPU queue, it never goes to the CPU queue again.
    later = stream.run(state, reported("finished", "ns/g0", at_s=40.0), now_s=40.0)
    assert "routed" not in payloads(later)
    assert [e.routed.to_cluster_queue for e in stream.of("routed", LIGHT)] == ["cpu", "gpu"]


def test_a_rebuilt_replica_keeps_a_workload_whose_requests_were_refused_on_its_queue() -> None:
    stream, live = Stream(), owning()
    routed_to_cpu_then_refused(stream, live)
    stream.run(live, reported("eviction_completed", LIGHT, at_s=12.0), now_s=12.0)

    rebuilt = stream.rebuild()
    assert caught_up(rebuilt, now_s=13.0) == []
    assert rebuilt.engine.records[LIGHT].cluster_queue == "gpu"
    assert not rebuilt.engine.records[LIGHT].wl.alternatives
    later = stream.run(rebuilt, reported("finished", "ns/g0", at_s=40.0), now_s=40.0)
    assert "routed" not in payloads(later)


def test_refused_requests_of_a_workload_on_its_declared_queue_change_nothing() -> None:
    stream, state = Stream(), owning()
    gpu_and_cpu(stream, state)
    stream.run(state, light())  # stays on the GPU queue, admitted there

    assert stream.run(state, refused(), now_s=11.0) == []
