"""The compacted replay log and its snapshots: what is kept, what leaves, how it is encoded, and
that a snapshot plus the stream after it rebuilds what the whole history rebuilds."""

from __future__ import annotations

import asyncio
import tracemalloc
import zlib
from typing import Any

import msgspec
import pytest
from admission_stream import (
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)
from hypothesis import example, given
from hypothesis import strategies as st
from snapshot_world import (
    LiveReplica,
    StoredStream,
    rebuilt,
    rebuilt_by_service,
    summary,
    taking_over,
)

from muster.admission.snapshot import ANY as ANY_TAG
from muster.admission.snapshot import CONFIG as CONFIG_TAG
from muster.admission.snapshot import (
    PARTITIONS_HEADER,
    SEQUENCE_HEADER,
    STREAM_HEADER,
    VERSION,
    VERSION_HEADER,
    Snapshot,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    sequence_in,
    snapshot_headers,
)
from muster.api.model import ApiObject, KueueConfig, WaitForPodsReadyConfig, WorkloadKey
from muster.bus import new_event
from muster.bus.partitions import parse_token
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import decode_manifest

pytestmark = pytest.mark.timeout(120)

CONFIG = (flavor(), cluster_queue(cpu="4", preempt=True), local_queue())


def config_deleted(kind: str, name: str) -> pb.Envelope:
    payload = pb.ConfigDeleted(kind=kind, name=name)
    return new_event("config_deleted", payload, cluster="local", source="test")


async def configured(*, cpu: str = "4") -> tuple[StoredStream, LiveReplica]:
    stream = StoredStream()
    replica = LiveReplica(stream, clock=[10.0])
    for manifest in (flavor(), cluster_queue(cpu=cpu, preempt=True), local_queue()):
        stream.put(applied(manifest))
    await replica.catch_up()
    return stream, replica


async def world(stream: StoredStream, replica: LiveReplica, *envs: pb.Envelope) -> None:
    """Store `envs` (what other services report) and let the replica consume everything."""
    for env in envs:
        stream.put(env)
    await replica.catch_up()


def kept(stream: StoredStream, replica: LiveReplica) -> list[tuple[str, str]]:
    return stream.types(replica.snapshot().sequences)


CONFIGURED = [
    ("config_applied", "default"),
    ("config_applied", "cq"),
    ("config_applied", "ns/lq"),
]


# --- what the log keeps -------------------------------------------------------------------------


async def test_keeps_a_live_workloads_events_and_its_own_decisions_echoes() -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, submitted(workload("a")), submitted(workload("b")))
    assert sorted(kept(stream, replica)) == sorted(
        [
            *CONFIGURED,
            ("submitted", "ns/a"),
            ("submitted", "ns/b"),
            ("admitted", "ns/a"),
            ("pending", "ns/b"),
        ]
    )
    assert replica.snapshot().sequence == stream.last


async def test_each_kept_event_is_tagged_with_the_partition_it_was_stored_in() -> None:
    """Tags are kept once per workload, but an event of its story stored in another partition
    (after its home moved: its ClusterQueue joined a cohort) keeps its own tag."""
    stream, replica = await configured(cpu="0")
    await world(stream, replica, submitted(workload("a")), submitted(workload("b")))
    await world(stream, replica, applied(cluster_queue(cpu="0", cohort="moved")))
    await world(stream, replica, reported("deleted", "ns/b"), submitted(workload("c")))
    snapshot = replica.snapshot()
    told = dict(zip(stream.types(snapshot.sequences), snapshot.tags, strict=True))
    assert told == {
        told_about: stored_tag(stream.envelope(seq))
        for told_about, seq in zip(
            stream.types(snapshot.sequences), snapshot.sequences, strict=True
        )
    }
    assert told[("submitted", "ns/a")] == ANY_TAG != told[("pending", "ns/a")]
    assert told[("pending", "ns/a")] != told[("pending", "ns/c")]  # the home moved between
    assert ("submitted", "ns/b") not in told


def stored_tag(env: pb.Envelope) -> int:
    """The partition an event was stored in, as a snapshot tags it."""
    if env.WhichOneof("payload") == "config_applied":
        return CONFIG_TAG
    partition = parse_token(env.partition)
    return ANY_TAG if partition is None else partition


