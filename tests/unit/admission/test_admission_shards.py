"""Which replica owns which cohort tree, LocalQueue and ClusterQueue."""

from __future__ import annotations

import zlib

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue

from muster.admission.fact_reader import fact_of
from muster.admission.facts import ApplyConfig
from muster.admission.shards import (
    PartitionMap,
    Sharding,
    shard_of,
    tree_of_cluster_queue,
    tree_of_local_queue,
)
from muster.bus.partitions import partition_of
from muster.core.engine import Engine


def engine_with(*manifests: dict[str, object]) -> Engine:
    engine = Engine(hold_quota_until_stopped=True)
    for manifest in manifests:
        fact = fact_of(applied(manifest))
        assert isinstance(fact, ApplyConfig)
        engine.apply(fact.obj, now_s=0)
    return engine


def test_shard_of_is_the_partition_of_the_tree_modulo_shards() -> None:
    for tree in ("cohort/alpha", "cq/solo", "queue:ns/lq"):
        for shards in (1, 2, 3, 7):
            partition = zlib.crc32(tree.encode()) % 16
            assert partition_of(tree) == partition
            assert shard_of(tree, shards=shards) == partition % shards
    with pytest.raises(ValueError, match="shards"):
        shard_of("cohort/x", shards=0)


def test_a_record_moves_a_partition_and_only_it() -> None:
    partitions = PartitionMap(shards=2)
    assert partitions.owned(0) == frozenset(range(0, 16, 2))
    partitions.move(4, 1)
    assert partitions.shard_of(4) == 1
    assert partitions.owned(0) == frozenset(range(0, 16, 2)) - {4}
    assert partitions.owned(1) == frozenset(range(1, 16, 2)) | {4}


def sharding(engine: Engine, *, shard: int, shards: int) -> Sharding:
    return Sharding(engine, shard=shard, partitions=PartitionMap(shards=shards))


def test_trees_of_queues_follow_cohorts_and_fall_back_to_the_queue_name() -> None:
    engine = engine_with(
        flavor(),
        cluster_queue("a", cohort="team"),
        cluster_queue("solo"),
        local_queue("lq", cq="a"),
    )
    assert tree_of_local_queue(engine, "ns", "lq") == "cohort/team"
    assert tree_of_local_queue(engine, "ns", "missing") == "queue:ns/missing"
    assert tree_of_local_queue(engine, "ns", "") == "queue:ns/default"
    assert tree_of_cluster_queue(engine, "solo") == "cq/solo"
    assert tree_of_cluster_queue(engine, "gone") is None


def test_each_tree_has_exactly_one_owner() -> None:
    engine = engine_with(
        flavor(),
        cluster_queue("a", cohort="alpha"),
        cluster_queue("b", cohort="beta"),
        local_queue("la", cq="a"),
        local_queue("lb", cq="b"),
    )
    replicas = [sharding(engine, shard=i, shards=2) for i in range(2)]
    for lq in ("la", "lb", "nowhere"):
        assert sum(r.owns_local_queue("ns", lq) for r in replicas) == 1, lq
    for cq in ("a", "b"):
        assert sum(r.owns_cluster_queue(cq) for r in replicas) == 1, cq
    assert replicas[shard_of("cohort/alpha", shards=2)].owns_local_queue("ns", "la")
    assert not any(r.owns_cluster_queue("gone") for r in replicas)


def test_one_shard_owns_everything() -> None:
    only = sharding(engine_with(), shard=0, shards=1)
    assert only.owns_local_queue("ns", "anything")
    assert only.owns_cluster_queue("anything")


@pytest.mark.parametrize(("shard", "shards"), [(2, 2), (-1, 2), (0, 0)])
def test_shard_index_must_be_within_the_shards(shard: int, shards: int) -> None:
    with pytest.raises(ValueError, match="shard"):
        sharding(engine_with(), shard=shard, shards=shards)
