"""A replica with many queues and many waiting workloads: what it builds once, what it shares.

The configuration a rebuild replays is built into quota trees once, when the replica takes
ownership, not once per object (quadratic in the ClusterQueues); the workloads waiting in one
group share its shape, and the ledger keeps one copy of each pending message.
"""

from __future__ import annotations

from admission_stream import (
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    submitted,
    workload,
)

from muster.admission.fact_reader import fact_of
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb

QUEUES = 30


def config_stream() -> Stream:
    """A flavor and QUEUES ClusterQueues (1 cpu each, one cohort) with a LocalQueue each."""
    stream = Stream()
    stream.append(applied(flavor()))
    for q in range(QUEUES):
        stream.append(applied(cluster_queue(f"cq-{q}", cpu="1", cohort="all")))
        stream.append(applied(local_queue(f"lq-{q}", cq=f"cq-{q}")))
    return stream


def replayed(stream: Stream) -> AdmissionState:
    state = AdmissionState()
    for env in stream.log:
        state.replay(fact_of(env), sequence=env.sequence)
    return state


def test_a_rebuild_builds_the_replayed_configuration_once_when_it_takes_ownership() -> None:
    stream = config_stream()
    stream.append(submitted(workload("a", cpu="1", queue="lq-7")))
    state = replayed(stream)
    built = state.engine.state.config.epoch  # not `engine.config`: reading that settles it

    events = state.take_ownership(now_s=1.0)

    assert built == 1  # the empty engine's own build; none per replayed object
    assert state.engine.state.config.epoch == 2
    assert [(e.type.value, e.object) for e in events] == [
        ("QuotaReserved", "ns/a"),
        ("Admitted", "ns/a"),
    ]
    assert state.engine.tree_of_cluster_queue("cq-29") == "cohort/all"


def test_replayed_changes_and_deletions_are_built_with_the_rest() -> None:
    stream = config_stream()
    stream.append(applied(cluster_queue("cq-3", cpu="1"), at_ns=2))  # out of the cohort
    deleted = pb.ConfigDeleted(kind="ClusterQueue", name="cq-4")
    stream.append(new_event("config_deleted", deleted, cluster="local", source="test"))
    state = replayed(stream)

    state.take_ownership(now_s=1.0)

    assert state.engine.state.config.epoch == 2
    assert state.engine.tree_of_cluster_queue("cq-3") == "cq/cq-3"
    assert state.engine.tree_of_cluster_queue("cq-4") is None
    assert state.engine.tree_of_cluster_queue("cq-5") == "cohort/all"


def test_configuration_applied_while_owning_is_built_at_once() -> None:
    stream, state = config_stream(), AdmissionState()
    state.take_ownership(now_s=0.0)
    for env in stream.log[:3]:
        stream.run(state, env)

    assert state.engine.state.config.epoch == 1 + 3
    assert state.engine.tree_of_cluster_queue("cq-0") == "cohort/all"


def test_workloads_waiting_in_one_group_share_its_shape_and_the_ledger_their_message() -> None:
    stream, state = config_stream(), AdmissionState()
    state.take_ownership(now_s=0.0)
    for env in list(stream.log):
        stream.run(state, env)
    for n in range(QUEUES + 4):  # 1 cpu each: QUEUES run (borrowing), 4 wait in one group
        stream.run(state, submitted(workload(f"w{n}", cpu="1", queue="lq-0")))

    waiting = [WorkloadKey(f"ns/w{n}") for n in range(QUEUES, QUEUES + 4)]
    records = [state.engine.records[key] for key in waiting]
    entries = [state.ledger.entries[key] for key in waiting]
    assert state.engine.phase(WorkloadKey(f"ns/w{QUEUES - 1}")) == "Admitted"
    assert {state.engine.phase(key) for key in waiting} == {"Pending"}
    group = records[0].group
    assert group is not None
    assert all(r.group is group and r.shape is group.shape for r in records)
    assert entries[0].pending_message.startswith("couldn't assign flavors")
    assert all(e.pending_message is entries[0].pending_message for e in entries)
    # One map of conditions, one LocalQueue name, one empty map of check states for them all.
    assert records[0].conditions["QuotaReserved"].message == entries[0].pending_message
    assert all(r.conditions is records[0].conditions for r in records)
    assert all(r.local_queue is records[0].local_queue == "ns/lq-0" for r in records)
    assert all(e.check_states is entries[0].check_states == {} for e in entries)


def test_a_workloads_key_is_one_string_in_the_ledger_the_engine_and_adopted() -> None:
    stream = config_stream()
    for n in range(3):
        stream.append(submitted(workload(f"w{n}", cpu="1", queue="lq-0")))
    rebuilt, state = replayed(stream), AdmissionState()
    rebuilt.take_ownership(now_s=1.0)
    state.take_ownership(now_s=0.0)
    for env in list(stream.log):
        stream.run(state, env)

    for replica in (rebuilt, state):
        for key, entry in replica.ledger.entries.items():
            record = replica.engine.records[key]
            (adopted,) = (k for k in replica.adopted if k == key)
            assert entry.key is key is record.key is adopted
            assert next(k for k in replica.engine.records if k == key) is key


def test_workloads_asking_for_the_same_pods_share_one_copy_of_their_pod_sets_and_meta() -> None:
    stream, state = config_stream(), AdmissionState()
    state.take_ownership(now_s=0.0)
    for env in list(stream.log):
        stream.run(state, env)
    for n in range(6):  # two sizes, three of each, over two queues
        cpu = "1" if n % 2 else "2"
        stream.run(state, submitted(workload(f"w{n}", cpu=cpu, queue=f"lq-{n % 3}")))

    pod_sets = {
        n: state.ledger.entries[WorkloadKey(f"ns/w{n}")].workload.pod_sets for n in range(6)
    }
    assert pod_sets[1] is pod_sets[3] is pod_sets[5]
    assert pod_sets[0] is pod_sets[2] is pod_sets[4]
    assert pod_sets[0] != pod_sets[1]
    assert pod_sets[1][0].requests == {"cpu": 1000}
    assert all(
        state.engine.records[WorkloadKey(f"ns/w{n}")].wl.pod_sets is pod_sets[n] for n in range(6)
    )
    assert len(state.ledger.shared) == 2
    metas = [state.ledger.entries[WorkloadKey(f"ns/w{n}")].workload.meta for n in range(6)]
    assert all(m.labels is metas[0].labels and m.namespace is metas[0].namespace for m in metas)
    assert (metas[5].name, metas[5].namespace, metas[5].labels) == ("w5", "ns", {})
