"""Admission fair sharing: the heap of LocalQueues picks what a scan of them all would.

`QueueRuntime.best_group` keeps a ClusterQueue's LocalQueues in a heap whose entries are only
lower bounds between rebuilds (core/queues.py says why that suffices). Here the same arrival
streams are played with it and with a plain scan (the least usage, then the best head), and
every engine call must return the same events.
"""

from __future__ import annotations

from unittest import mock

import msgspec
from engine_scenarios import NAMESPACE, Arrival, Scenario, cluster_queue, play, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.api.model import (
    AdmissionFairSharingConfig,
    AdmissionMode,
    ApiObject,
    KueueConfig,
    LocalQueue,
    ObjectMeta,
    ResourceFlavor,
)
from muster.core.queues import OrderKey, PendingGroup, QueueRuntime


def scan(self: QueueRuntime) -> PendingGroup | None:
    """Every LocalQueue's best group, compared by (usage now, head's order key)."""
    assert self.local_usage is not None
    best: tuple[float, OrderKey, PendingGroup] | None = None
    for name in sorted(self.by_local_queue):
        group = QueueRuntime._best_in(self.by_local_queue[name])
        head = group.head() if group is not None else None
        if group is None or head is None:
            continue
        candidate = (self.local_usage.usage(name), head.order_key, group)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    return best[2] if best is not None else None


@st.composite
def shared_queues(draw: st.DrawFn) -> Scenario:
    """One ClusterQueue with admissionScope shared by 2-5 LocalQueues, and a stream of work."""
    queues = [f"lq{i}" for i in range(draw(st.integers(2, 5)))]
    cq = msgspec.structs.replace(
        cluster_queue("shared", cpu=draw(st.integers(1, 3)) * 1000),
        admission_mode=AdmissionMode.USAGE_BASED,
    )
    objects: list[ApiObject] = [
        ResourceFlavor(meta=ObjectMeta(name="default")),
        cq,
        *(
            LocalQueue(
                meta=ObjectMeta(name=name, namespace=NAMESPACE),
                cluster_queue="shared",
                fair_sharing_weight=draw(st.sampled_from([1.0, 1.0, 2.0, 0.5, 0.0])),
            )
            for name in queues
        ),
    ]
    half_life = draw(st.sampled_from([0.0, 3.0, 10.0, 60.0, 3600.0]))
    config = KueueConfig(
        admission_fair_sharing=AdmissionFairSharingConfig(
            usage_half_life_s=half_life,
            usage_sampling_interval_s=draw(st.sampled_from([1.0, 300.0])),
            resource_weights=draw(st.sampled_from([(), (("cpu", 2.0),)])),
        )
    )
    arrivals = [
        Arrival(
            workload(
                f"w{i:02d}",
                cpu=draw(st.integers(1, 3)) * 500,
                queue=draw(st.sampled_from(queues)),
                priority=draw(st.sampled_from([0, 0, 1])),
            ),
            at_s=draw(st.integers(0, 60)),
            runs_s=draw(st.integers(1, 30)),
        )
        for i in range(draw(st.integers(6, 20)))
    ]
    return Scenario(
        objects=tuple(objects),
        config=config,
        arrivals=tuple(sorted(arrivals, key=lambda a: a.at_s)),
    )


@settings(max_examples=150, deadline=None)
@given(shared_queues())
def test_the_local_queue_heap_decides_as_a_scan(scn: Scenario) -> None:
    heap = play(scn)
    with mock.patch.object(QueueRuntime, "best_group", scan):
        scanned = play(scn)
    assert [(s.call, s.now_s, s.target, s.events) for s in heap.steps] == [
        (s.call, s.now_s, s.target, s.events) for s in scanned.steps
    ]
    # The order did use usage: some ClusterQueue ordered by it.
    assert heap.engine.state.queues["shared"].local_usage is not None
