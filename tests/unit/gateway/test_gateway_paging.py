"""Visibility answers from the bucket's entries: paging, filters, unknown queues."""

from __future__ import annotations

import pytest
from nats_subjects import subject_matches

from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.visibility import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    InvalidQueryError,
    UnknownQueueError,
    page,
    page_bounds,
    pending_workloads,
    queue_status,
)
from muster.gateway.workloads import positions


class DictStore:
    """A VisibilityStore over a dict, with NATS subject patterns ("*" one token, ">" the rest)."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.data = entries

    async def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    async def entries(self, pattern: str) -> dict[str, bytes]:
        return {k: v for k, v in self.data.items() if subject_matches(pattern, k)}


def pending(cq: str, *names: tuple[str, str, str]) -> bytes:
    items = []
    lq_positions: dict[tuple[str, str], int] = {}
    for position, (namespace, name, lq) in enumerate(names):
        in_lq = lq_positions.get((namespace, lq), 0)
        lq_positions[namespace, lq] = in_lq + 1
        items.append(
            services_pb2.PendingWorkload(
                namespace=namespace,
                name=name,
                local_queue=lq,
                cluster_queue=cq,
                position_in_cluster_queue=position,
                position_in_local_queue=in_lq,
            )
        )
    return services_pb2.PendingWorkloadsResponse(items=items, total=len(items)).SerializeToString()


def cq_status(name: str, *, pending_workloads: int = 0) -> bytes:
    status = events_pb2.ClusterQueueStatus(
        name=name, active=True, pending_workloads=pending_workloads
    )
    return status.SerializeToString()


def lq_status(namespace: str, name: str, cq: str) -> bytes:
    status = events_pb2.LocalQueueStatus(namespace=namespace, name=name, cluster_queue=cq)
    return status.SerializeToString()


@pytest.fixture
def store() -> DictStore:
    return DictStore(
        {
            "cq.team-b": cq_status("team-b"),
            "cq.team-a": cq_status("team-a", pending_workloads=3),
            "lq.ml.main": lq_status("ml", "main", "team-a"),
            "lq.ml.other": lq_status("ml", "other", "team-a"),
            "lq.web.main": lq_status("web", "main", "team-b"),
            "pending.team-a": pending(
                "team-a", ("ml", "w1", "main"), ("ml", "w2", "other"), ("ml", "w3", "main")
            ),
        }
    )


@pytest.mark.parametrize(
    ("offset", "limit", "expected"),
    [(0, 0, (0, DEFAULT_LIMIT)), (5, 10, (5, 10)), (0, MAX_LIMIT, (0, MAX_LIMIT))],
)
def test_page_bounds_default_and_accept(offset: int, limit: int, expected: tuple[int, int]) -> None:
    assert page_bounds(offset, limit) == expected


@pytest.mark.parametrize(
    ("offset", "limit", "field"), [(-1, 0, "offset"), (0, -1, "limit"), (0, MAX_LIMIT + 1, "limit")]
)
def test_page_bounds_name_the_field_out_of_range(offset: int, limit: int, field: str) -> None:
    with pytest.raises(InvalidQueryError, match=f"^{field}: "):
        page_bounds(offset, limit)


def test_page_slices_and_stops_at_the_end() -> None:
    items = list(range(5))

    assert page(items, offset=0, limit=2) == [0, 1]
    assert page(items, offset=4, limit=2) == [4]
    assert page(items, offset=9, limit=2) == []


async def test_queue_status_lists_every_queue_sorted(store: DictStore) -> None:
    reply = await queue_status(store)

    assert [cq.name for cq in reply.cluster_queues] == ["team-a", "team-b"]
    assert reply.cluster_queues[0].pending_workloads == 3
    assert [(lq.namespace, lq.name) for lq in reply.local_queues] == [
        ("ml", "main"),
        ("ml", "other"),
        ("web", "main"),
    ]


async def test_queue_status_of_one_cluster_queue_has_only_its_local_queues(
    store: DictStore,
) -> None:
    reply = await queue_status(store, cluster_queue="team-b")

    assert [cq.name for cq in reply.cluster_queues] == ["team-b"]
    assert [(lq.namespace, lq.name) for lq in reply.local_queues] == [("web", "main")]


async def test_queue_status_of_an_unknown_cluster_queue_names_it(store: DictStore) -> None:
    with pytest.raises(UnknownQueueError, match='ClusterQueue "nope" not found'):
        await queue_status(store, cluster_queue="nope")


async def test_pending_workloads_of_a_cluster_queue_in_order_paged(store: DictStore) -> None:
    request = services_pb2.PendingWorkloadsRequest(cluster_queue="team-a", offset=1, limit=1)

    reply = await pending_workloads(store, request)

    assert [(w.name, w.position_in_cluster_queue) for w in reply.items] == [("w2", 1)]
    assert reply.total == 3


async def test_pending_workloads_of_a_local_queue_only_its_own(store: DictStore) -> None:
    request = services_pb2.PendingWorkloadsRequest(namespace="ml", local_queue="main")

    reply = await pending_workloads(store, request)

    assert [(w.name, w.position_in_local_queue) for w in reply.items] == [("w1", 0), ("w3", 1)]
    assert reply.total == 2


def paged(store: DictStore) -> DictStore:
    """team-a's three pending workloads as admission writes them past a page: two per page."""
    whole = services_pb2.PendingWorkloadsResponse.FromString(store.data.pop("pending.team-a"))
    for start in (0, 2):
        page = services_pb2.PendingWorkloadsResponse(items=whole.items[start : start + 2])
        key = "pending.team-a" if start == 0 else f"pending-from.{start}.team-a"
        store.data[key] = page.SerializeToString()
    return store


