"""Admission snapshots: a restarted replica remembers workloads whose history the stream lost."""

from __future__ import annotations

import logging

import pytest
from admission_world import (
    basic_config,
    count,
    drained,
    eventually,
    fact,
    publish,
    snapshot_sequence,
    snapshot_written,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from nats.js import api

from muster.admission.snapshot import SEQUENCE_HEADER
from muster.api.model import KueueConfig, WaitForPodsReadyConfig
from muster.bus import EVENTS_STREAM, Bus, BusConfig
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)

SNAPSHOT_S = 0.2


async def purge_before(bus: Bus, seq: int) -> None:
    """Lose every event before `seq`, as retention (max_age, max_bytes) does."""
    await bus.js.purge_stream(EVENTS_STREAM, seq=seq)
    assert (await bus.js.stream_info(EVENTS_STREAM)).state.first_seq == seq


async def running_workload_then_history_lost(
    bus: Bus, bus_config: BusConfig, events: EventLog, *, snapshot_s: float
) -> None:
    """Quota for one workload; A admitted, C pending behind it (and a snapshot written, if
    on); the configuration applied again; every event before that purged; the replica killed."""
    first = await start_admission(bus_config, snapshot_s=snapshot_s)
    await first.wait_serving()
    await basic_config(bus, cpu="1")
    await publish(bus, submitted(workload("a", cpu="1")))
    await events.wait_for("admitted", workload="ns/a")
    await publish(bus, submitted(workload("c", cpu="1")))
    pending = await events.wait_for("pending", workload="ns/c")
    await drained(bus, "admission-0")
    if snapshot_s:
        await snapshot_written(bus, at_least=pending.sequence)
    # A configuration change a week later: what the stream still holds then.
    kept_from = await bus.last_sequence() + 1
    await basic_config(bus, cpu="1")
    await purge_before(bus, kept_from)
    await first.kill()


@pytest.mark.parametrize(
    "snapshot_s",
    [
        pytest.param(SNAPSHOT_S, id="snapshots"),
        pytest.param(0.0, id="no-snapshots-over-commits"),  # the control: the bug shows
    ],
)
async def test_a_running_workload_keeps_its_quota_after_its_events_left_the_stream(
    bus: Bus, bus_config: BusConfig, events: EventLog, snapshot_s: float
) -> None:
    await running_workload_then_history_lost(bus, bus_config, events, snapshot_s=snapshot_s)

    second = await start_admission(bus_config, snapshot_s=snapshot_s)
    try:
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        if not snapshot_s:
            # Without a snapshot A and C are forgotten: B gets the quota A still uses.
            await events.wait_for("admitted", workload="ns/b")
            assert await snapshot_sequence(bus) is None  # 0: none written
            return
        pending = await events.wait_for("pending", workload="ns/b")
        assert pending.pending.reason == "WaitingForQuota"
        assert "insufficient unused quota for cpu in flavor default" in pending.pending.message
        await drained(bus, "admission-0")
        assert count(events, "admitted", "ns/b") == 0

        await publish(bus, fact("finished", "ns/a"))
        await events.wait_for("admitted", workload="ns/c")  # it waited longer than B
        await drained(bus, "admission-0")
        assert count(events, "admitted", "ns/b") == 0
        await publish(bus, fact("finished", "ns/c"))
        await events.wait_for("admitted", workload="ns/b")
        await drained(bus, "admission-0")
        for key in ("ns/a", "ns/b", "ns/c"):
            assert count(events, "admitted", key) == 1, key  # none decided twice
    finally:
        await second.stop()


