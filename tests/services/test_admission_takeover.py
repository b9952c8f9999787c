"""A lapsed holder's decisions never land; a slow start keeps its lease (task "lease2").

A holder can stall after the check of its lease and before its decision leaves the process
(nats-py's write buffer), for longer than the lease's TTL, while another replica takes the
shard over. Here the stall is exactly that: the decision's publish is held after its fence
was set, and the holder's renewals hang meanwhile (a frozen host), so that NATS expires its
lease and the standby takes over, decides, and the stalled publish is then let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest
from admission_world import (
    Running,
    basic_config,
    count,
    eventually,
    fact,
    msgspec_replace,
    publish,
    snapshot_written,
    submitted,
    workload,
)
from bus_helpers import EventLog
from prometheus_client import CollectorRegistry
from test_admission_lease_lost import owner_of, stepped_down

import muster.admission.rebuild
import muster.admission.snapshot
import muster.admission.state
import muster.bus.ordered
from muster.admission.lease import lease_key
from muster.admission.service import AdmissionConfig, run_admission
from muster.admission.state import AdmissionState
from muster.bus import Bus, BusConfig, Conflict, connect
from muster.bus.kv import Bucket
from muster.bus.publisher import Publisher
from muster.bus.service import Health
from muster.contracts.v1 import events_pb2 as pb
from muster.metrics.bus import BusMetrics

pytestmark = pytest.mark.timeout(60)

TTL_S = 1.0
CONFIG = AdmissionConfig(lease_ttl_s=TTL_S, lease_renew_s=TTL_S / 4, ack_wait_s=2.0)


class Metered(Running):
    """A replica serving metrics into `registry`."""

    def __init__(self, running: Running, registry: CollectorRegistry) -> None:
        super().__init__(running.task, running.health, running.bus)
        self.registry = registry

    def step_downs(self, cause: str) -> float:
        labels = {"shard": "0", "cause": cause}
        value = self.registry.get_sample_value("muster_admission_step_downs_total", labels)
        assert value is not None, f"no step-down series for cause {cause}"
        return value


async def start_metered(bus_config: BusConfig, config: AdmissionConfig = CONFIG) -> Metered:
    registry = CollectorRegistry()
    metrics = BusMetrics(registry, service="admission")
    bus = await connect(msgspec_replace(bus_config, name="muster-admission-test"), metrics=metrics)
    health = Health("admission")
    task = asyncio.create_task(run_admission(bus, health, config))
    return Metered(Running(task, health, bus), registry)


class Stall:
    """Holds the first `admitted` of `workload` on its way to NATS, fenced as it was sent,
    and freezes its sender's lease renewals from then until `thaw`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, workload: str) -> None:
        self.workload = workload
        self.started = asyncio.Event()
        self.resumed = asyncio.Event()
        self.thawed = asyncio.Event()
        self.holder = b""  # the replica whose decision is held
        self.owner = b""  # whose renewals hang (the holder's, once its decision is held)
        self.outcome: BaseException | int | None = None
        publish, update = Publisher.publish, Bucket.update

        async def held(this: Publisher, env: pb.Envelope, **fence: Any) -> int:
            if self.started.is_set() or not self._ours(env):
                return await publish(this, env, **fence)
            self.started.set()  # and from now on, its sender's renewals hang
            self.owner = env.source.encode() and self.holder
            await self.resumed.wait()  # the bytes are in the buffer: the fence is set
            try:
                self.outcome = await publish(this, env, **fence)
            except Exception as exc:
                self.outcome = exc
                raise
            return self.outcome

        async def renewal(this: Bucket, key: str, value: bytes, last: int) -> int:
            if key == lease_key(0) and value == self.owner and not self.thawed.is_set():
                await self.thawed.wait()
            return await update(this, key, value, last)

        monkeypatch.setattr(Publisher, "publish", held)
        monkeypatch.setattr(Bucket, "update", renewal)

    def _ours(self, env: pb.Envelope) -> bool:
        return env.WhichOneof("payload") == "admitted" and env.workload == self.workload

    def freeze(self, replica: Running) -> None:
        """`replica` is the one whose decision will be held: its renewals hang from then."""
        self.holder = owner_of(replica).encode()


@contextlib.asynccontextmanager
async def replicas(*running: Running) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for replica in running:
            await replica.stop()


