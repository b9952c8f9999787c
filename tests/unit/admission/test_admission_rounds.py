"""Rounds: a fetched batch is applied in order and decided once; decisions are published with
retries before the batch is acked; due engine timers run rounds of their own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from admission_stream import (
    SideBySide,
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)

from muster.admission.facts import Fact
from muster.admission.handlers import Reown, Rounds, sent_together
from muster.admission.state import AdmissionState
from muster.bus import BusError, Conflict, Reject, Retry, new_event
from muster.bus.publisher import Fence
from muster.bus.pulse import Pulses
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event

pytestmark = pytest.mark.timeout(10)


class Publisher(SideBySide):
    def __init__(self, *, fail_first: int = 0) -> None:
        self.stored: list[pb.Envelope] = []
        self.dead: list[tuple[str, str, str, str]] = []
        self.attempts: list[str] = []
        self.fail_first = fail_first

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        self.attempts.append(env.event_id)
        if len(self.attempts) <= self.fail_first:
            raise Retry(0.0, "no PubAck")
        self.stored.append(env)
        return len(self.stored)

    def of(self, event_type: str) -> list[str]:
        return [e.workload for e in self.stored if e.type == event_type]

    async def dead_letter_unstored(self, env: pb.Envelope, *, consumer: str, reason: str) -> int:
        self.dead.append((consumer, env.type, env.workload, reason))
        return len(self.dead)


class Refusing(Publisher):
    """JetStream refusing every `refused` decision for good (as it refuses one over its size)."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    async def publish(self, env: pb.Envelope, **kw: object) -> int:
        if env.type == self.refused:
            raise Reject(f"{env.type} for {env.workload} is 9 MiB, over the limit")
        return await super().publish(env)


def configured_state(*extra: pb.Envelope) -> AdmissionState:
    stream, state = Stream(), AdmissionState()
    state.take_ownership(now_s=0)
    for env in extra:
        stream.run(state, env)
    for manifest in (flavor(), cluster_queue(cpu="10"), local_queue()):
        stream.run(state, applied(manifest))
    return state


def sequenced(env: pb.Envelope, seq: int) -> pb.Envelope:
    env.sequence = seq
    return env


async def test_a_batch_is_applied_in_stream_order_and_decided_in_one_round() -> None:
    publisher = Publisher()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    batch = [sequenced(submitted(workload(f"w{i}")), 10 + i) for i in range(5)]
    assert await rounds.apply_batch(batch) == [None] * 5
    assert rounds.rounds == 1
    assert publisher.of("workload.admitted") == [f"ns/w{i}" for i in range(5)]
    assert {e.cause for e in publisher.stored} == {batch[-1].event_id}
    assert rounds.state.last_sequence == 14


async def test_a_local_queue_created_in_the_same_batch_comes_first() -> None:
    publisher = Publisher()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    batch = [
        sequenced(applied(local_queue("new")), 10),
        sequenced(submitted(workload("w", queue="new")), 11),
    ]
    await rounds.apply_batch(batch)
    assert publisher.of("workload.pending") == []
    assert publisher.of("workload.admitted") == ["ns/w"]


async def test_a_failed_publish_is_retried_with_the_same_ids() -> None:
    publisher = Publisher(fail_first=2)
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0, retry_s=0.0)
    await rounds.apply_batch([sequenced(submitted(workload("a")), 10)])
    # Admitted with its reservation (events.md): one decision, sent again as it was.
    (admitted,) = (e.event_id for e in publisher.stored)
    assert publisher.attempts == [admitted, admitted, admitted]


async def test_replayed_events_are_skipped_and_unreadable_ones_rejected() -> None:
    publisher = Publisher()
    state = configured_state()
    state.last_sequence = 50  # the rebuild replayed up to 50
    rounds = Rounds(state, publisher, clock=lambda: 100.0)
    bad = sequenced(submitted(workload("bad")), 52)
    bad.submitted.manifest_json = "{"
    outcomes = await rounds.apply_batch(
        [sequenced(submitted(workload("old")), 42), sequenced(submitted(workload("new")), 51), bad]
    )
    assert outcomes[:2] == [None, None]
    assert isinstance(outcomes[2], Reject)
    assert publisher.of("workload.admitted") == ["ns/new"]
    assert state.last_sequence == 52


