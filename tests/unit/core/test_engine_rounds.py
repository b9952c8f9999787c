"""A round walks the cohort trees with a queue listed since it last walked them, not every tree.

An admission replica holds the whole configuration but decides for its own trees only: a round
that walked every tree cost each replica the same whatever its share (issue 19). These pin the
walk to what changed, and that it still decides as the walk over every tree did.
"""

from __future__ import annotations

import pytest

from muster.api.model import (
    ApiObject,
    ClusterQueue,
    FairSharingConfig,
    FlavorQuotas,
    KueueConfig,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
    WorkloadKey,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.queues import TreeRuntime

QUEUES = 40


def _cq(name: str, *, cohort: str | None = None) -> ClusterQueue:
    quota = ResourceQuota(name="cpu", nominal_quota=2000)
    group = ResourceGroup(
        covered_resources=("cpu",), flavors=(FlavorQuotas(name="f", resources=(quota,)),)
    )
    return ClusterQueue(
        meta=ObjectMeta(name=name),
        namespace_selector=LabelSelector(),
        resource_groups=(group,),
        cohort=cohort,
    )


def _engine(*, fair: bool = False, cohort: str | None = None) -> Engine:
    objects: list[ApiObject] = [ResourceFlavor(meta=ObjectMeta(name="f"))]
    for q in range(QUEUES):
        objects += [
            _cq(f"cq-{q}", cohort=cohort),
            LocalQueue(meta=ObjectMeta(name=f"lq-{q}", namespace="ns"), cluster_queue=f"cq-{q}"),
        ]
    config = KueueConfig(fair_sharing=FairSharingConfig(enable=fair))
    return Engine(objects, config=config, hold_quota_until_stopped=True)


def _wl(name: str, queue: int, cpu: int = 1) -> Workload:
    return Workload(
        meta=ObjectMeta(name=name, namespace="ns", uid=name),
        queue_name=f"lq-{queue}",
        pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
    )


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the trees each `schedule()` walks, in order."""
    names: list[str] = []
    walk = Engine._schedule_tree

    def spy(self: Engine, tree: TreeRuntime) -> None:
        names.append(tree.name)
        walk(self, tree)

    monkeypatch.setattr(Engine, "_schedule_tree", spy)
    return names


def _admitted(events: list[Event]) -> set[str]:
    return {e.object for e in events if e.type is EventType.QUOTA_RESERVED}


def test_a_round_walks_only_the_trees_whose_queues_were_listed(walked: list[str]) -> None:
    engine = _engine()
    walked.clear()  # the rebuild's own walk, if any
    engine.submit(_wl("a", 7), now_s=1.0)
    engine.submit(_wl("b", 23), now_s=1.0)
    assert _admitted(engine.schedule(now_s=1.0)) == {"ns/a", "ns/b"}
    assert walked == ["cq/cq-23", "cq/cq-7"]  # name order, as the walk over all trees
    walked.clear()
    assert engine.schedule(now_s=2.0) == []
    assert walked == []  # nothing listed since: no tree to try


def test_a_tree_parked_full_is_walked_again_once_quota_frees(walked: list[str]) -> None:
    engine = _engine()
    engine.submit(_wl("big", 3, cpu=2), now_s=1.0)
    engine.submit(_wl("next", 3, cpu=2), now_s=1.0)
    assert _admitted(engine.schedule(now_s=1.0)) == {"ns/big"}
    walked.clear()
    assert _admitted(engine.schedule(now_s=2.0)) == set()
    assert walked == []  # "next" is parked: the tree waits for quota, not for a round
    engine.finish(WorkloadKey("ns/big"), now_s=3.0)
    engine.stopped(WorkloadKey("ns/big"), now_s=3.0)
    assert _admitted(engine.schedule(now_s=3.0)) == {"ns/next"}
    assert walked == ["cq/cq-3"]


def test_fair_sharing_tree_is_walked_when_its_tournament_lists_a_queue(walked: list[str]) -> None:
    """One cohort tree under fair sharing: its tournament, not the ready heap, lists queues."""
    engine = _engine(fair=True, cohort="all")
    for q in range(3):
        engine.submit(_wl(f"w-{q}", q, cpu=2), now_s=1.0)
    assert _admitted(engine.schedule(now_s=1.0)) == {"ns/w-0", "ns/w-1", "ns/w-2"}
    assert set(walked) == {"cohort/all"}
    walked.clear()
    assert engine.schedule(now_s=2.0) == []
    assert walked == []
    engine.submit(_wl("late", 5), now_s=3.0)
    assert _admitted(engine.schedule(now_s=3.0)) == {"ns/late"}
    assert walked == ["cohort/all"]