@pytest.mark.parametrize("end", ["finished", "deleted"])
async def test_a_workload_that_finished_or_was_deleted_leaves_the_log(end: str) -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, submitted(workload("a")), submitted(workload("b")))
    await world(stream, replica, reported(end, "ns/a"))
    assert sorted(kept(stream, replica)) == sorted(
        [
            *CONFIGURED,
            ("submitted", "ns/b"),
            ("pending", "ns/b"),
            ("admitted", "ns/b"),
        ]
    )


async def test_a_manifest_is_kept_once_and_read_back_for_the_admitted_that_copies_it() -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, submitted(workload("a")), submitted(workload("b")))
    sent = next(
        env.submitted.manifest_json
        for env in map(stream.envelope, range(1, stream.last + 1))
        if env.WhichOneof("payload") == "submitted" and env.workload == "ns/b"
    )
    waiting = replica.state.ledger.entries[WorkloadKey("ns/b")]
    assert waiting.manifest_json == ""  # the log keeps it, in its `submitted`

    await world(stream, replica, reported("finished", "ns/a"))
    admitted = stream.envelope(stream.last)
    assert (admitted.WhichOneof("payload"), admitted.workload) == ("admitted", "ns/b")
    assert admitted.admitted.manifest_json == sent

    state, _ = rebuilt(stream, replica.snapshot())
    assert state.manifests_of(WorkloadKey("ns/b")).workload_json == sent


async def test_configuration_keeps_the_latest_applied_and_forgets_deleted_objects() -> None:
    stream, replica = await configured()
    await world(
        stream,
        replica,
        applied(cluster_queue(cpu="6")),
        applied(local_queue("other")),
        config_deleted("LocalQueue", "ns/other"),
    )
    snapshot = replica.snapshot()
    assert kept(stream, replica) == [
        ("config_applied", "default"),
        ("config_applied", "ns/lq"),
        ("config_applied", "cq"),
    ]
    cq = stream.envelope(snapshot.sequences[-1])
    assert '"nominalQuota": "6"' in cq.config_applied.manifest_json


async def test_a_finished_workload_is_remembered_so_a_copy_of_its_submission_is_refused() -> None:
    stream, replica = await configured()
    await world(stream, replica, submitted(workload("a")), reported("finished", "ns/a"))
    snapshot = replica.snapshot()
    assert snapshot.finished == ("ns/a",)
    assert "ns/a" not in {name for _, name in kept(stream, replica)}

    stream.put(submitted(workload("a")))  # the watcher published it again (another id)
    state, _ = rebuilt(stream, snapshot)
    assert "ns/a" not in state.ledger
    assert list(state.ledger.finished) == ["ns/a"]


# --- rebuilding from a snapshot -----------------------------------------------------------------


async def test_a_snapshot_keeps_a_workload_whose_history_the_stream_lost() -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, submitted(workload("a")))
    snapshot = replica.snapshot()
    stream.put(submitted(workload("b")))  # only this is left after the purge

    state, _ = rebuilt(stream, snapshot)
    assert state.ledger.get("ns/a") is not None  # type: ignore[arg-type]
    assert taking_over(state, now_s=20.0)["phases"] == {"ns/a": "Admitted", "ns/b": "Pending"}


def same(stored: Snapshot, taken: Snapshot) -> bool:
    """Whether `stored` is `taken` written and read: its workloads, bytes then, decode alike."""
    workloads = [stored.workload_of(i) == taken.workload_of(i) for i in range(len(taken.events))]
    no_workloads = {"workloads": ()}
    return all(workloads) and msgspec.structs.replace(
        stored, **no_workloads
    ) == msgspec.structs.replace(taken, **no_workloads)


