"""The sim cluster's object store: key escaping, optimistic writes, list, and resumable watch."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from muster.bus import Bus
from muster.bus.kv import open_bucket
from muster.cluster import ClusterError, ConflictError, InvalidObjectError
from muster.cluster.keys import (
    bucket_name,
    describe,
    escape,
    identity,
    kind_of,
    node_key,
    object_key,
    pod_key,
    unescape,
)
from muster.cluster.sim import SimStore, StoreChange

pytestmark = pytest.mark.timeout(30)

VALID_KEY_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.")


@pytest.fixture(params=["bus-publisher", "nats-py"])
async def store(bus: Bus, request: pytest.FixtureRequest) -> SimStore:
    """The store writing through the bus's publisher (as services do), or through nats-py."""
    if request.param == "bus-publisher":
        return await SimStore.open(bus.kv, cluster="local")
    return SimStore(await open_bucket(bus.js, bucket_name("local")))


async def take(changes: AsyncIterator[StoreChange], count: int) -> list[StoreChange]:
    """The next `count` changes (the test's timeout bounds the wait)."""
    return [await anext(changes) for _ in range(count)]


# --- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segment", "token"),
    [
        ("team-a", "team-a"),
        ("node-1.example.com", "node-1=2Eexample=2Ecom"),
        ("a_b", "a=5Fb"),
        ("x=y", "x=3Dy"),
        ("*>", "=2A=3E"),
        ("é", "=C3=A9"),
        ("", "_"),
    ],
)
def test_escapes_every_character_outside_letters_digits_and_dash(segment: str, token: str) -> None:
    assert escape(segment) == token
    assert unescape(token) == segment


@pytest.mark.parametrize("name", ["_", "=5F", "a.b", "a=2Eb", "a/b", "a b", "ä.ö"])
def test_keys_are_valid_kv_keys_and_one_to_one(name: str) -> None:
    keys = {node_key(name), pod_key("ns", name), object_key("Job", "ns", name)}
    for key in keys:
        assert set(key) <= VALID_KEY_CHARS
    assert describe(pod_key("ns", name)) == f"Pod/ns/{name}"
    assert escape(name) != escape(name + "_")


def test_cluster_scoped_kinds_have_no_namespace_and_namespaced_ones_default() -> None:
    assert identity({"kind": "ClusterQueue", "metadata": {"name": "q", "namespace": "x"}}) == (
        "ClusterQueue",
        "",
        "q",
    )
    assert identity({"kind": "Job", "metadata": {"name": "j"}}) == ("Job", "default", "j")
    assert object_key("ClusterQueue", "", "q") == "obj.ClusterQueue._.q"
    assert object_key("Node", "", "n.1") == "node.n=2E1"
    assert kind_of("obj.LocalQueue.ml.main") == "LocalQueue"
    assert kind_of(pod_key("ml", "p")) == "Pod"