async def test_an_event_the_engine_fails_on_is_rejected_and_the_rest_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publisher = Publisher()
    state = configured_state()
    apply = state.apply

    def fragile(fact: Fact, *, now_s: float) -> list[Event]:
        if getattr(fact, "key", "") == "ns/poison":
            raise RuntimeError("bug")
        return apply(fact, now_s=now_s)

    monkeypatch.setattr(state, "apply", fragile)
    rounds = Rounds(state, publisher, clock=lambda: 100.0)
    poison = sequenced(
        new_event(
            "finished", pb.WorkloadFinished(), cluster="local", workload="ns/poison", source="t"
        ),
        10,
    )
    outcomes = await rounds.apply_batch([poison, sequenced(submitted(workload("ok")), 11)])
    assert isinstance(outcomes[0], Reject)
    assert outcomes[1] is None
    assert publisher.of("workload.admitted") == ["ns/ok"]


def pods_ready_timeout() -> pb.Envelope:
    """Kueue's Configuration with waitForPodsReady on: each admission starts a 5 s timer."""
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "waitForPodsReady": {"enable": True, "timeout": "5s"},
    }
    payload = pb.ConfigApplied(
        kind="Configuration", name="kueue", manifest_json=json.dumps(configuration)
    )
    return new_event("config_applied", payload, cluster="local", source="test")


async def test_due_timers_run_a_round_of_their_own() -> None:
    now = [100.0]
    publisher = Publisher()
    rounds = Rounds(configured_state(pods_ready_timeout()), publisher, clock=lambda: now[0])
    await rounds.apply_batch([sequenced(submitted(workload("slow")), 10)])
    assert rounds.state.next_wakeup_s() == 105.0
    now[0] = 106.0
    timers = asyncio.create_task(rounds.run_timers(Pulses().pulse("admission-timers")))
    try:
        async with asyncio.timeout(5):
            while not publisher.of("workload.evicted"):  # noqa: ASYNC110 (another task publishes)
                await asyncio.sleep(0.01)
    finally:
        timers.cancel()
        await asyncio.gather(timers, return_exceptions=True)
    (evicted,) = [e for e in publisher.stored if e.type == "workload.evicted"]
    assert evicted.evicted.reason == "PodsReadyTimeout"
    assert evicted.cause == "timer/admission/0/106000"


@pytest.mark.parametrize(
    ("timers", "woken"), [(False, False), (True, True)], ids=["none", "nearer"]
)
async def test_the_timer_loop_is_woken_only_by_a_round_that_brings_a_timer_nearer(
    timers: bool, woken: bool
) -> None:
    config = (pods_ready_timeout(),) if timers else ()
    rounds = Rounds(configured_state(*config), Publisher(), clock=lambda: 100.0)
    loop = asyncio.create_task(rounds.run_timers(Pulses().pulse("admission-timers")))
    try:
        await asyncio.sleep(0)  # it waits, with no timer to wait for
        await rounds.apply_batch([sequenced(submitted(workload("w")), 10)])
        # Admitted: with waitForPodsReady on, its pods have 5 s; else no timer at all.
        assert (rounds.state.next_wakeup_s() is not None) is timers
        assert rounds._timers_changed.is_set() is woken
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