def decoded_manifests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workloads whose manifest the translation decodes from now on."""
    decoded: list[str] = []
    real = decode_manifest

    def counting(manifest_json: str, *, what: str) -> ApiObject:
        decoded.append(what)
        return real(manifest_json, what=what)

    monkeypatch.setattr("muster.admission.fact_reader.decode_manifest", counting)
    return decoded


async def test_a_rebuild_takes_the_workloads_a_snapshot_kept_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, *(submitted(workload(n)) for n in "abc"))
    await world(stream, replica, reported("finished", "ns/a"))
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    kept = [w.key for i in range(len(snapshot.events)) if (w := snapshot.workload_of(i))]
    decoded = decoded_manifests(monkeypatch)

    with_workloads, _ = rebuilt(stream, snapshot)
    assert (sorted(kept), decoded) == (["ns/b", "ns/c"], [])

    as_before, _ = rebuilt(stream, msgspec.structs.replace(snapshot, workloads=()))
    assert decoded == ["submitted ns/b", "submitted ns/c"]  # as a snapshot written before
    assert summary(with_workloads) == summary(as_before)
    assert taking_over(with_workloads, now_s=20.0) == taking_over(as_before, now_s=20.0)


async def test_a_workload_this_model_cannot_read_is_left_to_its_manifest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream, replica = await configured(cpu="1")
    await world(stream, replica, submitted(workload("a")), submitted(workload("b")))
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    of_another_model = msgspec.msgpack.encode({"spec": "of another model"})
    workloads = list(snapshot.workloads)
    last = max(i for i, kept in enumerate(workloads) if kept)  # the last submitted: b's
    workloads[last] = of_another_model
    read = msgspec.structs.replace(snapshot, workloads=tuple(workloads))
    decoded = decoded_manifests(monkeypatch)

    state, _ = rebuilt(stream, read)

    assert decoded == ["submitted ns/b"]
    assert taking_over(state, now_s=20.0)["phases"] == {"ns/a": "Admitted", "ns/b": "Pending"}


Op = tuple[Any, ...]
NAMES = st.sampled_from([f"w{i}" for i in range(6)])
SUBMIT = st.tuples(st.just("submit"), NAMES, st.sampled_from(["1", "2", "3"]), st.integers(0, 2))
OPS = st.lists(
    st.one_of(
        SUBMIT,
        SUBMIT,  # twice as likely: workloads to admit, pend and preempt
        st.tuples(st.sampled_from(["finished", "deleted", "eviction_completed"]), NAMES),
        st.tuples(st.just("pods_ready"), NAMES),
        st.tuples(st.just("quota"), st.sampled_from(["2", "4", "6"])),
        st.tuples(st.just("local_queue"), st.booleans()),
        st.tuples(st.just("consume"), st.integers(1, 8)),
        st.tuples(st.just("snapshot")),
    ),
    min_size=10,
    max_size=60,
)


async def run_world(
    ops: list[Op], *, unread: tuple[str, ...] = ()
) -> tuple[StoredStream, list[Snapshot]]:
    """Store what `ops` report, in order, while a live replica (not reading `unread`) consumes
    and decides; return the stream and the snapshots taken along the way (and one at the end)."""
    clock = [10.0]
    stream = StoredStream()
    replica = LiveReplica(stream, clock=clock, unread=unread)
    for manifest in CONFIG:
        stream.put(applied(manifest))
    snapshots: list[Snapshot] = []
    for op in ops:
        clock[0] += 1.0
        match op:
            case ("submit", name, cpu, priority):
                stream.put(submitted(workload(name, cpu=cpu, priority=priority), at_s=clock[0]))
            case ("quota", cpu):
                stream.put(applied(cluster_queue(cpu=cpu, preempt=True)))
            case ("local_queue", True):
                stream.put(applied(local_queue()))
            case ("local_queue", False):
                stream.put(config_deleted("LocalQueue", "ns/lq"))
            case ("consume", most):
                await replica.consume(most)
            case ("snapshot",):
                snapshots.append(replica.snapshot())
            case (fact, name):
                stream.put(reported(fact, f"ns/{name}", at_s=clock[0]))
    await replica.catch_up()
    snapshots.append(replica.snapshot())
    return stream, snapshots


W0 = ("submit", "w0", "1", 0)
# The replica decides about w0 before it reads w0's deletion and the new w0 submitted after it:
# its decisions about the first w0 are stored after the second's `submitted`.
DECIDED_BEFORE_A_RESUBMISSION = [W0, W0, W0, ("deleted", "w0"), W0, W0, W0, W0, ("consume", 4), W0]


@given(OPS)
@example(DECIDED_BEFORE_A_RESUBMISSION)
def test_a_snapshot_and_the_stream_after_it_rebuild_what_the_whole_stream_does(
    ops: list[Op],
) -> None:
    stream, snapshots = asyncio.run(run_world(ops))
    reference, _ = rebuilt(stream)
    expected = summary(reference)
    decided = taking_over(reference, now_s=1000.0)
    for snapshot in snapshots:
        stored = decode_snapshot(encode_snapshot(snapshot))
        assert same(stored, snapshot)
        state, history = rebuilt(stream, stored)  # the stream up to the snapshot is gone
        assert summary(state) == expected
        # A replica rebuilt from a snapshot writes one that rebuilds the same again.
        again, _ = rebuilt(stream, history.snapshot(sequence=state.last_sequence))
        assert summary(again) == expected
        assert taking_over(state, now_s=1000.0) == decided


WAITING_FOR_PODS = KueueConfig(wait_for_pods_ready=WaitForPodsReadyConfig(enable=True))
# Ready, evicted by a preemptor and admitted again, all before the snapshot: the `pods_ready`
# read back from the stream counts for the first admission only.
READY_THEN_PREEMPTED = [
    ("submit", "w0", "3", 0),
    ("consume", 8),
    ("pods_ready", "w0"),
    ("submit", "w1", "2", 2),
    ("consume", 8),
    ("eviction_completed", "w0"),
    ("finished", "w1"),
    ("consume", 8),
    ("consume", 8),
    ("snapshot",),
]


@given(OPS)
@example([("submit", "w0", "1", 0), ("consume", 8), ("pods_ready", "w0"), ("snapshot",)])
@example(READY_THEN_PREEMPTED)
def test_a_snapshot_written_without_pods_ready_is_made_whole_from_the_stream(
    ops: list[Op],
) -> None:
    """A replica with waitForPodsReady off reads no `pods_ready`, and its snapshots say so; one
    that reads them, rebuilt from such a snapshot, reads them back from the stream where they
    were stored: it knows what a replica that read the whole stream knows."""
    stream, snapshots = asyncio.run(run_world(ops, unread=("pods_ready",)))
    reference, _ = rebuilt(stream)
    expected = summary(reference)
    for snapshot in snapshots:
        stored = decode_snapshot(encode_snapshot(snapshot))
        assert stored.unread == ("pods_ready",)
        state = asyncio.run(rebuilt_by_service(stream, stored, kueue=WAITING_FOR_PODS))
        assert summary(state) == expected


# --- encoding -----------------------------------------------------------------------------------


CREATED = "2025-01-02T03:04:05+00:00"  # the stream's creation time


def a_snapshot() -> Snapshot:
    return Snapshot(
        stream=CREATED, sequence=9, sequences=(2, 5), events=(b"two", b"five"), finished=("ns/x",)
    )


def with_slices(events: object) -> bytes:
    """a_snapshot() (its events 5 and 6 bytes encoded) as stored, its events' slices `events`."""
    data = msgspec.msgpack.decode(zlib.decompress(encode_snapshot(a_snapshot())))
    data["slices"]["events"] = events
    return zlib.compress(msgspec.msgpack.encode(data))


