"""Events.Watch's filter and reader: which envelopes a request wants, resuming by sequence."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from muster.bus import new_event
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.visibility import InvalidQueryError
from muster.gateway.watch import WatchFilter, watch


def submitted(workload: str, queue: str = "") -> events_pb2.Envelope:
    payload = events_pb2.WorkloadSubmitted(queue_name=queue)
    return new_event("submitted", payload, cluster="local", workload=workload, source="test")


def pending(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadPending(reason="WaitingForQuota")
    return new_event("pending", payload, cluster="local", workload=workload, source="test")


def config() -> events_pb2.Envelope:
    payload = events_pb2.ConfigApplied(kind="ClusterQueue", name="cq")
    return new_event("config_applied", payload, cluster="local", source="test")


class History:
    """An EventHistory over a list: sequence n is `stored[n - 1]`; subjects are ignored."""

    def __init__(self, envs: Sequence[events_pb2.Envelope]) -> None:
        self.stored = list(envs)
        self.reads: list[tuple[int, int | None]] = []

    async def replay(
        self,
        subjects: Sequence[str],
        *,
        stream: str,
        from_sequence: int = 1,
        until_sequence: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[events_pb2.Envelope]:
        self.reads.append((from_sequence, until_sequence))
        last = len(self.stored) if until_sequence is None else until_sequence
        for seq in range(max(1, from_sequence), last + 1):
            env = events_pb2.Envelope()
            env.CopyFrom(self.stored[seq - 1])
            env.sequence = seq
            yield env

    async def last_sequence(self, stream: str) -> int:
        return len(self.stored)


async def collect(history: History, **request: object) -> list[tuple[int, str, str]]:
    found = watch(history, services_pb2.WatchRequest(**request), follow=False)
    return [(e.sequence, e.type, e.workload) async for e in found]


STORED = [
    submitted("ml/a", "main"),  # 1
    submitted("ml/b", "other"),  # 2
    config(),  # 3
    pending("ml/a"),  # 4
    pending("ml/b"),  # 5
    submitted("web/c"),  # 6
    pending("web/c"),  # 7
]


async def test_without_filters_every_event_from_the_sequence_on() -> None:
    assert [seq for seq, _, _ in await collect(History(STORED), from_sequence=3)] == [3, 4, 5, 6, 7]


async def test_from_sequence_zero_starts_after_the_last_stored_event() -> None:
    assert await collect(History(STORED), from_sequence=0) == []


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param({"namespace": "web"}, [6, 7], id="namespace"),
        pytest.param({"workload": "ml/b"}, [2, 5], id="workload"),
        pytest.param({"types": ["workload.pending"]}, [4, 5, 7], id="types"),
        pytest.param({"local_queue": "main"}, [1, 4], id="local queue"),
        pytest.param({"local_queue": "default"}, [6, 7], id="default local queue"),
        pytest.param({"local_queue": "main", "namespace": "web"}, [], id="lq in namespace"),
        pytest.param(
            {"local_queue": "main", "types": ["workload.pending"]}, [4], id="lq and types"
        ),
    ],
)
async def test_filters(request_: dict[str, object], expected: list[int]) -> None:
    found = await collect(History(STORED), from_sequence=1, **request_)

    assert [seq for seq, _, _ in found] == expected


async def test_local_queue_filter_survives_a_resume_after_the_submitted_event() -> None:
    history = History(STORED)

    found = await collect(history, from_sequence=4, local_queue="other")

    assert found == [(5, "workload.pending", "ml/b")]
    assert history.reads[0] == (1, 3)  # the submitted events before the start


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        pytest.param({"workload": "no-namespace"}, "workload", id="workload"),
        pytest.param({"workload": "/no-namespace"}, "workload", id="empty namespace"),
        pytest.param({"types": ["workload.nope"]}, "types", id="unknown type"),
        pytest.param({"types": ["cmd.evict"]}, "types", id="a command"),
    ],
)
async def test_bad_requests_name_the_field(request_: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidQueryError, match=f"^{field}: "):
        await collect(History(STORED), **request_)


@pytest.mark.parametrize(
    ("request_", "subjects"),
    [
        pytest.param(
            {},
            ["muster.v1.*.workload.>", "muster.v1.*.queue.>", "muster.v1.*.config.>"],
            id="everything",
        ),
        pytest.param({"namespace": "ml"}, ["muster.v1.*.workload.>"], id="workloads only"),
        pytest.param(
            {"types": ["workload.admitted", "workload.pending"]},
            ["muster.v1.*.workload.admitted", "muster.v1.*.workload.pending"],
            id="types",
        ),
        pytest.param(
            {"types": ["workload.admitted"], "local_queue": "main"},
            ["muster.v1.*.workload.admitted", "muster.v1.*.workload.submitted"],
            id="types and local queue read submitted too",
        ),
    ],
)
def test_subjects_are_as_narrow_as_the_filter(
    request_: dict[str, object], subjects: list[str]
) -> None:
    wanted = WatchFilter.from_request(services_pb2.WatchRequest(**request_))

    assert wanted.subjects() == subjects


def test_a_deleted_workload_is_forgotten() -> None:
    wanted = WatchFilter.from_request(services_pb2.WatchRequest(local_queue="main"))
    wanted.observe(submitted("ml/a", "main"))
    deleted = new_event(
        "deleted", events_pb2.WorkloadDeleted(), cluster="local", workload="ml/a", source="t"
    )

    wanted.observe(deleted)

    assert wanted.queues == {}
