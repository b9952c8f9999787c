"""A replica records its own decisions from what it built (`fact_reader.own_records`), not by
decoding what it has just encoded: the ledger must get exactly what a replay or a standby reads
from the bytes stored, for every kind of decision."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from admission_stream import (
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    stored_records,
    submitted,
    workload,
)
from snapshot_world import LiveReplica, StoredStream, rebuilt, summary
from test_admission_retry_requeue import CHECK

from muster.admission.facts import Recorded
from muster.bus import decode
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)


def queues() -> list[dict[str, object]]:
    """cq: 2 cpu, preempting lower priorities; checked: 4 cpu, requiring check prov."""
    checked = cluster_queue("checked")
    checked["spec"]["admissionChecks"] = ["prov"]
    return [
        flavor(),
        CHECK,
        cluster_queue(cpu="2", preempt=True),
        checked,
        local_queue(),
        local_queue("lq-checked", cq="checked"),
    ]


def prov(state: str, key: str, *, at_s: float) -> pb.Envelope:
    told = pb.AdmissionCheckUpdated(check="prov", state=state, message=f"prov says {state}")
    return reported("admission_check", key, told, at_s=at_s)


# Each step's events, stored at once, then consumed (the replica's echoes too).
STEPS: tuple[tuple[pb.Envelope, ...], ...] = (
    tuple(applied(m) for m in queues()),
    (submitted(workload("a"), at_s=1.0), submitted(workload("b"), at_s=1.5)),
    (submitted(workload("c", cpu="2", priority=10), at_s=2.25),),  # preempts a and b
    (reported("eviction_completed", "ns/a", at_s=3.0),),
    (reported("eviction_completed", "ns/b", at_s=3.5),),  # c admitted; a and b wait
    (submitted(workload("d", queue="lq-checked"), at_s=4.125),),  # reserved, check pending
    (prov("Ready", "ns/d", at_s=5.0),),  # admitted
    (submitted(workload("e", queue="lq-checked"), at_s=5.5),),
    (prov("Rejected", "ns/e", at_s=6.0),),  # deactivated: evicted InactiveWorkload
    (reported("finished", "ns/c", at_s=7.0),),  # a and b admitted
)


async def played() -> tuple[StoredStream, LiveReplica, list[Recorded]]:
    """The steps through a live replica; and what it recorded as its own, in order."""
    clock = [0.0]
    stream = StoredStream()
    replica = LiveReplica(stream, clock=clock)
    recorded: list[Recorded] = []
    record = replica.state.record_published

    def recording(published: Sequence[Recorded]) -> None:
        recorded.extend(published)
        record(published)

    replica.state.record_published = recording  # type: ignore[method-assign]
    for step in STEPS:
        clock[0] = max(clock[0], max(e.time_unix_nano for e in step) / 1e9)
        for env in step:
            stream.put(env)
        await replica.catch_up()
    return stream, replica, recorded


async def test_own_decisions_are_recorded_as_a_replay_reads_them_from_the_bytes() -> None:
    stream, replica, recorded = await played()
    own = [env for env in map(decode, stream.data) if env.source == replica.state.source]
    assert recorded == stored_records(own)
    kinds = {r.kind for r in recorded}
    assert kinds >= {"pending", "quota_reserved", "admitted", "evicted", "requeued"}
    reasons = {r.reason for r in recorded if r.kind == "evicted"}
    assert reasons >= {"InactiveWorkload", "Preempted"}
    assert any(r.kind == "admitted" and r.admission is not None for r in recorded)


async def test_the_live_ledger_is_the_one_a_replay_of_the_stream_builds() -> None:
    stream, replica, _ = await played()
    replayed, _ = rebuilt(stream)
    assert summary(replica.state) == summary(replayed)
    phases = {str(k): e.phase for k, e in replica.state.ledger.entries.items()}
    assert phases == {
        "ns/a": "Admitted",
        "ns/b": "Admitted",
        "ns/d": "Admitted",
        "ns/e": "Inactive",
    }