class SlowPublisher(Publisher):
    """Stores each event as it is sent (one connection: in the order sent) and answers after a
    delay that shrinks with every call; counts how many were in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        sequence = await super().publish(env)
        await asyncio.sleep(0.01 / len(self.attempts))
        self.in_flight -= 1
        return sequence


async def test_a_round_sends_every_workloads_admission_with_its_reservation_at_once() -> None:
    publisher = SlowPublisher()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    batch = [sequenced(submitted(workload(f"w{i}")), 10 + i) for i in range(5)]
    await rounds.apply_batch(batch)
    assert publisher.most_in_flight == 5  # one decision per workload, none waiting for another
    for i in range(5):
        (mine,) = [e for e in publisher.stored if e.workload == f"ns/w{i}"]
        assert (mine.type, mine.admitted.with_reservation) == ("workload.admitted", True)


def decision(field: str, workload: str, *checks: str) -> pb.Envelope:
    payload = getattr(pb.Envelope(), field).__class__()
    env = new_event(field, payload, cluster="c", workload=workload, source="admission/0")
    if checks:
        env.quota_reserved.admission_checks.extend(checks)
    return env


@pytest.mark.parametrize(
    ("first", "together"),
    [
        ([decision("quota_reserved", "ns/a")], True),
        ([decision("quota_reserved", "ns/a", "prov")], False),  # admitted by a check's answer
        ([decision("quota_reserved", "ns/a"), decision("routed", "ns/b")], False),
        ([decision("pending", "ns/a")], False),
    ],
    ids=["reserved", "reserved-with-checks", "beside-a-route", "after-another-decision"],
)
def test_only_an_admission_right_after_its_reservation_is_sent_without_waiting(
    first: list[pb.Envelope], together: bool
) -> None:
    waves = [first, [decision("admitted", "ns/a")]]
    assert sent_together(waves) == ([waves] if together else [[w] for w in waves])


class FencedOut(Publisher):
    """A record moved the partition away: the first decision of a round fails its fence, and
    the PubAcks of the others sent beside it do not come (they time out)."""

    async def publish_together(
        self, envs: Sequence[pb.Envelope], fences: Sequence[Fence | None]
    ) -> list[int | BusError]:
        self.attempts += [env.event_id for env in envs]
        first = fences[0]
        assert first is not None
        return [Conflict(first[1], 7), *(Retry(1.0, "no PubAck") for _ in envs[1:])]


async def test_a_refused_decision_leaves_no_publish_of_its_round_running() -> None:
    publisher = FencedOut()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0, retry_s=0.0)
    batch = [sequenced(submitted(workload(f"w{i}")), 10 + i) for i in range(5)]

    with pytest.raises(Reown, match="fenced partition"):
        await rounds.apply_batch(batch)

    # The round's five decisions (admitted, with their reservations) went out together; none
    # is sent again, to land after the rebuild, and nothing is left running.
    assert len(publisher.attempts) == 5
    assert publisher.stored == []
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_our_own_decisions_coming_back_run_no_round() -> None:
    publisher = Publisher()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    await rounds.apply_batch([sequenced(submitted(workload("a")), 10)])
    echoes = [sequenced(env, 11 + i) for i, env in enumerate(publisher.stored)]
    assert [e.type for e in echoes] == ["workload.admitted"]

    assert await rounds.apply_batch(echoes) == [None]
    assert rounds.rounds == 1  # only the submission's
    assert rounds.state.last_sequence == 11
    assert await rounds.apply_batch([]) == []  # asked for a round with no event: it runs
    assert rounds.rounds == 2


async def test_views_are_rewritten_only_after_rounds_that_changed_the_engine() -> None:
    rewrites: list[int] = []
    rounds = Rounds(
        configured_state(),
        Publisher(),
        clock=lambda: 100.0,
        on_round=lambda: rewrites.append(rounds.rounds),
    )
    await rounds.apply_batch([sequenced(submitted(workload("a")), 10)])
    assert rewrites == [1]
    # A fact about a workload the engine does not hold (another shard's): no round, no rewrite.
    await rounds.apply_batch([sequenced(reported("pods_ready", "ns/elsewhere"), 11)])
    assert (rounds.rounds, rewrites, rounds.state.last_sequence) == (1, [1], 11)
    # A timer's round (no event) still runs.
    await rounds.apply_batch([])
    assert rounds.rounds == 2


async def test_a_decision_jetstream_refuses_for_good_is_dead_lettered_with_why() -> None:
    publisher = Refusing("workload.admitted")
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0, dead_letters="admission-0")
    assert await rounds.apply_batch([sequenced(submitted(workload("w")), 10)]) == [None]
    assert publisher.stored == []  # its admitted told its reservation too
    ((consumer, kind, key, reason),) = publisher.dead
    assert (consumer, kind, key) == ("admission-0", "workload.admitted", "ns/w")
    assert reason == (
        "JetStream refused this decision: workload.admitted for ns/w is 9 MiB, over the limit"
    )
