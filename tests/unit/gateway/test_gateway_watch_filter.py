"""Events.Watch's filter and reader: which envelopes a request wants, resuming by sequence,
which workloads a LocalQueue holds (routed ones too), and how much a watch remembers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TypedDict, Unpack

import pytest

from muster.bus import new_event
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.visibility import InvalidQueryError
from muster.gateway.watch import QueueMembers, WatchFilter, watch


def submitted(workload: str, queue: str = "") -> events_pb2.Envelope:
    payload = events_pb2.WorkloadSubmitted(queue_name=queue)
    return new_event("submitted", payload, cluster="local", workload=workload, source="test")


def pending(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadPending(reason="WaitingForQuota")
    return new_event("pending", payload, cluster="local", workload=workload, source="test")


def routed(workload: str, *, from_cq: str, to_cq: str, queue: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadRouted(
        from_cluster_queue=from_cq, to_cluster_queue=to_cq, queue_name=queue, policy="fastest"
    )
    return new_event("routed", payload, cluster="local", workload=workload, source="test")


def admitted(workload: str, cq: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadAdmitted(admission=events_pb2.Admission(cluster_queue=cq))
    return new_event("admitted", payload, cluster="local", workload=workload, source="test")


def finished(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadFinished(succeeded=True)
    return new_event("finished", payload, cluster="local", workload=workload, source="test")


def deleted(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadDeleted()
    return new_event("deleted", payload, cluster="local", workload=workload, source="test")


def config() -> events_pb2.Envelope:
    payload = events_pb2.ConfigApplied(kind="ClusterQueue", name="cq")
    return new_event("config_applied", payload, cluster="local", source="test")


class History:
    """An EventHistory over a list: sequence n is `stored[n - 1]`; subjects are ignored."""

    def __init__(self, envs: Sequence[events_pb2.Envelope]) -> None:
        self.stored = list(envs)
        self.reads: list[tuple[int, int | None]] = []
        self.follows: list[bool] = []

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
        self.follows.append(follow)
        last = len(self.stored) if until_sequence is None else until_sequence
        for seq in range(max(1, from_sequence), last + 1):
            env = events_pb2.Envelope()
            env.CopyFrom(self.stored[seq - 1])
            env.sequence = seq
            yield env

    async def last_sequence(self, stream: str) -> int:
        return len(self.stored)


class Request(TypedDict, total=False):
    """The WatchRequest fields a test sets."""

    namespace: str
    local_queue: str
    workload: str
    from_sequence: int
    types: list[str]


async def collect(history: History, **request: Unpack[Request]) -> list[tuple[int, str, str]]:
    found = watch(history, services_pb2.WatchRequest(history_only=True, **request))
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
async def test_filters(request_: Request, expected: list[int]) -> None:
    query: Request = {"from_sequence": 1, **request_}
    found = await collect(History(STORED), **query)

    assert [seq for seq, _, _ in found] == expected


async def test_local_queue_filter_survives_a_resume_after_the_submitted_event() -> None:
    history = History(STORED)

    found = await collect(history, from_sequence=4, local_queue="other")

    assert found == [(5, "workload.pending", "ml/b")]
    assert history.reads[0] == (1, 3)  # the membership events before the start


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        pytest.param({"workload": "no-namespace"}, "workload", id="workload"),
        pytest.param({"workload": "/no-namespace"}, "workload", id="empty namespace"),
        pytest.param({"types": ["workload.nope"]}, "types", id="unknown type"),
        pytest.param({"types": ["cmd.evict"]}, "types", id="a command"),
        # These matched nothing and the watch followed forever, saying nothing.
        pytest.param({"namespace": "Team A"}, "namespace", id="namespace not a label"),
        pytest.param({"local_queue": "../lq"}, "local_queue", id="queue a path"),
        pytest.param({"workload": "../x"}, "workload", id="workload a path"),
        pytest.param({"workload": "ml/" + "w" * 300}, "workload", id="workload too long"),
    ],
)
async def test_bad_requests_name_the_field(request_: Request, field: str) -> None:
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
            [
                "muster.v1.*.workload.admitted",
                "muster.v1.*.workload.admitted.*",
                "muster.v1.*.workload.pending",
                "muster.v1.*.workload.pending.*",
            ],
            id="types",
        ),
        pytest.param(
            {"types": ["workload.admitted"], "local_queue": "main"},
            [
                *(
                    f"muster.v1.*.workload.{e}{partition}"
                    for e in ("admitted", "deleted", "finished", "routed", "submitted")
                    for partition in ("", ".*")
                ),
                "muster.v1.*.workload.submitted.*.>",  # a gateway's, with its name
            ],
            id="types and local queue read the membership events too",
        ),
    ],
)
def test_subjects_are_as_narrow_as_the_filter(request_: Request, subjects: list[str]) -> None:
    wanted = WatchFilter.from_request(services_pb2.WatchRequest(**request_))

    assert wanted.subjects() == subjects


def test_a_deleted_workload_is_forgotten() -> None:
    wanted = WatchFilter.from_request(services_pb2.WatchRequest(local_queue="main"))
    wanted.observe(submitted("ml/a", "main"))

    assert wanted.wants(deleted("ml/a"))  # its last event still reaches the watch

    assert wanted.members is not None
    assert len(wanted.members) == 0


async def test_history_only_reads_up_to_the_last_event_stored_at_the_start() -> None:
    history = History(STORED)

    found = await collect(history, from_sequence=6)

    assert [seq for seq, _, _ in found] == [6, 7]
    assert (history.reads, history.follows) == ([(6, 7)], [False])


async def test_without_history_only_the_reader_follows() -> None:
    history = History(STORED)
    request = services_pb2.WatchRequest(from_sequence=6)

    found = [env.sequence async for env in watch(history, request)]

    assert found == [6, 7]  # the stand-in ends; the bus's reader would wait for more
    assert (history.reads, history.follows) == ([(6, None)], [True])


ROUTED_AND_RUN = [
    submitted("ml/light", "gpu"),  # 1
    submitted("ml/native", "cpu"),  # 2
    routed("ml/light", from_cq="gpu", to_cq="cpu", queue="cpu"),  # 3
    pending("ml/light"),  # 4
    admitted("ml/light", "cpu"),  # 5
    finished("ml/light"),  # 6
    deleted("ml/light"),  # 7
]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param({"local_queue": "cpu"}, [2, 3, 4, 5, 6, 7], id="queue routed to"),
        pytest.param({"local_queue": "gpu"}, [1, 3, 4, 5, 6, 7], id="declared queue"),
        pytest.param(
            {"local_queue": "cpu", "from_sequence": 4}, [4, 5, 6, 7], id="resumed after the route"
        ),
        pytest.param(
            {"local_queue": "cpu", "types": ["workload.admitted"]}, [5], id="with a type filter"
        ),
        pytest.param({"local_queue": "cpu", "namespace": "web"}, [], id="other namespace"),
    ],
)
async def test_a_routed_workload_matches_the_local_queue_it_was_routed_to(
    request_: Request, expected: list[int]
) -> None:
    query: Request = {"from_sequence": 1, **request_}
    found = await collect(History(ROUTED_AND_RUN), **query)

    assert [seq for seq, _, _ in found] == expected


ROUTED_THERE_AND_BACK = [
    submitted("ml/light", "gpu"),  # 1
    routed("ml/light", from_cq="gpu", to_cq="cpu", queue="cpu"),  # 2
    pending("ml/light"),  # 3
    routed("ml/light", from_cq="cpu", to_cq="gpu", queue="gpu"),  # 4: fastest moves it back
    pending("ml/light"),  # 5
    admitted("ml/light", "gpu"),  # 6
]


@pytest.mark.parametrize(
    ("local_queue", "expected"),
    [
        pytest.param("cpu", [2, 3, 4], id="routed in, then out: up to the route out"),
        pytest.param("gpu", [1, 2, 3, 4, 5, 6], id="declared: all along"),
    ],
)
async def test_a_workload_routed_away_leaves_the_queue_it_was_routed_to(
    local_queue: str, expected: list[int]
) -> None:
    history = History(ROUTED_THERE_AND_BACK)

    found = await collect(history, from_sequence=1, local_queue=local_queue)

    assert [seq for seq, _, _ in found] == expected


def test_a_local_queue_watch_remembers_only_the_workloads_of_its_queue() -> None:
    wanted = WatchFilter.from_request(services_pb2.WatchRequest(local_queue="cpu", namespace="ml"))
    for i in range(1000):
        wanted.observe(submitted(f"ml/other-{i}", "gpu"))
        wanted.observe(submitted(f"web/same-{i}", "cpu"))  # another namespace
    wanted.observe(submitted("ml/mine", "cpu"))

    assert wanted.members is not None
    assert (list(wanted.members.active), len(wanted.members)) == (["ml/mine"], 1)


def test_finished_members_are_kept_until_deleted_up_to_a_bound() -> None:
    members = QueueMembers("cpu", finished_kept=2)
    for name in ("a", "b", "c"):
        members.observe(submitted(f"ml/{name}", "cpu"))
        members.observe(finished(f"ml/{name}"))

    assert list(members.finished) == ["ml/b", "ml/c"]  # the oldest finished one went first
    assert ("ml/a" in members, "ml/c" in members) == (False, True)
    members.observe(deleted("ml/c"))
    assert list(members.finished) == ["ml/b"]
