"""Evictions in flight: evicted and not completed yet, with their attempts. Pure.

Rebuilt on start by replaying `evicted` minus `eviction_completed` and `eviction_dropped`.
Every method is idempotent:
a duplicate `evicted` (same or other event id) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from muster.contracts.v1 import events_pb2 as pb


@dataclass(slots=True)
class Flight:
    """One eviction in flight: the `evicted` event that asked for it, and the last attempt."""

    evicted: pb.Envelope
    attempt: int
    next_at_s: float  # when to send the next attempt

    @property
    def workload(self) -> str:
        return self.evicted.workload


@dataclass(frozen=True, slots=True)
class Due:
    """What the resend timer must do: send `attempt` of `flight`, or give it up."""

    flight: Flight
    attempt: int
    give_up: bool


class Evictions:
    """Evictions in flight by (cluster, workload)."""

    def __init__(self, *, resend_s: float, max_attempts: int) -> None:
        if resend_s <= 0 or max_attempts < 1:
            raise ValueError("resend interval must be > 0 and max attempts >= 1")
        self.resend_s = resend_s
        self.max_attempts = max_attempts
        self.flights: dict[tuple[str, str], Flight] = {}
        self.completed_at: dict[tuple[str, str], int] = {}  # stream sequence of the last one

    def __len__(self) -> int:
        return len(self.flights)

    def evicted(self, env: pb.Envelope, *, now_s: float) -> Flight | None:
        """Record an eviction; the flight whose current attempt must be sent, or None.

        The same event again (a redelivery) returns its flight, so the command is re-sent with
        the same id (JetStream drops the copy); another eviction of a workload already in
        flight, or one older than its last completion, returns None.
        """
        key = (env.cluster, env.workload)
        if env.sequence and env.sequence < self.completed_at.get(key, 0):
            return None
        flight = self.flights.get(key)
        if flight is not None:
            return flight if flight.evicted.event_id == env.event_id else None
        flight = self.flights[key] = Flight(env, attempt=1, next_at_s=now_s + self.resend_s)
        return flight

    def completed(self, env: pb.Envelope) -> Flight | None:
        """The pods are gone, or the binder dropped the eviction as late (`eviction_dropped`):
        the flight ends. Returns it, or None when none was in flight.

        An answer naming another eviction than the one in flight (a command of an earlier
        eviction, redelivered late), or naming pods (a placement eviction of pods outside
        Kueue, sent by gang-permit), changes nothing: the eviction in flight is not done.
        """
        key = (env.cluster, env.workload)
        if env.WhichOneof("payload") == "eviction_dropped":
            named = env.eviction_dropped.eviction_id
        elif env.eviction_completed.pods:
            return None  # gang-permit's eviction of pods, never one of these flights
        else:
            named = env.eviction_completed.eviction_id
        flight = self.flights.get(key)
        if named and (flight is None or flight.evicted.event_id != named):
            return None
        self.completed_at[key] = max(self.completed_at.get(key, 0), env.sequence)
        if len(self.completed_at) > 65536:  # only recent completions can race an eviction
            for old in list(self.completed_at)[: len(self.completed_at) // 2]:
                del self.completed_at[old]
        return self.flights.pop(key, None)

    def next_due_s(self) -> float | None:
        return min((f.next_at_s for f in self.flights.values()), default=None)

    def due(self, *, now_s: float) -> list[Due]:
        """Flights whose grace period is over: their next attempt, or giving up after the last."""
        out: list[Due] = []
        for key, flight in list(self.flights.items()):
            if flight.next_at_s > now_s:
                continue
            if flight.attempt >= self.max_attempts:
                del self.flights[key]
                out.append(Due(flight, attempt=flight.attempt, give_up=True))
                continue
            flight.attempt += 1
            flight.next_at_s = now_s + self.resend_s
            out.append(Due(flight, attempt=flight.attempt, give_up=False))
        return out
