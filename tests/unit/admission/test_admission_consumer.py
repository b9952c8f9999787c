"""How admission's in-order consumer (`muster.bus.ordered`) answers a fetched batch: one ack
for the batch (the durable acks all), a term for each event dead-lettered, a copy that could
not be stored made again before anything after it is answered; batches handled one after
another share one ack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import nats.aio.msg
import pytest
from admission_stream import submitted, workload
from google.protobuf.message import DecodeError

from muster.bus import ConsumerSettings, Reject, Retry, encode, ordered, subject_of
from muster.bus import connection as real
from muster.bus.ordered import _Acks, _handle_batch
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)


class Msg:
    """A JetStream delivery, recording how it was answered."""

    def __init__(self, data: bytes, sequence: int, answers: list[tuple[str, int]]) -> None:
        self.data = data
        self.sequence = sequence
        self.reply = f"$JS.ACK.MUSTER_EVENTS.admission-0.1.{sequence}.{sequence}.0.0"
        self.subject = _subject(data)
        self.headers = None
        self._answers = answers

    async def ack(self) -> None:
        self._answers.append(("ack", self.sequence))

    async def term(self) -> None:
        self._answers.append(("term", self.sequence))


def _subject(data: bytes) -> str:
    """The subject `data` was stored on: its own, as muster's publishers store it."""
    try:
        return subject_of(pb.Envelope.FromString(data))
    except DecodeError:
        return "muster.v1.local.workload.submitted"


class Publisher:
    def __init__(self, *, failing: int | None = None, failures: int = 0) -> None:
        self.copied: list[int] = []
        self.failing = failing  # the sequence whose copy cannot be stored
        self.failures = failures  # how many times
        self.tries: list[int] = []

    async def dead_letter(self, msg: Msg, *, consumer: str, reason: str) -> int:
        self.tries.append(msg.sequence)
        if msg.sequence == self.failing and self.failures:
            self.failures -= 1
            raise Retry(1.0, "no PubAck")
        self.copied.append(msg.sequence)
        return len(self.copied)


class Bus:
    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.metrics = None


def batch(answers: list[tuple[str, int]]) -> list[Msg]:
    """Sequences 10..14: 11 cannot be read, 13 is refused by the rounds."""
    data = [encode(submitted(workload(f"w{i}"))) for i in range(5)]
    data[1] = b"\xff not an envelope"
    return [Msg(d, 10 + i, answers) for i, d in enumerate(data)]


async def refuse_13(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
    return [Reject("cannot apply") if e.sequence == 13 else None for e in envs]


async def handled(
    msgs: list[Msg], publisher: Publisher | None = None, acks: _Acks | None = None
) -> _Acks:
    """`msgs` handled as the consumer loop does; the ack owed is left in the `_Acks`."""
    acks = acks if acks is not None else _Acks(limit=256)
    bus = Bus(publisher or Publisher())
    # Stand-ins with only what _handle_batch reads of a Bus and of nats' Msg.
    real_bus, real_msgs = cast(real.Bus, bus), cast(list[nats.aio.msg.Msg], msgs)
    await _handle_batch(real_bus, "admission-0", real_msgs, refuse_13, ConsumerSettings(), acks)
    return acks


async def answered(publisher: Publisher) -> list[tuple[str, int]]:
    answers: list[tuple[str, int]] = []
    await (await handled(batch(answers), publisher)).send()
    return answers


async def test_a_batch_is_answered_by_its_terms_and_one_ack_of_its_last_event() -> None:
    publisher = Publisher()
    assert await answered(publisher) == [("term", 11), ("term", 13), ("ack", 14)]
    assert publisher.copied == [11, 13]


async def test_a_copy_that_failed_is_made_again_before_anything_after_it_is_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Left unanswered, 11 would be answered by the next batch's ack, never copied.
    monkeypatch.setattr(ordered, "DEAD_LETTER_RETRY_S", (0.01, 0.02))
    publisher = Publisher(failing=11, failures=3)
    assert await answered(publisher) == [("term", 11), ("term", 13), ("ack", 14)]
    assert publisher.tries == [11, 11, 11, 11, 13]
    assert publisher.copied == [11, 13]


async def test_an_event_refused_last_answers_for_the_batch_with_its_term() -> None:
    answers: list[tuple[str, int]] = []
    msgs = batch(answers)[:4]  # 13, refused, is the last
    await (await handled(msgs)).send()
    assert answers == [("term", 11), ("term", 13)]


def readable(answers: list[tuple[str, int]], first: int, count: int) -> list[Msg]:
    return [
        Msg(encode(submitted(workload(f"w{s}"))), s, answers) for s in range(first, first + count)
    ]


async def test_batches_handled_one_after_another_are_answered_by_one_ack_of_the_last() -> None:
    answers: list[tuple[str, int]] = []
    acks = await handled(readable(answers, 20, 3))
    await handled(readable(answers, 23, 2), acks=acks)
    assert answers == []  # owed, not sent: the next batch's ack would answer for them too
    await acks.send()
    assert answers == [("ack", 24)]


async def test_a_term_of_a_later_batch_answers_for_the_ack_owed_before_it() -> None:
    answers: list[tuple[str, int]] = []
    acks = await handled(readable(answers, 5, 2))
    await handled(batch(answers)[:4], acks=acks)  # ends with 13, refused
    await acks.send()
    assert answers == [("term", 11), ("term", 13)]


async def test_an_ack_is_owed_for_no_more_than_the_limit_of_messages() -> None:
    answers: list[tuple[str, int]] = []
    acks = await handled(readable(answers, 30, 3), acks=_Acks(limit=5))
    assert not acks.full
    await handled(readable(answers, 33, 2), acks=acks)
    assert acks.full  # the loop sends it at once