def test_workload_api_workloads_are_kept_apart_from_kueue_workloads() -> None:
    meta = {"name": "train", "namespace": "ml"}
    gang = identity(
        {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": meta}
    )
    kueue = identity({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta})

    assert gang == ("Workload.scheduling.k8s.io", "ml", "train")
    assert kueue == ("Workload", "ml", "train")
    assert object_key(*gang) != object_key(*kueue)
    assert kind_of(object_key(*gang)) == "Workload.scheduling.k8s.io"
    assert describe(object_key(*gang)) == "Workload.scheduling.k8s.io/ml/train"


def test_refuses_a_manifest_without_kind_or_name() -> None:
    with pytest.raises(InvalidObjectError, match="kind: is required"):
        identity({"metadata": {"name": "x"}})
    with pytest.raises(InvalidObjectError, match=r"metadata\.name: is required"):
        identity({"kind": "Node", "metadata": {}})


def test_bucket_is_named_after_the_cluster() -> None:
    assert bucket_name("local") == "MUSTER_SIM_local"
    with pytest.raises(ValueError, match="cluster id"):
        bucket_name("a.b")


# --- writes and reads ------------------------------------------------------------------------


async def test_create_update_and_delete_are_optimistic(store: SimStore) -> None:
    key = pod_key("ml", "p-0")
    first = await store.create(key, {"kind": "Pod", "n": 1})
    with pytest.raises(ConflictError):
        await store.create(key, {"kind": "Pod", "n": 2})
    second = await store.update(key, {"kind": "Pod", "n": 2}, revision=first)
    with pytest.raises(ConflictError):
        await store.update(key, {"kind": "Pod", "n": 3}, revision=first)
    stale = await store.get(key)
    assert stale is not None
    assert (stale.obj, stale.revision) == ({"kind": "Pod", "n": 2}, second)
    await store.update(key, {"kind": "Pod", "n": 3}, revision=second)
    with pytest.raises(ConflictError):
        await store.delete(stale)

    current = await store.get(key)
    assert current is not None
    await store.delete(current)

    assert await store.get(key) is None
    await store.create(key, {"kind": "Pod", "n": 4})  # a deleted key can be created again


async def test_lists_live_objects_under_a_prefix(store: SimStore) -> None:
    assert await store.list() == []
    await store.create(node_key("n1"), {"kind": "Node"})
    await store.create(pod_key("ml", "b"), {"kind": "Pod"})
    await store.create(pod_key("ml", "a"), {"kind": "Pod"})
    await store.create(pod_key("other", "c"), {"kind": "Pod"})
    gone = await store.get(pod_key("ml", "b"))
    assert gone is not None
    await store.delete(gone)

    assert [s.key for s in await store.list("pod.ml.")] == ["pod.ml.a"]
    assert [s.key for s in await store.list()] == ["node.n1", "pod.ml.a", "pod.other.c"]
    assert await store.last_revision() == 5


# --- watch -----------------------------------------------------------------------------------


async def test_watch_lists_then_follows_changes(store: SimStore) -> None:
    await store.create(node_key("a"), {"kind": "Node", "v": 1})
    await store.create(node_key("b"), {"kind": "Node", "v": 1})
    async with contextlib.aclosing(store.watch()) as changes:
        initial = await take(changes, 2)
        assert [(c.type, c.key) for c in initial] == [("ADDED", "node.a"), ("ADDED", "node.b")]

        await store.create(node_key("c"), {"kind": "Node", "v": 1})
        await store.update(node_key("a"), {"kind": "Node", "v": 2}, revision=initial[0].revision)
        b = await store.get(node_key("b"))
        assert b is not None
        await store.delete(b)
        later = await take(changes, 3)

    assert [(c.type, c.key, c.obj["v"]) for c in later] == [
        ("ADDED", "node.c", 1),
        ("MODIFIED", "node.a", 2),
        ("DELETED", "node.b", 1),  # the object's last state
    ]
    revisions = [c.revision for c in initial + later]
    assert revisions == sorted(set(revisions))


async def test_watch_leaves_out_what_was_deleted_before_it_started(store: SimStore) -> None:
    gone = await store.create(pod_key("ml", "gone"), {"kind": "Pod"})
    stored = await store.get(pod_key("ml", "gone"))
    assert stored is not None
    assert stored.revision == gone
    await store.delete(stored)
    await store.create(pod_key("ml", "here"), {"kind": "Pod"})
    async with contextlib.aclosing(store.watch("pod.")) as changes:
        (first,) = await take(changes, 1)
    assert (first.type, first.key) == ("ADDED", "pod.ml.here")


async def test_watch_of_several_prefixes_yields_their_changes_in_revision_order(
    store: SimStore,
) -> None:
    await store.create(pod_key("ml", "p"), {"kind": "Pod", "v": 1})
    await store.create(object_key("ConfigMap", "ml", "c"), {"kind": "ConfigMap"})  # not watched
    await store.create(node_key("a"), {"kind": "Node"})
    async with contextlib.aclosing(store.watch("pod.", "node.")) as changes:
        initial = await take(changes, 2)
        pod = await store.get(pod_key("ml", "p"))
        assert pod is not None
        await store.update(pod_key("ml", "p"), {"kind": "Pod", "v": 2}, revision=pod.revision)
        await store.create(object_key("ConfigMap", "ml", "d"), {"kind": "ConfigMap"})
        await store.create(node_key("b"), {"kind": "Node"})
        later = await take(changes, 2)

    assert [(c.type, c.key) for c in initial + later] == [
        ("ADDED", "pod.ml.p"),
        ("ADDED", "node.a"),
        ("MODIFIED", "pod.ml.p"),
        ("ADDED", "node.b"),
    ]
    revisions = [c.revision for c in initial + later]
    assert revisions == sorted(set(revisions))


async def test_resumed_watch_yields_only_changes_after_the_revision(store: SimStore) -> None:
    await store.create(node_key("a"), {"kind": "Node"})
    async with contextlib.aclosing(store.watch()) as changes:
        (seen,) = await take(changes, 1)
    b = await store.create(node_key("b"), {"kind": "Node"})
    a = await store.get(node_key("a"))
    assert a is not None
    await store.delete(a)
    await store.create(node_key("sentinel"), {"kind": "Node"})

    async with contextlib.aclosing(store.watch(from_revision=seen.revision)) as changes:
        resumed = await take(changes, 3)

    assert [(c.type, c.key) for c in resumed] == [
        ("ADDED", "node.b"),
        ("DELETED", "node.a"),
        ("ADDED", "node.sentinel"),
    ]
    assert resumed[0].revision == b
    assert all(c.revision > seen.revision for c in resumed)


async def test_resumed_watch_keeps_following(store: SimStore) -> None:
    first = await store.create(node_key("a"), {"kind": "Node"})
    async with contextlib.aclosing(store.watch(from_revision=first)) as changes:
        pending = asyncio.ensure_future(anext(changes))
        await store.create(node_key("b"), {"kind": "Node"})
        change = await pending
    assert (change.type, change.key) == ("ADDED", "node.b")


@pytest.mark.timeout(60)
async def test_watch_carries_on_after_nats_restarts(
    store: SimStore, restart_nats: Callable[[], None]
) -> None:
    await store.create(node_key("a"), {"kind": "Node"})
    async with contextlib.aclosing(store.watch()) as changes:
        (first,) = await take(changes, 1)
        await asyncio.to_thread(restart_nats)
        written = await until_written(store, node_key("b"))
        (second,) = await take(changes, 1)
    assert (second.key, second.revision) == ("node.b", written)
    assert first.revision < second.revision


async def until_written(store: SimStore, key: str) -> int:
    """Create `key` as soon as the reconnected client can; its revision."""
    while True:
        try:
            return await store.create(key, {"kind": "Node"})
        except ClusterError as err:
            if not err.temporary:
                raise
            await asyncio.sleep(0.1)  # the client is reconnecting: nothing to wait on but time


async def test_list_never_misses_a_key_rewritten_during_the_read(store: SimStore) -> None:
    keys = [pod_key("ml", f"p{i}") for i in range(4)]
    for key in keys:
        await store.create(key, {"kind": "Pod", "n": 0})
    stop = asyncio.Event()

    async def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            for key in keys:
                current = await store.get(key)
                assert current is not None
                await store.update(key, {"kind": "Pod", "n": n}, revision=current.revision)

    writer = asyncio.create_task(rewrite())
    try:
        for _ in range(100):
            assert [s.key for s in await store.list("pod.ml.")] == sorted(keys)
    finally:
        stop.set()
        await writer
