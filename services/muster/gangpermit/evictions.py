"""Placement evictions gang-permit asked the binder for and has no answer to yet, and when each
is asked for again. Pure: the caller passes the time.

A `cmd.evict` that was dead-lettered, or whose answer never came, left the victims running and
the preemptor waiting for room never freed, unless something else woke it. Each preemptor's
eviction of one victim is a flight: the pods it named (by uid), the commands not answered, and
the next time to ask again, backing off from `first_s` to at most `max_s` between re-sends.
The caller re-sends only the pods the preemptor still waits for (`GangScheduler.victims_of`)
and the cluster still has; a flight ends once every command is answered, or nothing is left to
stop. Rebuilt by deciding again after a restart (a preemptor still waiting preempts again,
with the same ids; the binder's copy of a command it carried out stops nothing more, as each
pod is stopped only while its uid is the one named). Commands live in a work queue that a
restart cannot read back, so the back-off resumes from when the preemptor last named the victim
(`preempted_before`, its `placement_preempted`): it goes on doubling, and re-sends get ids
never sent before, rather than starting over at `first_s` after each restart. A re-send that
fell due while gang-permit was down goes at once after the restart, not a back-off later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from muster.contracts.v1 import events_pb2
from muster.core.placement.model import GangKey, PodKey

RESEND_FIRST_S: Final = 30.0  # as the preemption service's grace before its next attempt
RESEND_MAX_S: Final = 300.0  # a victim that never stops costs one command per 5 min at most

FlightKey = tuple[GangKey, str]  # (preemptor, victim workload)


@dataclass(slots=True)
class Flight:
    """One preemptor's eviction of one victim."""

    preemptor: GangKey
    victim: str
    pods: dict[PodKey, str] = field(default_factory=dict)  # named and not answered: uid
    unanswered: dict[str, tuple[PodKey, ...]] = field(default_factory=dict)  # command id: pods
    resends: int = 0  # re-sent so far; the next re-send's number is one more
    next_at_s: float = 0.0


class EvictionFlights:
    """Every flight, by (preemptor, victim), and which flight each command id belongs to."""

    def __init__(self, *, first_s: float = RESEND_FIRST_S, max_s: float = RESEND_MAX_S) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(
                f"evict re-send must be > 0 s and at most its cap, got {first_s:g} and {max_s:g}"
            )
        self.first_s = first_s
        self.max_s = max_s
        self.flights: dict[FlightKey, Flight] = {}
        self._by_command: dict[str, FlightKey] = {}
        # Read back while restoring, kept until the first pass after it: when each preemptor
        # last named each victim (`preempted_before`), by preemptor, then victim.
        self._resumed: dict[GangKey, dict[str, float]] = {}

    def __len__(self) -> int:
        return len(self.flights)

    def sent(
        self,
        preemptor: GangKey,
        commands: Sequence[events_pb2.Envelope],
        *,
        now_s: float,
        resent: bool = False,
    ) -> None:
        """`commands` (`cmd.evict` of one victim, maybe in parts) are published for
        `preemptor`: they replace what the flight asked for before (an earlier command answered
        late changes nothing then). A new preemption starts the back-off again, unless it is
        one read back at a restart (`preempted_before`): that one goes on where it was. A
        re-send moves it on."""
        if not commands:
            return
        key = (preemptor, commands[0].workload)
        flight = self.flights.get(key)
        if flight is None:
            flight = self.flights[key] = Flight(preemptor=preemptor, victim=key[1])
        self._forget_commands(flight)
        flight.pods = {}
        for command in commands:
            refs = command.evict_requested.pods
            flight.pods.update((_pod_key(p), p.uid) for p in refs)
            flight.unanswered[command.event_id] = tuple(_pod_key(p) for p in refs)
            self._by_command[command.event_id] = key
        since_s = self._resumed.get(preemptor, {}).pop(key[1], None)
        if not resent and since_s is not None:
            flight.resends, flight.next_at_s = self._resume(since_s, now_s=now_s)
            return
        flight.resends = flight.resends + 1 if resent else 0
        flight.next_at_s = now_s + self._gap_s(flight.resends)

    def preempted_before(self, preemptor: GangKey, victims: Sequence[str], *, at_s: float) -> None:
        """Read back while restoring: `preemptor` named `victims` at `at_s` (its
        `placement_preempted`). The same preemption decided again in the first pass after the
        restart goes on with the back-off it had then."""
        self._resumed.setdefault(preemptor, {}).update(dict.fromkeys(victims, at_s))

    def forget_preemptor(self, preemptor: GangKey) -> None:
        """Read back while restoring: `preemptor` was admitted again, its earlier preemptions
        are not its own now."""
        self._resumed.pop(preemptor, None)

    def resumed(self) -> None:
        """The first pass after a restart is decided: a preemption read back and not decided
        again in it is over, and a later one of the same victim is new."""
        self._resumed.clear()

    def _gap_s(self, resends: int) -> float:
        return min(self.first_s * 2.0**resends, self.max_s)

    def _resume(self, since_s: float, *, now_s: float) -> tuple[int, float]:
        """The re-sends a flight begun at `since_s` had made by `now_s` had no restart come
        between, and when its next is due. The last of them may have fallen due while
        gang-permit was down, and never gone: it is due at once, as the next re-send (with
        that one's id, never sent: the one a gang-permit that died just after sending it
        used would be dropped as a copy). The cost, one command more where it had gone."""
        resends, sent_s = 0, since_s
        while sent_s + (gap := self._gap_s(resends)) <= now_s:
            if gap == self.max_s:  # at the cap: the rest in one step
                resends += int((now_s - sent_s) // gap)
                break
            sent_s += gap
            resends += 1
        return resends, now_s if resends else since_s + self.first_s

    def answered(self, answer: events_pb2.Envelope) -> None:
        """The binder's `eviction_completed` for command `answer.cause`: its pods were
        stopped, none is asked for again."""
        key = self._by_command.pop(answer.cause, None)
        flight = None if key is None else self.flights.get(key)
        if flight is None:
            return
        for pod in flight.unanswered.pop(answer.cause, ()):
            flight.pods.pop(pod, None)
        if not flight.unanswered:
            self.drop(flight)

    def drop(self, flight: Flight) -> None:
        """Ask for `flight`'s pods no more."""
        self.flights.pop((flight.preemptor, flight.victim), None)
        self._forget_commands(flight)

    def _forget_commands(self, flight: Flight) -> None:
        for command in flight.unanswered:
            self._by_command.pop(command, None)
        flight.unanswered = {}

    def next_due_s(self) -> float | None:
        return min((f.next_at_s for f in self.flights.values()), default=None)

    def due(self, *, now_s: float) -> list[Flight]:
        """The flights whose next re-send has come, in key order. The caller re-sends what is
        left of each (`sent(..., resent=True)`) or drops it."""
        return [self.flights[k] for k in sorted(self.flights) if self.flights[k].next_at_s <= now_s]


def _pod_key(ref: events_pb2.PodRef) -> PodKey:
    return PodKey(f"{ref.namespace}/{ref.name}")