def test_a_snapshot_survives_encoding_and_announces_its_stream_and_sequence() -> None:
    snapshot = a_snapshot()
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot
    headers = snapshot_headers(snapshot)
    assert headers == {
        SEQUENCE_HEADER: ["9"],
        STREAM_HEADER: [CREATED],
        VERSION_HEADER: [str(VERSION)],
        PARTITIONS_HEADER: [",".join(map(str, range(16)))],
    }
    assert sequence_in(headers, stream=CREATED) == 9
    # MUSTER_EVENTS deleted and made again: its sequences started over.
    assert sequence_in(headers, stream="2025-02-01T00:00:00+00:00") is None


@pytest.mark.parametrize("slices", [[[1, 5], [1, 6]], [[2, 11]]])
def test_a_snapshot_is_read_in_the_slices_it_says(slices: list[list[int]]) -> None:
    assert decode_snapshot(with_slices(slices)) == a_snapshot()


@pytest.mark.parametrize("count", [0, 15, 16, 4097, 70_000])  # msgpack's three array headers
def test_a_snapshot_written_a_slice_at_a_time_reads_as_one_encoding(count: int) -> None:
    events = tuple(f"e{n}".encode() for n in range(count))
    snapshot = Snapshot(
        sequence=count, sequences=tuple(range(1, count + 1)), events=events, tags=(-2,) * count
    )

    data = msgspec.msgpack.decode(zlib.decompress(encode_snapshot(snapshot)))
    slices = data.pop("slices")

    assert data == msgspec.msgpack.decode(msgspec.msgpack.encode(snapshot))
    assert [items for items, _ in slices["events"]] == [
        min(4096, count - start) for start in range(0, count, 4096)
    ]
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot
    # As written before its slices were stored (one encoding): read in one step a field.
    assert decode_snapshot(zlib.compress(msgspec.msgpack.encode(snapshot))) == snapshot


