"""A placement preemption of a victim too large for one event (docs/events.md, "Large
preemptions"): `placement_preempted` counts the pods it cannot list, and the victim's
`cmd.evict` goes in commands that each fit and together name every pod once.

The bus's limit is lowered here so that a victim of a few hundred pods is over it, as one of
20 000 pods is at the default 1 MiB.
"""

from __future__ import annotations

from cluster_docs import Doc, fed, gang, node

from muster.bus.envelope import encode
from muster.gangpermit.translate import decide

LIMIT = 8 * 1024
PODS = 300  # ~40 bytes a pod here: 12 KB of pods, over LIMIT


def cluster(victim_pods: int) -> list[Doc]:
    """Node `a` full with the pods of gang `low`; a gang `high` of higher priority that needs
    the whole node."""
    low = gang("low", pods=victim_pods)
    for doc in low[1:]:
        doc["spec"]["nodeName"] = "a"
    high = gang("high", pods=1, cpu=str(victim_pods))
    high[1]["spec"]["priority"] = 100
    return node("a", cpu=str(victim_pods)) + low + high


def test_a_victim_over_the_event_limit_is_evicted_in_commands_that_each_fit() -> None:
    docs = cluster(PODS)

    envs = decide(fed(docs, max_event_bytes=LIMIT), now_s=10.0)

    announced, *evicts = envs
    assert announced.type == "workload.placement_preempted"
    assert list(announced.placement_preempted.victims) == ["ns/low"]
    assert announced.placement_preempted.pod_count == PODS
    assert list(announced.placement_preempted.pods) == []  # too many to list
    assert len(evicts) > 1
    assert {e.type for e in evicts} == {"cmd.evict"}
    assert {e.workload for e in evicts} == {"ns/low"}
    assert all(len(encode(e)) <= LIMIT for e in envs)
    names = [p.name for e in evicts for p in e.evict_requested.pods]
    assert sorted(names) == sorted(f"low-{i}" for i in range(PODS))
    assert all(p.uid == f"uid-{p.name}" for e in evicts for p in e.evict_requested.pods)
    assert len({e.event_id for e in evicts}) == len(evicts)
    # Repeated after a crash (nothing reached the stream): the same ids, deduplicated.
    again = decide(fed(docs, max_event_bytes=LIMIT), now_s=12.0)
    assert [e.event_id for e in again] == [e.event_id for e in envs]


def test_a_victim_that_fits_is_one_command_listing_its_pods_as_before() -> None:
    docs = cluster(PODS)

    announced, evict = decide(fed(docs), now_s=10.0)  # the default limit, 1 MiB

    assert announced.placement_preempted.pod_count == PODS
    assert len(announced.placement_preempted.pods) == PODS
    assert len(evict.evict_requested.pods) == PODS
