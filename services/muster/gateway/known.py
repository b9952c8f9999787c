"""Which workloads a Submit would find already there, by admission's duplicate rule.

Admission ignores a `submitted` of a workload it knows, live or finished (the last
FINISHED_KEPT finished; a deleted one is forgotten: `admission.ledger.Ledger.submit`). The
gateway keeps the same index (`KnownWorkloads`, pure) from the same events, so that Submit on
the NATS path answers "already exists; left as it is" for such a workload, as the API server
does on Kubernetes, and publishes nothing for it, instead of "submitted" for what admission
would drop (tests/unit/gateway/test_gateway_known.py holds the two rules together).

`KnownFollower` reads only `submitted`, `finished` and `deleted`, from the first Submit on (a
gateway nobody submits to reads nothing more than before). An index that may be behind is
trusted to say "new"; when it says "known", the stream is read up to its end first, so a
deletion stored just before is seen, as admission will see it.

Two gateways (or one behind) can both find a name new at the same instant. So a `submitted` is
stored under a message id per workload name and life of the name (`KnownWorkloads.claim`: the
sequence of its last deletion): JetStream stores the first of two racing submissions and
answers the second as a duplicate, whose caller is then told "already exists" (or, when the
stored one is its own Submit retried, "submitted"). What is left: a gateway that has not read
a deletion yet claims the name's previous life, which JetStream remembers for its dedupe window
(2 min) only: two submissions racing through gateways that disagree on it, right after the
deletion of a name last submitted longer ago than that, can both be stored (admission keeps the
first).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final, Protocol

from muster.bus.errors import BusError, Retry
from muster.bus.publisher import Duplicated
from muster.bus.subjects import EVENTS_STREAM, workload_filters
from muster.contracts.v1 import events_pb2
from muster.gateway.submit import PlannedEvent
from muster.gateway.watch import EventHistory
from muster.gateway.workloads import RETRY_S, follow_forever

log = logging.getLogger(__name__)

FINISHED_KEPT: Final = 100_000  # admission's (admission/ledger.py): the test holds them equal
CATCH_UP_S: Final = 10.0
SENT_KEPT: Final = 10_000  # own submissions awaiting read-back; beyond, admission decides
# Names whose last deletion is remembered, for `claim`; one forgotten claims its first life,
# which JetStream remembers for its dedupe window only.
DELETED_KEPT: Final = 100_000
CLAIMS: Final = 3  # a name deleted and submitted again under a Submit this often: retry it
SUBJECTS: Final = tuple(
    subject
    for event in ("submitted", "finished", "deleted")
    for subject in workload_filters("*", event)
)


class KnownWorkloads:
    """Workloads submitted and not deleted (the last `finished_kept` finished ones), with the
    event id of their `submitted`, as of stream sequence `sequence`."""

    def __init__(self, *, finished_kept: int = FINISHED_KEPT, sent_kept: int = SENT_KEPT) -> None:
        self.live: dict[str, str] = {}
        self.deleted: OrderedDict[str, int] = OrderedDict()  # key -> its last deletion's sequence
        self.finished: OrderedDict[str, str] = OrderedDict()  # oldest first
        self.finished_kept = finished_kept
        self.sequence = 0
        # This gateway's own submissions not read back yet: a second call right after the
        # first must not find the name new only because the follower is behind.
        self.sent: dict[str, str] = {}  # oldest first
        self.sent_kept = sent_kept

    def apply(self, env: events_pb2.Envelope) -> None:
        """Learn what `env` says; one at or below `sequence` was read already."""
        if env.sequence and env.sequence <= self.sequence:
            return
        self.sequence = max(self.sequence, env.sequence)
        key = env.workload
        if self.sent.get(key) == env.event_id:
            del self.sent[key]
        match env.WhichOneof("payload"):
            case "submitted" if key not in self.live and key not in self.finished:
                self.live[key] = env.event_id
            case "finished" if key in self.live:
                self.finished[key] = self.live.pop(key)
                if len(self.finished) > self.finished_kept:
                    self.finished.popitem(last=False)
            case "deleted":
                self.live.pop(key, None)
                self.finished.pop(key, None)
                self.sent.pop(key, None)
                self.deleted[key] = env.sequence
                self.deleted.move_to_end(key)
                if len(self.deleted) > DELETED_KEPT:
                    self.deleted.popitem(last=False)

    def claim(self, cluster: str, key: str) -> str:
        """The message id a `submitted` of `key` is stored under: one per name and life of
        the name (since its last deletion), the same in every gateway that read as far."""
        return f"submitted/{cluster}/{key}/{self.deleted.get(key, 0)}"

    def published(self, key: str, event_id: str) -> None:
        """This gateway stored a `submitted` of `key`: known before the follower reads it."""
        if key not in self.live and key not in self.finished:
            self.sent[key] = event_id
            if len(self.sent) > self.sent_kept:  # a follower that stopped reading: stay bounded
                del self.sent[next(iter(self.sent))]

    def duplicate(self, key: str, event_id: str) -> bool:
        """Whether admission would ignore a `submitted` of `key` with id `event_id`: the key is
        known by another `submitted` (a Submit retried with its idempotency key publishes the
        same id again: the same submission, which JetStream drops)."""
        known = self.live.get(key) or self.finished.get(key) or self.sent.get(key)
        return known is not None and known != event_id


def duplicates(known: KnownWorkloads, planned: Sequence[PlannedEvent]) -> list[PlannedEvent]:
    """The workloads of `planned` that `known` says admission would ignore."""
    return [
        p
        for p in planned
        if p.payload_field == "submitted" and known.duplicate(p.workload, p.event_id)
    ]


class SubmitPublisher(Protocol):
    """How Submit stores an event (`muster.bus.Bus.publish`)."""

    async def publish(self, env: events_pb2.Envelope, *, dedupe_id: str | None = None) -> int: ...


class KnownFollower:
    """Feeds a `KnownWorkloads` from MUSTER_EVENTS, from the first `duplicates` call on."""

    def __init__(self, history: EventHistory, *, catch_up_s: float = CATCH_UP_S) -> None:
        self.history = history
        self.known = KnownWorkloads()
        self.catch_up_s = catch_up_s
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def duplicates(self, planned: Sequence[PlannedEvent]) -> list[PlannedEvent]:
        """What of `planned` admission would ignore as duplicates; none when the index cannot
        be read in `catch_up_s` (then admission alone decides, as before)."""
        if not any(p.payload_field == "submitted" for p in planned):
            return []
        if self._ready.is_set() and not duplicates(self.known, planned):
            return []  # the common case: no timer to arm for a wait that cannot happen
        try:
            async with asyncio.timeout(self.catch_up_s):
                if self._task is None:
                    self._task = asyncio.create_task(self._run(), name="known-workloads")
                await self._ready.wait()
                if not duplicates(self.known, planned):
                    return []
                await self._read_to_end()  # "known" may be stale: a deletion just stored
        except TimeoutError:
            log.warning(
                "submit: events not read in %gs: duplicates left to admission", self.catch_up_s
            )
            return []
        except BusError as exc:
            log.warning("submit: events not read (%s): duplicates left to admission", exc)
            return []
        return duplicates(self.known, planned)

    async def publish(self, bus: SubmitPublisher, envs: Sequence[events_pb2.Envelope]) -> set[str]:
        """Store `envs` in order; the event ids of the `submitted` among them that found their
        name taken by another submission stored meanwhile (their callers: "already exists")."""
        lost: set[str] = set()
        for env in envs:
            if env.WhichOneof("payload") != "submitted":
                await bus.publish(env)
            elif not await self._claim(bus, env):
                lost.add(env.event_id)
        return lost

    async def _claim(self, bus: SubmitPublisher, env: events_pb2.Envelope) -> bool:
        """Store `submitted` `env` under its name's claim; whether it holds the name (stored
        now, or by this Submit before: a retry with its idempotency key)."""
        for _ in range(CLAIMS):
            claim = self.known.claim(env.cluster, env.workload)
            if not isinstance(await bus.publish(env, dedupe_id=claim), Duplicated):
                return True
            await self._read_to_end()  # the submission stored under `claim`, and what followed
            if self.known.duplicate(env.workload, env.event_id):
                return False
            if self.known.claim(env.cluster, env.workload) == claim:
                return True  # this Submit's own, stored by an earlier attempt
            # deleted since: claimed again, for the name's new life
        raise Retry(1.0, f"{env.workload}: deleted and submitted again while submitting")

    def published(self, planned: Sequence[PlannedEvent]) -> None:
        """`planned` was stored: its submissions are known from now on."""
        for p in planned:
            if p.payload_field == "submitted":
                self.known.published(p.workload, p.event_id)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _read_to_end(self) -> None:
        """Read every event stored now into the index (the follower may be behind)."""
        last = await self.history.last_sequence(EVENTS_STREAM)
        if last <= self.known.sequence:
            return
        replay = self.history.replay(
            list(SUBJECTS),
            stream=EVENTS_STREAM,
            from_sequence=self.known.sequence + 1,
            until_sequence=last,
        )
        async for env in replay:
            self.known.apply(env)
        self.known.sequence = max(self.known.sequence, last)

    async def _run(self) -> None:
        """Read the stream to its end, then follow it; a bus failure is retried."""
        while not self._ready.is_set():
            try:
                await self._read_to_end()
                self._ready.set()
            except BusError as exc:
                log.warning("known workloads: reading events failed, retrying: %s", exc)
                await asyncio.sleep(RETRY_S)
        await follow_forever(
            self.history,
            SUBJECTS,
            lambda: self.known.sequence + 1,
            self.known.apply,
            what="known workloads",
        )
