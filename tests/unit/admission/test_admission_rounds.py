"""Rounds: facts that arrive together are decided together; handlers return after PubAcks."""

from __future__ import annotations

import asyncio

import pytest
from admission_stream import (
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    submitted,
    workload,
)

from muster.admission.handlers import AppliedSequences, Rounds
from muster.admission.state import AdmissionState
from muster.bus import Reject, Retry
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)


class Publisher:
    def __init__(self, *, fail_first: int = 0) -> None:
        self.stored: list[pb.Envelope] = []
        self.attempts = 0
        self.fail_first = fail_first
        self.gate = asyncio.Event()
        self.gate.set()

    async def publish(self, env: pb.Envelope) -> int:
        await self.gate.wait()
        self.attempts += 1
        if self.attempts <= self.fail_first:
            raise Retry(0.0, "no PubAck")
        self.stored.append(env)
        return len(self.stored)


def configured_state() -> AdmissionState:
    stream, state = Stream(), AdmissionState()
    state.take_ownership(now_s=0)
    for manifest in (flavor(), cluster_queue(cpu="10"), local_queue()):
        stream.run(state, applied(manifest))
    return state


def sequenced(env: pb.Envelope, seq: int) -> pb.Envelope:
    env.sequence = seq
    return env


async def test_events_handled_together_are_decided_in_one_round_before_any_returns() -> None:
    publisher = Publisher()
    publisher.gate.clear()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    runner = asyncio.create_task(rounds.run())
    handlers = [
        asyncio.create_task(rounds.handle(sequenced(submitted(workload(f"w{i}")), 10 + i)))
        for i in range(5)
    ]
    await asyncio.sleep(0.05)
    assert not any(h.done() for h in handlers)  # nothing acked before its PubAcks
    publisher.gate.set()
    await asyncio.gather(*handlers)
    assert rounds.rounds == 1
    assert [e.workload for e in publisher.stored if e.type == "workload.admitted"] == [
        f"ns/w{i}" for i in range(5)
    ]
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_a_failed_publish_is_retried_with_the_same_ids() -> None:
    publisher = Publisher(fail_first=2)
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0, retry_s=0.0)
    runner = asyncio.create_task(rounds.run())
    await rounds.handle(sequenced(submitted(workload("a")), 10))
    assert [e.type for e in publisher.stored] == ["workload.quota_reserved", "workload.admitted"]
    assert publisher.attempts == 4
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_redeliveries_and_own_decisions_are_skipped_and_bad_manifests_rejected() -> None:
    publisher = Publisher()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    rounds.applied.floor = 50  # the rebuild replayed up to 50
    runner = asyncio.create_task(rounds.run())
    await rounds.handle(sequenced(submitted(workload("old")), 42))
    assert publisher.stored == []
    bad = sequenced(submitted(workload("bad")), 51)
    bad.submitted.manifest_json = "{"
    with pytest.raises(Reject):
        await rounds.handle(bad)
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_events_waiting_for_a_round_are_given_back_when_rounds_stop() -> None:
    publisher = Publisher()
    publisher.gate.clear()
    rounds = Rounds(configured_state(), publisher, clock=lambda: 100.0)
    runner = asyncio.create_task(rounds.run())
    handler = asyncio.create_task(rounds.handle(sequenced(submitted(workload("a")), 10)))
    await asyncio.sleep(0.02)
    runner.cancel()
    with pytest.raises(Retry):
        await handler
    with pytest.raises(Retry):
        await rounds.handle(sequenced(submitted(workload("b")), 11))


def test_applied_sequences_remember_recent_ones_above_the_floor() -> None:
    applied_ = AppliedSequences(10, keep=4)
    assert 10 in applied_
    assert 11 not in applied_
    for seq in (12, 15, 13, 20, 30):
        applied_.add(seq)
    assert 30 in applied_
    assert 20 in applied_
    assert 12 in applied_
    assert 25 not in applied_
