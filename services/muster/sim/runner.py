"""The simulation loop: replays a scenario against the admission `Engine` on a virtual clock.

At each distinct time it applies the facts due (arrivals, finished runs, admission check
answers, ready pods), asks the engine to `schedule`, and turns the events that come back into
new timed facts. With nodes in the scenario, `placement.Placement` places the pods of admitted
workloads and of the scenario after each engine pass. Work is proportional to events, never to
the number of workloads per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

import msgspec

from muster.api.model import (
    Admission,
    ApiObject,
    ClusterQueue,
    KueueConfig,
    Node,
    ReclaimablePod,
    Workload,
    WorkloadKey,
)
from muster.api.pod_set_updates import PodSetUpdate
from muster.core.conditions import FAILED_TO_START
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.queued_time import QueuedTime
from muster.core.routing import RoutingSettings, run_seconds_on
from muster.core.status import ClusterQueueStatus, LocalQueueStatus, PendingWorkload
from muster.sim.annotations import READY_AT_ONCE, WorkloadScript
from muster.sim.checks import CheckModels
from muster.sim.fleet import Fleet
from muster.sim.groups import GroupObject
from muster.sim.placement import Placement, PodState
from muster.sim.repeats import Repeats
from muster.sim.scenario import Arrival, Scenario, build_scenario
from muster.sim.timeline import (
    Action,
    Arrive,
    ArriveObject,
    Finish,
    PodFinish,
    PodsReady,
    PodsUnready,
    Reclaim,
    RunChecks,
    SetCheck,
    Stopped,
    Timeline,
)

# Schedule passes at one instant before the runner gives up: only a scenario whose zero-delay
# facts re-trigger each other forever (say a check that answers "Retry@0" every time) gets here.
MAX_PASSES_PER_INSTANT = 10_000

# Phases (their values) in which a check answers the reservation the workload holds now.
_DECIDING = frozenset({"QuotaReserved", "Admitted"})

# Events after which the facts scheduled for the workload's current admission no longer apply.
ADMISSION_ENDED = frozenset(
    {
        EventType.PREEMPTED,
        EventType.EVICTED,
        EventType.REQUEUED,
        EventType.DEACTIVATED,
        EventType.FINISHED,
    }
)


class AdmissionEngine(Protocol):
    """The part of `muster.core.engine.Engine` the simulator drives."""

    def submit(self, wl: Workload, *, now_s: float) -> list[Event]: ...
    def finish(
        self, key: WorkloadKey, *, now_s: float, reason: str = ..., message: str = ...
    ) -> list[Event]: ...
    def set_admission_check(
        self,
        key: WorkloadKey,
        check: str,
        state: str,
        *,
        message: str = "",
        requeue_after_s: float | None = None,
        now_s: float,
    ) -> list[Event]: ...
    def pods_ready(self, key: WorkloadKey, *, now_s: float) -> list[Event]: ...
    def pods_unready(self, key: WorkloadKey, *, now_s: float) -> list[Event]: ...
    def stopped(self, key: WorkloadKey, *, now_s: float) -> list[Event]: ...
    def set_reclaimable(
        self, key: WorkloadKey, pods: Sequence[ReclaimablePod], *, now_s: float
    ) -> list[Event]: ...
    def evict(
        self, key: WorkloadKey, *, reason: str, message: str, now_s: float
    ) -> list[Event]: ...
    def schedule(self, *, now_s: float) -> list[Event]: ...
    def next_wakeup_s(self) -> float | None: ...
    def workload(self, key: WorkloadKey) -> Workload: ...
    def admission(self, key: WorkloadKey) -> Admission | None: ...
    def holds_quota(self, key: WorkloadKey) -> bool: ...
    def phase(self, key: WorkloadKey) -> str | None: ...
    def workloads(self) -> Sequence[Workload]: ...
    def required_checks(self, key: WorkloadKey) -> tuple[str, ...]: ...
    def cluster_queue_names(self) -> Sequence[str]: ...
    def cluster_queue_status(self, name: str) -> ClusterQueueStatus: ...
    def local_queue_keys(self) -> Sequence[tuple[str, str]]: ...
    def local_queue_status(self, namespace: str, name: str) -> LocalQueueStatus: ...
    def pending_workloads(self, cluster_queue: str) -> Sequence[PendingWorkload]: ...


class WorkloadTiming(msgspec.Struct, frozen=True, kw_only=True):
    """When one workload arrived, first got quota, first ran, how long it waited and ran, and
    when it finished."""

    key: WorkloadKey
    arrived_s: float
    first_reserved_s: float | None  # first QuotaReserved
    first_admitted_s: float | None  # first Admitted
    # Queued time over every wait (core/queued_time.py), up to `end_s` for one still queued.
    waited_s: float
    # Summed over every admission (with nodes: from its gang's binding), up to `end_s` for one
    # still running.
    ran_s: float
    finished_s: float | None
    evictions: int
    last_admission: Admission | None  # kept after it finishes or loses its quota


class SimulationResult(msgspec.Struct, frozen=True, kw_only=True):
    events: tuple[Event, ...]  # in the order they happened
    workloads: tuple[Workload, ...]  # every workload that arrived, in arrival order, as it ended
    cluster_queues: tuple[ClusterQueueStatus, ...]  # sorted by name
    local_queues: tuple[LocalQueueStatus, ...]  # sorted by (namespace, name)
    pending: tuple[PendingWorkload, ...]  # by ClusterQueue name, then admission order
    timings: Mapping[WorkloadKey, WorkloadTiming]  # in arrival order
    cluster_queue_specs: tuple[ClusterQueue, ...]  # for nominal quotas in reports
    pods: tuple[PodState, ...] = ()  # with nodes only: every pod that exists, sorted by key
    nodes: tuple[Node, ...] = ()  # with nodes only: every Node that arrived, sorted by name
    # With nodes only: scheduling.k8s.io PodGroups and CompositePodGroups, with conditions.
    groups: tuple[GroupObject, ...] = ()
    # With MultiKueue: the cluster each dispatched workload runs (or, finished, ran) in, and
    # what its MultiKueue checks say (the chosen cluster, or why none can take it yet).
    clusters: Mapping[WorkloadKey, str] = msgspec.field(default_factory=dict)
    check_messages: Mapping[WorkloadKey, Mapping[str, str]] = msgspec.field(default_factory=dict)
    # The last message of each check a registered controller answers (sim/checks.py).
    controller_messages: Mapping[WorkloadKey, Mapping[str, str]] = msgspec.field(
        default_factory=dict
    )
    end_s: float  # `until_s` when given, else the time of the last thing that happened
    until_s: float | None
    # Without `until_s`: the run ended at `end_s` because the state there was the state at
    # this earlier time, with only gang deadlines ahead (sim/repeats.py): it repeats for ever.
    repeats_from_s: float | None = None


class SimulationError(Exception):
    """The simulation cannot go on (the engine or the scenario never settles)."""


@dataclass(slots=True)
class Track:
    """What the runner knows about one workload while it runs; mutable, runner-private."""

    script: WorkloadScript
    arrived_s: float
    workload: Workload  # as it arrived (its alternatives say how long each route runs)
    epoch: int = 0  # bumped whenever an admission starts or ends; stale facts carry an old one
    reservations: int = 0
    first_reserved_s: float | None = None
    first_admitted_s: float | None = None
    admitted_since_s: float | None = None  # with nodes: since its gang was bound
    ran_s: float = 0.0
    finished_s: float | None = None
    evictions: int = 0
    last_admission: Admission | None = None
    queued: QueuedTime = field(default_factory=QueuedTime)  # started by the runner at arrival

    def end_admission(self, now_s: float) -> None:
        if self.admitted_since_s is not None:
            self.ran_s += now_s - self.admitted_since_s
            self.admitted_since_s = None
        self.epoch += 1

    def timing(self, key: WorkloadKey, *, end_s: float) -> WorkloadTiming:
        running_s = 0.0 if self.admitted_since_s is None else end_s - self.admitted_since_s
        return WorkloadTiming(
            key=key,
            arrived_s=self.arrived_s,
            first_reserved_s=self.first_reserved_s,
            first_admitted_s=self.first_admitted_s,
            waited_s=self.queued.waited_s(end_s),
            ran_s=self.ran_s + running_s,
            finished_s=self.finished_s,
            evictions=self.evictions,
            last_admission=self.last_admission,
        )


def run_scenario(
    objects: Sequence[ApiObject],
    *,
    config: KueueConfig | None,
    until_s: float | None,
    routing: RoutingSettings | None = None,
) -> SimulationResult:
    """Simulate already-decoded objects; raises `InvalidScenarioError` on bad annotations.

    `config` wins over a Configuration among `objects`.
    """
    return simulate(build_scenario(objects, config=config), until_s=until_s, routing=routing)


def simulate(
    scenario: Scenario, *, until_s: float | None = None, routing: RoutingSettings | None = None
) -> SimulationResult:
    """Run `scenario` on a fresh quota-only `Engine` until nothing more happens, or `until_s`.

    With `muster.dev/stop-after` on any workload, an evicted workload holds its quota until
    its pods are gone, as the services run the engine (`holds_until_stopped`).

    `routing` (default: static unless a ClusterQueue names another policy) routes workloads
    with alternatives.
    """
    engine = Engine(
        scenario.objects,
        config=scenario.config,
        hold_quota_until_stopped=holds_until_stopped(scenario),
        routing=routing or RoutingSettings(),
    )
    return Simulation(engine, scenario, until_s=until_s).run()


def holds_until_stopped(scenario: Scenario) -> bool:
    """Does any workload say how long its pods take to stop once evicted?"""
    return any(a.script.stop_after_s is not None for a in scenario.arrivals)


class Simulation:
    """One run of one scenario against one engine; `run()` once."""

    def __init__(
        self, engine: AdmissionEngine, scenario: Scenario, *, until_s: float | None = None
    ) -> None:
        self.engine = engine
        self.scenario = scenario
        self.until_s = until_s
        # With MultiKueue, a Fleet of clusters (each its own Placement) dispatches workloads.
        self.fleet = Fleet(self, scenario, scenario.clusters) if scenario.clusters else None
        self.placement: Placement | Fleet | None = self.fleet
        # Checks whose controller is registered (muster.checks) run it instead of a script.
        self.check_models = CheckModels(self, scenario)
        if self.fleet is None and scenario.placement:
            self.placement = Placement(self, scenario)
        # Nodes, Pods and gang objects first, so that workloads arriving at the same time find
        # them; without a Node they are not simulated at all.
        cluster = scenario.cluster_arrivals if self.placement is not None else ()
        self.timeline = Timeline(
            [(a.at_s, ArriveObject(a)) for a in cluster]
            + [(a.at_s, Arrive(a)) for a in scenario.arrivals]
        )
        self.tracks: dict[WorkloadKey, Track] = {}
        self.events: list[Event] = []
        self.now_s = 0.0
        self.stepped = False
        config = scenario.config or KueueConfig()
        self.pods_ready_enabled = config.wait_for_pods_ready.enable
        self.stops = holds_until_stopped(scenario)
        self.repeats = Repeats()
        self.repeats_from_s: float | None = None

    def run(self) -> SimulationResult:
        while (now_s := self.next_time()) is not None:
            if self.until_s is not None and now_s > self.until_s:
                break
            self.step(now_s)
            if self.until_s is None and (first_s := self.repeated()) is not None:
                self.repeats_from_s = first_s
                break
        return self.result()

    def repeated(self) -> float | None:
        """When the state now was seen before with only the cluster's own timers ahead (gang
        deadlines, a MultiKueue worker's loss), or None.

        Only a scenario whose future is all in the engine, the cluster or clusters and the
        check controllers qualifies: no fact or engine timer pending.
        """
        if (
            self.placement is None
            or self.timeline.next_time() is not None
            or self.engine.next_wakeup_s() is not None
        ):
            return None
        return self.repeats.first_seen_s(self.state_now(self.placement), self.now_s)

    def state_now(self, placement: Placement | Fleet) -> bytes:
        """Everything that decides what happens next, without the clock: each workload's
        phase and admission, which scripted check answer its next reservation gets, each pod's
        fate, where MultiKueue sent what, what the check controllers hold, and how far the
        next gang deadline (or worker loss) is."""
        engine, now_s = self.engine, self.now_s
        deadline_s = placement.next_deadline_s()
        return msgspec.json.encode(
            (
                [
                    (key, engine.phase(key), engine.admission(key), self.attempt(track))
                    for key, track in self.tracks.items()
                ],
                placement.state_now(now_s),
                self.check_models.state_now(now_s),
                None if deadline_s is None else deadline_s - now_s,
            )
        )

    def attempt(self, track: Track) -> int:
        """The scripted answers its next reservation gets: the last answer is repeated."""
        scripts = [*track.script.checks.values(), *self.scenario.check_results.values()]
        return min(track.reservations, max((len(s) - 1 for s in scripts), default=0))

    def next_time(self) -> float | None:
        """The next instant anything can happen: the earliest action, engine timer or gang
        deadline."""
        timers = [self.timeline.next_time(), self.engine.next_wakeup_s()]
        if self.placement is not None:
            timers.append(self.placement.next_deadline_s())
        due = [t for t in timers if t is not None]
        if not due:
            return None
        now_s = min(due)
        if self.stepped and now_s <= self.now_s:
            raise SimulationError(
                f"a timer asked to wake at t={now_s:g}, not after the last schedule at "
                f"t={self.now_s:g}"
            )
        return now_s

    def step(self, now_s: float) -> None:
        """Apply every fact due at `now_s` and schedule, until no zero-delay fact is left."""
        self.now_s, self.stepped = now_s, True
        for _ in range(MAX_PASSES_PER_INSTANT):
            for action in self.timeline.pop_due(now_s):
                self.apply(action)
            self.react(self.engine.schedule(now_s=now_s))
            # Placement after admission: it places what this pass admitted, and its evictions
            # free quota that the engine's next pass at this instant may hand out.
            again = self.placement is not None and self.placement.schedule(now_s)
            next_s = self.timeline.next_time()
            if not again and (next_s is None or next_s > now_s):
                return
        raise SimulationError(
            f"t={now_s:g}: still busy after {MAX_PASSES_PER_INSTANT} schedule passes; "
            "do zero-delay admission check answers make it loop?"
        )

    def apply(self, action: Action) -> None:
        """Report one due fact to the engine, unless its admission has ended since."""
        engine, now_s = self.engine, self.now_s
        match action:
            case Arrive(arrival):
                track = Track(script=arrival.script, arrived_s=now_s, workload=arrival.workload)
                if arrival.workload.active:  # an inactive one is not queued until resumed
                    track.queued.queued(now_s)
                self.tracks[arrival.workload.key] = track
                self.react(engine.submit(arrival.workload, now_s=now_s))
            case Finish(key, epoch) if self.tracks[key].epoch == epoch:
                self.react(engine.finish(key, now_s=now_s))
            case SetCheck(key, epoch, check, state, after_s) if self.answer_lands(action):
                self.react(
                    engine.set_admission_check(
                        key, check, state, requeue_after_s=after_s, now_s=now_s
                    )
                )
            case RunChecks(key, epoch) if self.tracks[key].epoch == epoch:
                self.check_models.reconcile(key, now_s=now_s)
            case PodsReady(key, epoch, regained) if self.tracks[key].epoch == epoch:
                self.react(engine.pods_ready(key, now_s=now_s))
                unready_after_s = self.tracks[key].script.pods_unready_after_s
                if not regained and unready_after_s is not None:
                    self.timeline.push(now_s + unready_after_s, PodsUnready(key, epoch))
            case PodsUnready(key, epoch) if self.tracks[key].epoch == epoch:
                self.react(engine.pods_unready(key, now_s=now_s))
                back_s = self.tracks[key].script.pods_unready_for_s
                if back_s is not None:
                    self.timeline.push(now_s + back_s, PodsReady(key, epoch, regained=True))
            case Stopped(key):
                self.react(engine.stopped(key, now_s=now_s))
            case Reclaim(key, epoch, pod_set, count) if self.tracks[key].epoch == epoch:
                before = engine.workload(key).reclaimable_pods
                pods = [p for p in before if p.name != pod_set]
                pods.append(ReclaimablePod(name=pod_set, count=count))
                self.react(engine.set_reclaimable(key, pods, now_s=now_s))
            case ArriveObject(arrival) if self.placement is not None:
                self.placement.arrive(arrival, now_s=now_s)
            case PodFinish(key, serial) if self.placement is not None:
                self.placement.finish_pod(key, serial, now_s=now_s)

    def react(self, events: list[Event]) -> None:
        """Record the engine's events in order and schedule the facts they lead to."""
        self.events.extend(events)
        for event in events:
            key = WorkloadKey(event.object)
            track = self.tracks.get(key)
            if track is None:
                continue
            if event.type is EventType.QUOTA_RESERVED:
                self.on_quota_reserved(key, track)
            elif event.type is EventType.ADMITTED:
                self.on_admitted(key, track)
            elif event.type in ADMISSION_ENDED:
                track.end_admission(self.now_s)
                if event.type is EventType.REQUEUED:
                    track.queued.queued(self.now_s)
                else:  # an attempt that ended before its admission ends its wait too
                    track.queued.dequeued(self.now_s)
                if event.type is EventType.FINISHED:
                    track.finished_s = self.now_s
                elif event.type is EventType.EVICTED:
                    track.evictions += 1
                    if self.stops:
                        stop_s = track.script.stop_after_s or 0.0
                        self.timeline.push(self.now_s + stop_s, Stopped(key))
                finished = event.type is EventType.FINISHED
                self.check_models.ended(key, finished=finished, now_s=self.now_s)
                if self.placement is not None:
                    self.placement.admission_ended(key, finished=finished, now_s=self.now_s)

    def answer_lands(self, answer: SetCheck) -> bool:
        """A scripted check answer is told when its reservation still stands; after it was
        lost, a late controller's Retry told while the workload holds no quota (Kueue's
        NeedsRequeueAtUpdate sets requeueAt for any unfinished workload, and the engine
        holds it out of its queue until then), or Ready told before its next reservation
        (Kueue keeps it in status.admissionChecks, reset only at an eviction, and the next
        reservation counts it). A late Rejected lands as a Retry does: Kueue keeps it in
        status too, and its scheduler leaves the workload unreserved while it stands. Any
        other late answer is dropped."""
        if self.tracks[answer.key].epoch == answer.epoch:
            return True
        if answer.state == "Ready":
            return self.engine.phase(answer.key) not in _DECIDING
        failed = answer.state in ("Retry", "Rejected")
        return failed and not self.engine.holds_quota(answer.key)

    def on_quota_reserved(self, key: WorkloadKey, track: Track) -> None:
        """Schedule each required admission check's scripted answer for this attempt."""
        track.epoch += 1
        attempt = track.reservations
        track.reservations += 1
        if track.first_reserved_s is None:
            track.first_reserved_s = self.now_s
        checks = self.engine.required_checks(key)
        if self.fleet is not None and (
            dispatched := [c for c in checks if self.fleet.dispatches(c)]
        ):
            admission = self.engine.admission(key)
            if admission is not None:
                wl = self.engine.workload(key)
                self.fleet.reserved(wl, admission, epoch=track.epoch, checks=dispatched)
            checks = tuple(c for c in checks if c not in dispatched)
        if controlled := tuple(c for c in checks if self.check_models.runs(c)):
            admission = self.engine.admission(key)
            if admission is not None:
                wl = self.engine.workload(key)
                self.check_models.reserved(
                    wl, admission, epoch=track.epoch, checks=controlled, now_s=self.now_s
                )
            checks = tuple(c for c in checks if c not in controlled)
        for check in checks:
            script = track.script.checks.get(check) or self.scenario.check_results.get(
                check, READY_AT_ONCE
            )
            answer = script[min(attempt, len(script) - 1)]
            action = SetCheck(key, track.epoch, check, answer.state, answer.requeue_after_s)
            self.timeline.push(self.now_s + answer.delay_s, action)

    def on_admitted(self, key: WorkloadKey, track: Track) -> None:
        """Start the run clock; schedule the finish and, with waitForPodsReady, ready pods.

        With nodes, create the workload's pods instead: the clock starts when they are bound.
        """
        if track.first_admitted_s is None:
            track.first_admitted_s = self.now_s
        track.queued.dequeued(self.now_s)
        admission = self.engine.admission(key)
        if admission is not None:
            track.last_admission = admission
            why = self.check_models.start_conflict(
                self.engine.workload(key), admission, self.pod_set_updates(key)
            )
            if why is not None:  # no pod is made: the binder ends it so (Kueue's FailedToStart)
                finished = self.engine.finish(
                    key, now_s=self.now_s, reason=FAILED_TO_START, message=why
                )
                self.react(finished)
                return
        if self.placement is not None and admission is not None:
            wl = self.engine.workload(key)
            run_s = self.run_seconds(key, track)
            self.placement.admitted(wl, admission, run_s=run_s, now_s=self.now_s)
            return
        self.start_running(key, track)

    def start_running(self, key: WorkloadKey, track: Track) -> None:
        track.admitted_since_s = self.now_s
        script = track.script
        run_s = self.run_seconds(key, track)
        if run_s is not None:
            self.timeline.push(self.now_s + run_s, Finish(key, track.epoch))
        if self.pods_ready_enabled and script.pods_ready_after_s is not None:
            self.timeline.push(self.now_s + script.pods_ready_after_s, PodsReady(key, track.epoch))
        for step in script.reclaims:
            action = Reclaim(key, track.epoch, step.pod_set, step.count)
            self.timeline.push(self.now_s + step.delay_s, action)

    def run_seconds(self, key: WorkloadKey, track: Track) -> float | None:
        """Its `run-seconds`, or, once routed to an alternative, the alternative's."""
        if not track.workload.alternatives:
            return track.script.run_s
        return run_seconds_on(track.workload, self.engine.workload(key).queue_name)

    # --- what placement asks of the loop (placement.PlacementHost) ----------------------------

    def record(self, event: Event) -> None:
        """Append a placement event; it leads to nothing in the engine."""
        self.events.append(event)

    def evict(self, key: WorkloadKey, *, reason: str, message: str) -> None:
        self.react(self.engine.evict(key, reason=reason, message=message, now_s=self.now_s))

    def gang_bound(self, key: WorkloadKey) -> None:
        """Every pod of an admitted workload's gang is bound: its run clock starts."""
        track = self.tracks.get(key)
        if track is not None and track.admitted_since_s is None:
            self.start_running(key, track)

    def push(self, at_s: float, action: Action) -> None:
        self.timeline.push(at_s, action)

    def pod_set_updates(self, key: WorkloadKey) -> list[PodSetUpdate]:
        """What the Ready checks of `key` ask to be set on its pods: the controller-run ones'
        and the scripted ones' (`muster.dev/check-pod-set-updates`), in check name order as
        the entries of its status.admissionChecks stand."""
        scripted = [
            update
            for check in self.engine.required_checks(key)
            if not self.check_models.runs(check)
            for update in self.scenario.check_updates.get(check, ())
        ]
        return sorted([*self.check_models.pod_set_updates(key), *scripted], key=attrgetter("check"))

    def result(self) -> SimulationResult:
        engine = self.engine
        end_s = self.until_s if self.until_s is not None else self.now_s
        return SimulationResult(
            events=tuple(self.events),
            workloads=tuple(engine.workloads()),
            cluster_queues=tuple(
                engine.cluster_queue_status(name) for name in sorted(engine.cluster_queue_names())
            ),
            local_queues=tuple(
                engine.local_queue_status(ns, name)
                for ns, name in sorted(engine.local_queue_keys())
            ),
            pending=tuple(
                p
                for name in sorted(engine.cluster_queue_names())
                for p in engine.pending_workloads(name)
            ),
            timings={key: track.timing(key, end_s=end_s) for key, track in self.tracks.items()},
            cluster_queue_specs=self.scenario.cluster_queues,
            pods=self.placement.pod_states() if self.placement is not None else (),
            nodes=self.placement.node_states() if self.placement is not None else (),
            groups=self.placement.group_states() if self.placement is not None else (),
            clusters=dict(self.fleet.ran_on) if self.fleet is not None else {},
            check_messages=dict(self.fleet.messages) if self.fleet is not None else {},
            controller_messages=dict(self.check_models.messages),
            end_s=end_s,
            until_s=self.until_s,
            repeats_from_s=self.repeats_from_s,
        )


__all__ = [
    "AdmissionEngine",
    "Arrival",
    "Simulation",
    "SimulationError",
    "SimulationResult",
    "WorkloadTiming",
    "run_scenario",
    "simulate",
]