async def test_a_snapshot_brings_back_configuration_the_stream_lost_and_warns_of_the_gap(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    first = await start_admission(bus_config, snapshot_s=SNAPSHOT_S)
    await first.wait_serving()
    await basic_config(bus, cpu="1")
    await publish(bus, submitted(workload("a", cpu="1")))
    admitted = await events.wait_for("admitted", workload="ns/a")
    await drained(bus, "admission-0")
    await snapshot_written(bus, at_least=admitted.sequence)
    await first.kill()
    snapshot_at = await snapshot_sequence(bus)
    # Retention took everything, and with it a workload submitted after the snapshot.
    lost_at = await bus.publish(submitted(workload("lost", cpu="1")))
    await purge_before(bus, lost_at + 1)

    caplog.set_level(logging.INFO, logger="muster.admission")
    second = await start_admission(bus_config, snapshot_s=SNAPSHOT_S)
    try:
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        pending = await events.wait_for("pending", workload="ns/b")
        assert "insufficient unused quota" in pending.pending.message
        messages = [r.getMessage() for r in caplog.records]
        assert any("snapshot at sequence" in m and "loaded" in m for m in messages), messages
        assert snapshot_at is not None
        gap = f"events {snapshot_at + 1}..{lost_at} are no longer in {EVENTS_STREAM}"
        assert any(m.startswith(gap) for m in messages), messages
    finally:
        await second.stop()


async def test_an_unreadable_newer_snapshot_is_ignored_for_the_next_newest(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    await running_workload_then_history_lost(bus, bus_config, events, snapshot_s=SNAPSHOT_S)
    # Another shard's snapshot, newer than shard 0's but damaged.
    bucket = await bus.js.object_store(SNAPSHOTS_BUCKET)
    headers = (await bucket.get_info("admission-0")).headers
    assert headers is not None
    newest = str(await bus.last_sequence())
    meta = api.ObjectMeta(name="admission-1", headers={**headers, SEQUENCE_HEADER: [newest]})
    await bucket.put("admission-1", b"not a snapshot", meta=meta)

    caplog.set_level(logging.INFO, logger="muster.admission")
    second = await start_admission(bus_config, snapshot_s=SNAPSHOT_S)
    try:
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("pending", workload="ns/b")  # A still counts
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("snapshot admission-1 ignored") for m in messages), messages
    finally:
        await second.stop()


async def test_a_snapshot_that_fails_to_write_is_written_at_the_next_interval(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    # A bucket too small for any snapshot: every write fails until it is made larger.
    small = api.ObjectStoreConfig(max_bytes=64)
    await bus.js.create_object_store(SNAPSHOTS_BUCKET, config=small)
    caplog.set_level(logging.INFO, logger="muster.admission")
    first = await start_admission(bus_config, snapshot_s=SNAPSHOT_S)
    try:
        await first.wait_serving()
        await basic_config(bus, cpu="1")
        await publish(bus, submitted(workload("a", cpu="1")))
        admitted = await events.wait_for("admitted", workload="ns/a")
        await eventually(lambda: failed_writes(caplog, at_least=2))  # tried at every interval
        assert await snapshot_sequence(bus) is None

        stream = (await bus.js.stream_info(f"OBJ_{SNAPSHOTS_BUCKET}")).config
        await bus.js.update_stream(stream.evolve(max_bytes=-1))
        await snapshot_written(bus, at_least=admitted.sequence)
    finally:
        await first.stop()


async def failed_writes(caplog: pytest.LogCaptureFixture, *, at_least: int) -> bool:
    failed = [r for r in caplog.records if r.getMessage().startswith("snapshot not written")]
    assert all(r.levelno == logging.WARNING for r in failed)
    return len(failed) >= at_least


async def test_a_replica_that_stops_leaves_a_snapshot_of_everything_it_applied(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    running = await start_admission(bus_config, snapshot_s=3600.0)  # none on the interval here
    await running.wait_serving()
    await basic_config(bus, cpu="1")
    await publish(bus, submitted(workload("a", cpu="1")))
    admitted = await events.wait_for("admitted", workload="ns/a")
    await drained(bus, "admission-0")
    assert await snapshot_sequence(bus) is None

    await running.stop()  # cancelled, as SIGTERM does

    assert (await snapshot_sequence(bus) or 0) >= admitted.sequence


@pytest.mark.parametrize("told_by", ["running", "pods_ready"])  # today's, and before
async def test_pods_ready_left_out_of_a_snapshot_count_for_a_replica_started_waiting_for_them(
    bus: Bus, bus_config: BusConfig, events: EventLog, told_by: str
) -> None:
    """A replica with waitForPodsReady off (Kueue's default) reads no `pods_ready`, and its
    snapshot holds none. Restarted with it on and blockAdmission, the replica reads them from
    the stream: A, whose pods were ready before the snapshot, neither blocks B nor is evicted
    at the timeout (already past since A was admitted)."""
    first = await start_admission(bus_config, snapshot_s=SNAPSHOT_S)
    await first.wait_serving()
    await basic_config(bus, cpu="2")
    await publish(bus, submitted(workload("a", cpu="1")))
    await events.wait_for("admitted", workload="ns/a")
    told = pb.WorkloadRunning(pods_ready=True) if told_by == "running" else None
    ready = await bus.publish(fact(told_by, "ns/a", told))
    await drained(bus, "admission-0")
    await snapshot_written(bus, at_least=ready)
    await first.kill()

    wait = WaitForPodsReadyConfig(enable=True, timeout_seconds=0.001, block_admission=True)
    second = await start_admission(
        bus_config, snapshot_s=SNAPSHOT_S, kueue=KueueConfig(wait_for_pods_ready=wait)
    )
    try:
        await second.wait_serving()
        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")  # A's pods count as ready
        await drained(bus, "admission-0")
        assert count(events, "evicted", "ns/a") == 0
    finally:
        await second.stop()


async def test_a_restarted_replica_counts_the_recovery_timeout_from_the_loss(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    """Readiness lost before a restart: the rebuilt replica evicts at recoveryTimeout after
    the loss (here past already), not after the restart; one that regained it stays."""
    on = WaitForPodsReadyConfig(enable=True, timeout_seconds=3600, recovery_timeout_seconds=3600)
    first = await start_admission(
        bus_config, snapshot_s=SNAPSHOT_S, kueue=KueueConfig(wait_for_pods_ready=on)
    )
    await first.wait_serving()
    await basic_config(bus, cpu="2")
    await publish(bus, submitted(workload("gone", cpu="1")), submitted(workload("back", cpu="1")))
    await events.wait_for("admitted", workload="ns/gone")
    await events.wait_for("admitted", workload="ns/back")
    running = pb.WorkloadRunning(pods_ready=True)
    lost = pb.PodsReady(lost=True)
    await publish(bus, fact("running", "ns/gone", running), fact("running", "ns/back", running))
    await publish(bus, fact("pods_ready", "ns/back", lost), fact("pods_ready", "ns/back"))
    last = await bus.publish(fact("pods_ready", "ns/gone", lost))
    await drained(bus, "admission-0")
    await snapshot_written(bus, at_least=last)
    await first.kill()
    assert count(events, "evicted", "ns/gone") == 0

    short = WaitForPodsReadyConfig(
        enable=True, timeout_seconds=3600, recovery_timeout_seconds=0.001
    )
    second = await start_admission(
        bus_config, snapshot_s=SNAPSHOT_S, kueue=KueueConfig(wait_for_pods_ready=short)
    )
    try:
        await second.wait_serving()
        evicted = await events.wait_for("evicted", workload="ns/gone")
        assert evicted.evicted.reason == "PodsReadyTimeout"
        await drained(bus, "admission-0")
        assert count(events, "evicted", "ns/back") == 0
    finally:
        await second.stop()