async def test_a_decision_sent_after_the_lease_lapsed_is_refused_and_none_is_admitted_twice(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    stall = Stall(monkeypatch, "ns/slow")
    first = await start_metered(bus_config)
    await first.wait_serving()
    stall.freeze(first)
    standby = await start_metered(bus_config)  # waits for the lease
    async with replicas(first, standby):
        await basic_config(bus, cpu="2")
        await publish(bus, submitted(workload("slow", cpu="1")))
        await asyncio.wait_for(stall.started.wait(), 10)  # the holder's decision is in flight

        # Its renewals hang: the lease expires, the standby takes over and decides ns/slow.
        admitted = await events.wait_for("admitted", workload="ns/slow")
        assert admitted.cause.startswith("rebuild/admission/0/"), admitted.cause
        stall.resumed.set()  # the host wakes: the decision leaves, the renewal is answered
        stall.thawed.set()

        await eventually(stepped_down(caplog, first, standby))
        assert isinstance(stall.outcome, Conflict), stall.outcome  # JetStream refused it
        # The renewal (taken over) or the takeover record read in the rebuild the refusal
        # caused (superseded) tells the holder first: either way, once.
        assert first.step_downs("superseded") + first.step_downs("taken_over") == 1
        assert first.step_downs("expired") == first.step_downs("unreachable") == 0
        assert standby.step_downs("superseded") == standby.step_downs("taken_over") == 0
        await publish(bus, submitted(workload("next", cpu="1")))
        await events.wait_for("admitted", workload="ns/next")
        assert count(events, "admitted", "ns/slow") == 1
        assert count(events, "admitted", "ns/next") == 1
        takeovers = [
            e
            for e in events.matching("partition_changed")
            if e.partition_changed.WhichOneof("change") == "taken_over"
        ]
        assert {e.partition_changed.taken_over.owner for e in takeovers} == {
            owner_of(first),
            owner_of(standby),
        }


async def test_a_start_longer_than_the_ttl_keeps_its_lease_when_each_step_is_shorter(
    bus: Bus,
    bus_config: BusConfig,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Adopting a backlog of 20 workloads blocks the loop 4 s (a slow host), past the 2.5 s
    TTL; in steps of one (0.2 s each) the renewals run between them and the lease holds."""
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    await basic_config(bus, cpu="20")
    names = [f"w{i}" for i in range(20)]
    await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
    adopt = AdmissionState._adopt

    def slow(self: AdmissionState, entry: Any) -> Any:
        import time

        time.sleep(0.2)  # the point: nothing else on the loop runs meanwhile
        return adopt(self, entry)

    monkeypatch.setattr(AdmissionState, "_adopt", slow)
    monkeypatch.setattr(muster.admission.state, "ADOPT_STEP", 1)
    # A TTL a loaded test machine's other stalls stay well under; the renewal is due twice
    # per step, so one step would do (a renewal runs over two or three of the loop's turns).
    slow_host = msgspec.structs.replace(CONFIG, lease_ttl_s=2.5, lease_renew_s=0.25)
    replica = await start_metered(bus_config, slow_host)
    async with replicas(replica):
        await replica.wait_serving()  # raises what ended it, if anything did
        # Read from the stream, not a subscription: the test blocks its own loop too.
        wanted = sorted(f"ns/{name}" for name in names)
        await eventually(lambda: _admitted_once(bus, wanted))
        assert replica.step_downs("expired") == 0, caplog.text
        assert not [r for r in caplog.records if "stepping down" in r.getMessage()]


async def _admitted_once(bus: Bus, keys: list[str]) -> bool:
    """Whether the stream holds one `admitted` of each of `keys`, and none twice."""
    stored = [env.workload async for env in bus.replay(["muster.v1.*.workload.admitted.>"])]
    assert len(stored) == len(set(stored)), stored
    return sorted(stored) == keys


SLOW = msgspec.structs.replace(CONFIG, lease_ttl_s=2.5, lease_renew_s=0.25, snapshot_s=0.2)


def slow_replay(monkeypatch: pytest.MonkeyPatch) -> Callable[[], float]:
    """Each snapshot event replayed in 0.2 s, in steps of one; returns the time it took."""
    replay, replayed = muster.admission.rebuild.replay_event, []

    def slow(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.2)  # the point: nothing else on the loop runs meanwhile
        replayed.append(args)
        replay(*args, **kwargs)

    monkeypatch.setattr(muster.admission.rebuild, "replay_event", slow)
    monkeypatch.setattr(muster.admission.rebuild, "RESTORE_STEP", 1)
    return lambda: len(replayed) * 0.2


class SlowDecoder:
    """Decodes as `decoder` does, holding the interpreter 0.2 s per item (a loaded host's
    decode of a million pending held it 8.7 s)."""

    def __init__(self, decoder: msgspec.msgpack.Decoder[tuple[bytes, ...]]) -> None:
        self.decoder = decoder
        self.items = 0

    def decode(self, data: bytes) -> tuple[bytes, ...]:
        items = self.decoder.decode(data)
        time.sleep(0.2 * len(items))  # the point: nothing else on the loop runs meanwhile
        self.items += len(items)
        return items


def slow_decode(monkeypatch: pytest.MonkeyPatch) -> Callable[[], float]:
    """Each snapshot event decoded in 0.2 s (written a slice of one at a time); returns the
    time it took (task "decode1m")."""
    slow = SlowDecoder(muster.admission.snapshot._ITEMS["events"])
    monkeypatch.setitem(muster.admission.snapshot._ITEMS, "events", slow)
    return lambda: slow.items * 0.2


@pytest.mark.parametrize("slow", [slow_replay, slow_decode])
async def test_a_snapshot_restore_longer_than_the_ttl_keeps_its_lease_when_each_step_is_shorter(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    slow: Callable[[pytest.MonkeyPatch], Callable[[], float]],
) -> None:
    """A restarted replica restores a snapshot of 2 running and 18 pending workloads, replaying
    or decoding at 0.2 s per event (a slow host: a million pending take minutes), 5 s or more in
    all, past the 2.5 s TTL; in steps of one the renewals run between them: it keeps its lease,
    nothing is admitted twice, and the next pending workload is admitted once a running one
    finishes."""
    caplog.set_level(logging.INFO, logger="muster.admission.service")
    monkeypatch.setattr(muster.admission.snapshot, "_SLICE", 1)  # written a slice of one at a time
    first = await start_metered(bus_config, SLOW)
    async with replicas(first):
        await first.wait_serving()
        await basic_config(bus, cpu="2")
        names = [f"w{i:02}" for i in range(20)]
        await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
        last = await events.wait_for("pending", workload="ns/w19")
        await snapshot_written(bus, at_least=last.sequence)
    admitted = sorted(e.workload for e in events.matching("admitted"))
    assert admitted == ["ns/w00", "ns/w01"], admitted
    took_s = slow(monkeypatch)
    restarted = await start_metered(bus_config, SLOW)
    async with replicas(restarted):
        await restarted.wait_serving()
        assert "snapshot at sequence" in caplog.text  # restored from it
        assert took_s() > 2 * SLOW.lease_ttl_s, took_s()  # it took two TTLs or more
        await publish(bus, fact("finished", "ns/w00"))
        await eventually(lambda: _admitted_once(bus, ["ns/w00", "ns/w01", "ns/w02"]))
        assert restarted.step_downs("expired") == 0, caplog.text
        assert not [r for r in caplog.records if "stepping down" in r.getMessage()]


class DurablePause:
    """Holds `replica`'s next making of its durable after its takeover records (its lease
    checked), and freezes its renewals from then until `thaw`: a host that stalls there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.replica: Running | None = None
        self.started = asyncio.Event()
        self.resumed = asyncio.Event()
        self.made = asyncio.Event()  # its durable made, after the pause
        self.thawed = asyncio.Event()
        self.owner = b""
        make, update = muster.bus.ordered.make_consumer, Bucket.update

        async def held(bus: Bus, *args: Any, **kwargs: Any) -> None:
            if self.replica is None or bus is not self.replica.bus or self.started.is_set():
                return await make(bus, *args, **kwargs)
            self.owner = owner_of(self.replica).encode()  # its renewals hang from now
            self.started.set()
            await self.resumed.wait()
            await make(bus, *args, **kwargs)
            self.made.set()

        async def renewal(this: Bucket, key: str, value: bytes, last: int) -> int:
            if key == lease_key(0) and value == self.owner and not self.thawed.is_set():
                await self.thawed.wait()
            return await update(this, key, value, last)

        monkeypatch.setattr("muster.admission.service.make_consumer", held)
        monkeypatch.setattr(Bucket, "update", renewal)


async def test_a_holder_stalled_before_making_its_durable_leaves_its_successors_alone(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder rebuilds (an operator deleted its durable), writes its takeover records,
    then stalls past its TTL before making its durable anew; the standby takes over and
    serves; the holder wakes and makes its durable. The successor's durable is another (its
    term's): it is not deleted under it, it does not rebuild, it admits once what comes."""
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    pause = DurablePause(monkeypatch)
    first = await start_metered(bus_config)
    await first.wait_serving()
    standby = await start_metered(bus_config)  # waits for the lease
    async with replicas(first, standby):
        await basic_config(bus, cpu="2")
        await publish(bus, submitted(workload("a", cpu="1")))
        await events.wait_for("admitted", workload="ns/a")
        pause.replica = first
        (durable,) = [c.name async for c in _consumers(bus) if c.name.startswith("admission-0")]
        await bus.js.delete_consumer("MUSTER_EVENTS", durable)  # the holder rebuilds
        await asyncio.wait_for(pause.started.wait(), 10)  # and stalls before its durable

        await standby.wait_serving()  # the holder's lease expired: the standby took over
        theirs = {c.name async for c in _consumers(bus) if c.name.startswith("admission-0")}
        pause.resumed.set()  # the holder wakes: it makes its durable, then renews
        await pause.made.wait()
        pause.thawed.set()
        await eventually(stepped_down(caplog, first, standby))

        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")
        assert theirs <= {c.name async for c in _consumers(bus)}  # the successor's is there
        rebuilt = [r for r in caplog.records if r.getMessage().startswith("rebuilding")]
        assert len(rebuilt) == 1, [r.getMessage() for r in rebuilt]  # the holder's only
        assert standby.step_downs("superseded") == standby.step_downs("taken_over") == 0
        assert count(events, "admitted", "ns/a") == count(events, "admitted", "ns/b") == 1


async def _consumers(bus: Bus) -> AsyncIterator[Any]:
    for info in await bus.js.consumers_info("MUSTER_EVENTS"):
        yield info