@pytest.mark.parametrize(("offset", "limit"), [(0, 3), (1, 2), (2, 1), (2, 5), (3, 1)])
async def test_pending_workloads_read_across_pages(
    store: DictStore, offset: int, limit: int
) -> None:
    request = services_pb2.PendingWorkloadsRequest(
        cluster_queue="team-a", offset=offset, limit=limit
    )

    reply = await pending_workloads(paged(store), request)

    assert [w.name for w in reply.items] == ["w1", "w2", "w3"][offset : offset + limit]
    assert reply.total == 3


async def test_pending_workloads_of_a_local_queue_read_every_page(store: DictStore) -> None:
    request = services_pb2.PendingWorkloadsRequest(namespace="ml", local_queue="main")

    reply = await pending_workloads(paged(store), request)

    assert [(w.name, w.position_in_local_queue) for w in reply.items] == [("w1", 0), ("w3", 1)]


async def test_workload_positions_come_from_every_page(store: DictStore) -> None:
    found = await positions(paged(store))

    assert {k: p.position_in_cluster_queue for k, p in found.items()} == {
        "ml/w1": 0, "ml/w2": 1, "ml/w3": 2
    }  # fmt: skip


async def test_pending_workloads_of_a_cluster_queue_with_none_pending(store: DictStore) -> None:
    reply = await pending_workloads(
        store, services_pb2.PendingWorkloadsRequest(cluster_queue="team-b")
    )

    assert (list(reply.items), reply.total) == ([], 0)


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        pytest.param(
            services_pb2.PendingWorkloadsRequest(cluster_queue="nope"),
            UnknownQueueError,
            'ClusterQueue "nope" not found',
            id="unknown cq",
        ),
        pytest.param(
            services_pb2.PendingWorkloadsRequest(local_queue="nope"),
            UnknownQueueError,
            'LocalQueue "default/nope" not found',
            id="unknown lq",
        ),
        pytest.param(
            services_pb2.PendingWorkloadsRequest(),
            InvalidQueryError,
            "one of them is required",
            id="neither",
        ),
        pytest.param(
            services_pb2.PendingWorkloadsRequest(cluster_queue="a", local_queue="b"),
            InvalidQueryError,
            "not both",
            id="both",
        ),
    ],
)
async def test_pending_workloads_refuses_bad_requests(
    store: DictStore,
    request_: services_pb2.PendingWorkloadsRequest,
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        await pending_workloads(store, request_)