def test_a_snapshot_is_encoded_without_its_whole_encoding_in_memory_at_once() -> None:
    count, size = 32_768, 1024  # 32 MiB of events, each a line of a log, compressing well
    events = tuple(f"{n:08d}".encode().ljust(size, b".") for n in range(count))
    snapshot = Snapshot(sequence=count, sequences=tuple(range(1, count + 1)), events=events)

    tracemalloc.start()
    try:
        data = encode_snapshot(snapshot)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < count * size // 2  # a slice at a time: whole, it was 40 MiB
    assert decode_snapshot(data).events == events


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"not zlib", id="not-compressed"),
        pytest.param(zlib.compress(b"\xc1garbage"), id="not-msgpack"),
        pytest.param(encode_snapshot(a_snapshot())[:-4], id="truncated"),
        pytest.param(encode_snapshot(a_snapshot()) + b"more", id="followed-by-more"),
        pytest.param(
            zlib.compress(msgspec.msgpack.encode({"version": VERSION, "sequence": "nine"})),
            id="wrong-types",
        ),
        pytest.param(
            encode_snapshot(Snapshot(sequence=9, sequences=(5, 2), events=(b"a", b"b"))),
            id="out-of-order",
        ),
        pytest.param(
            encode_snapshot(Snapshot(sequence=4, sequences=(5,), events=(b"a",))),
            id="event-past-its-sequence",
        ),
        pytest.param(
            encode_snapshot(Snapshot(sequence=9, sequences=(5,), events=(b"a", b"b"))),
            id="sequences-and-events-disagree",
        ),
        pytest.param(with_slices([[1, 5], [1, 7]]), id="slices-past-the-events"),
        pytest.param(with_slices([[1, 5]]), id="slices-short-of-the-events"),
        pytest.param(with_slices([[1, 5], [2, 6]]), id="slices-of-other-counts"),
        pytest.param(with_slices([[1, 4], [1, 7]]), id="slices-cutting-an-event"),
        pytest.param(with_slices([[1, 11]]), id="a-slice-of-more-than-it-says"),
        pytest.param(with_slices("two"), id="slices-not-a-list"),
    ],
)
def test_a_corrupt_snapshot_is_refused(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_snapshot(data)


def test_a_snapshot_of_another_version_is_refused_before_it_is_read() -> None:
    newer = {"version": VERSION + 1, "sequence": 9, "events": "a new layout"}
    with pytest.raises(SnapshotError, match=f"version {VERSION + 1}"):
        decode_snapshot(zlib.compress(msgspec.msgpack.encode(newer)))
    headers = {SEQUENCE_HEADER: ["9"], STREAM_HEADER: [CREATED], VERSION_HEADER: [str(VERSION + 1)]}
    assert sequence_in(headers, stream=CREATED) is None


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {SEQUENCE_HEADER: ["9"], STREAM_HEADER: [CREATED]},
        {SEQUENCE_HEADER: ["x"], STREAM_HEADER: [CREATED], VERSION_HEADER: ["1"]},
        {SEQUENCE_HEADER: ["9"], VERSION_HEADER: ["1"]},
    ],
)
def test_an_object_without_a_readable_sequence_is_not_a_candidate(
    headers: dict[str, list[str]] | None,
) -> None:
    assert sequence_in(headers, stream=CREATED) is None
