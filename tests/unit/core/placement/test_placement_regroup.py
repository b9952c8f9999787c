"""A gang's pods arriving one by one are each looked at once, not the gang's every pod again at
each arrival (n², minutes for a gang of 100 000 pods); the pods still go with the gang, and on
their own once it is permitted. Counted in records read, not timed."""

from __future__ import annotations

from placement_cluster import gang, members, node, pod

from muster.core.placement.model import PodKey
from muster.core.placement.records import PodRecord
from muster.core.placement.state import PlacementState

PODS = 400


class CountingRecords(dict[PodKey, PodRecord]):
    """The state's pod records, counting each one read by key."""

    reads = 0

    def __getitem__(self, key: PodKey) -> PodRecord:
        self.reads += 1
        return super().__getitem__(key)


def test_each_pod_joining_a_gang_reads_a_bounded_number_of_records() -> None:
    state = PlacementState(default_timeout_s=300.0)
    state.upsert_node(node("a", cpu="1000", pods="1000"))
    state.upsert_gang(gang("train", PODS))
    records = state.pods = CountingRecords()

    for info in members("train", PODS):
        state.upsert_pod(info)

    assert records.reads <= 2 * PODS  # all its pods at each join: ~PODS² / 2
    assert state.dirty_singles == set()  # pending with the gang, not on their own
    assert state.dirty_gangs == {gang("train", PODS).key}


def test_a_pod_that_completes_a_placed_gang_sends_its_pending_pods_on_their_own() -> None:
    state = PlacementState(default_timeout_s=300.0)
    state.upsert_node(node("a", cpu="1000", pods="1000"))
    state.upsert_gang(gang("train", 2))
    late = members("train", 3)[2]
    state.upsert_pod(late)  # pending, with the gang
    assert state.dirty_singles == set()

    state.upsert_pod(pod("train-0", gang="train", node="a"))  # bound by someone
    assert state.dirty_singles == set()
    state.upsert_pod(pod("train-1", gang="train", node="a"))  # min_count bound: placed

    assert state.dirty_singles == {late.key}
