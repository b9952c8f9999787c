"""The gang scheduler of one cluster: pure state, fed facts, asked for decisions.

Callers report nodes, gangs and pods as they appear, change and go, then call `schedule`;
it returns what to do now (permit, wait, time out, preempt). The same object runs inside the
gangpermit service (facts from the cluster watch and the event stream) and inside the
simulator (facts from the virtual clock). No I/O, no clock: `now_s` is always passed in.
This module holds the facade and the pass (which units, in what order); what it knows between
passes is `state`'s, each unit's decision `decisions.Decider`'s, a tree's `treedecisions`'.

Semantics (issue 4):
- A gang is ready when its spec is known and at least `min_count` of its pods are pending.
  Pods of a gang whose spec is unknown wait ("waiting for its Workload/PodGroup").
- Ready gangs and pods placed on their own are taken in order: priority (highest first),
  then `created_s`, then key; never interleaved pod by pod.
- A ready gang is placed whole against one view of the nodes (bound pods, permitted-not-bound
  pods and nominations of higher-priority preemptors all count as used): every pending pod if
  they all fit, else its first `min_count` pods by key, else nothing. Pods that join a gang
  already permitted are placed on their own.
- The deadline (`timeout_s` or the default) starts at the gang's first attempt; when it passes
  the gang times out, every pending pod is rejected together, and the gang waits untouched
  until one of its pods or its spec changes, which starts a new attempt with a new deadline.
- With preemption on, a ready gang that does not fit evicts the smallest set of whole
  lower-priority workloads that makes it fit (`PlacementPreempted`) and keeps their room
  nominated until it is placed. If it times out first, the room goes back; once the victims'
  pods that still held room then are all gone, it starts a new attempt
  (`PlacementState.await_victims`).

Where the list above leaves room:
- A pod placed on its own (no gang, or a late member of a permitted gang) is its own unit,
  keyed by its pod key in `GangWaiting` and `GangPermitted(basic=True)`; `bind_failed` takes
  that key too. It never times out (as kube-scheduler's pending pods) and does not preempt.
  Consecutive such pods with one signature and priority are placed in one step.
- A nomination counts as used for every other unit of the same or a lower priority (as
  kube-scheduler counts nominated pods of priority >= the pod's own).
- The deadline also runs while a gang that was tried has fewer than `min_count` pods.
- After `bind_failed`, pods that did bind count towards `min_count`; only the rest is placed.
- A pass looks only at units that changed, units whose deadline came, and, once something
  happened that could let them fit (room freed, a node changed, a pod bound from outside),
  units that failed before: its work follows what is pending, not every pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from muster.core.placement import trees
from muster.core.placement.decisions import Decider
from muster.core.placement.domains import Where, where
from muster.core.placement.fit import Placer
from muster.core.placement.model import (
    Decision,
    GangKey,
    GangSpec,
    GangStatus,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
)
from muster.core.placement.records import GangRecord, PodRecord, UnitOrder
from muster.core.placement.state import PlacementState
from muster.core.placement.treedecisions import decide_tree

DEFAULT_TIMEOUT_S = 300.0


class FreeMark(NamedTuple):
    """Where the room was when a caller last looked (`GangScheduler.free_changes`)."""

    room_version: int
    nominations: int


class GangScheduler:
    def __init__(
        self,
        *,
        scoring: Scoring = "binpack",
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        preemption: bool = True,
    ) -> None:
        self._state = PlacementState(default_timeout_s=default_timeout_s)
        placer = Placer(self._state.table, scoring)
        self._decide = Decider(self._state, placer, preemption=preemption)
        self._seen_epoch = 0

    # --- facts ---------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        """Add or replace a node (labels, taints, allocatable, readiness)."""
        self._state.upsert_node(node)

    def remove_node(self, name: NodeName) -> None:
        """Forget a node; pods recorded on it keep their records until removed."""
        self._state.remove_node(name)

    def upsert_gang(self, spec: GangSpec) -> None:
        """Add or replace a gang's spec (a changed spec restarts a timed-out gang)."""
        self._state.upsert_gang(spec)

    def remove_gang(self, key: GangKey) -> None:
        """Forget a gang; its pending pods wait again for a spec."""
        self._state.remove_gang(key)

    def upsert_pod(self, pod: PodInfo) -> None:
        """Add or replace a pod: pending (`node == ""`) or bound to `pod.node`.

        Binding a permitted pod to the node it was permitted on turns its reservation into use.
        A pending report of a permitted pod keeps its reservation: it is pending until bound.
        """
        self._state.upsert_pod(pod)

    def remove_pod(self, key: PodKey) -> None:
        """A pod finished or was deleted: its room is free again."""
        self._state.remove_pod(key)

    def resume_try(self, gang: GangKey, *, started_s: float) -> None:
        """A restarted caller's gang whose try began at `started_s` (it preempted then): its
        next first attempt keeps that deadline, so a victim that never stops holds the room
        nominated for it no longer than it would have without the restart. Past that
        deadline already, the gang preempts again (the same victims, if they still hold the
        room) and times out at once, waiting for them as it would have."""
        self._state.resumed[gang] = started_s

    def bind_failed(self, gang: GangKey) -> None:
        """Binding a permitted gang failed: its unbound pods go back to pending, reservations are
        released, and the gang is retried as a whole on the next pass.

        For a pod placed on its own, `gang` is its pod key.
        """
        self._state.bind_failed(gang)

    # --- decisions -----------------------------------------------------------------------------

    def schedule(self, *, now_s: float) -> list[Decision]:
        """One pass: place what can be placed, time out what is overdue, preempt what must be."""
        state = self._state
        out: list[Decision] = []
        decide = self._decide
        state.take_due(now_s)
        decide.start_pass()
        while True:
            decide.forget_fits()
            if state.epoch != self._seen_epoch:  # something could help the waiting units
                self._seen_epoch = state.epoch
                state.dirty_gangs |= {
                    k for k in state.waiting_gangs if state.gangs[k].tried != state.epoch
                }
                state.dirty_singles |= {
                    k for k in state.waiting_singles if state.pods[k].tried != state.epoch
                }
            if not state.dirty_gangs and not state.dirty_singles:
                return out
            gangs, singles = state.dirty_gangs, state.dirty_singles
            state.dirty_gangs, state.dirty_singles = set(), set()
            for unit in self._units(gangs, singles):
                decide.forget_fits()
                if isinstance(unit, list):
                    decide.singles(unit, out)
                elif unit.composite is not None:
                    decide_tree(decide, unit, now_s, out)
                else:
                    decide.gang(unit, now_s, out)

    def next_deadline_s(self) -> float | None:
        """The earliest deadline of a waiting gang, for the caller's timer; None if none."""
        return self._state.deadlines.next_s()

    # --- views ---------------------------------------------------------------------------------

    def gang_status(self, key: GangKey) -> GangStatus | None:
        state = self._state
        gang = state.gangs.get(key)
        if gang is None:
            return None
        return GangStatus(
            gang=key,
            phase=(
                "Permitted"
                if gang.placed
                else "TimedOut"
                if gang.timed_out
                else "Preempting"
                if gang.nomination is not None
                else "Waiting"
            ),
            reason=gang.reason,
            pending=len(state.pending(gang)),
            min_count=0 if gang.spec is None else gang.spec.min_count,
            deadline_s=gang.deadline_s(state.default_timeout_s),
        )

    def gangs(self) -> Iterable[GangStatus]:
        for key in sorted(self._state.gangs):
            status = self.gang_status(key)
            if status is not None:
                yield status

    def node_of(self, pod: PodKey) -> NodeName | None:
        """The node a pod is bound or permitted to, if any."""
        record = self._state.pods.get(pod)
        return None if record is None else record.node

    def victims_of(self, gang: GangKey) -> frozenset[PodKey]:
        """The victims' pods `gang` still waits for: those its nomination keeps room behind,
        or, timed out, those it is tried again after (empty once placed, forgotten, or all
        gone)."""
        record = self._state.gangs.get(gang)
        if record is None:
            return frozenset()
        nomination = record.nomination
        held = nomination.victim_pods if nomination is not None else set()
        return frozenset(held | record.former_victims)

    def free(self, node: NodeName) -> dict[str, int]:
        """Allocatable minus used, reserved and nominated room, `pods` included."""
        return self._state.nominated.free_of(node)

    def free_changes(self, since: FreeMark | None) -> tuple[FreeMark, set[NodeName] | None]:
        """A mark of the room now, and the nodes whose `free` may have changed after the mark
        `since` (None: any, or too long ago to say), so a caller keeps each node's free room
        up to date without looking at every node."""
        table, nominated = self._state.table, self._state.nominated
        mark = FreeMark(room_version=table.room_version, nominations=nominated.version)
        if since is None or since.nominations != nominated.version:
            return mark, None
        rows = table.changed_rows(since.room_version)
        if rows is None:
            return mark, None
        return mark, {info.name for row in set(rows.tolist()) if (info := table.infos[row])}

    # --- one pass ------------------------------------------------------------------------------

    def _units(
        self, gangs: set[GangKey], singles: set[PodKey]
    ) -> Iterator[GangRecord | list[PodRecord]]:
        """The units to decide, in order; consecutive pods placed on their own with the same
        signature and priority come as one run, placed in one step."""
        state = self._state
        units: list[tuple[UnitOrder, GangRecord | PodRecord]] = []
        seen: set[GangKey] = set()
        for key in gangs:
            gang = state.gangs.get(key)
            found = None if gang is None else trees.unit_of(state, gang)
            if found is not None and found.key not in seen:
                seen.add(found.key)
                units.append((found.order(), found))
        for pod_key in singles:
            pod = state.pods.get(pod_key)
            if pod is not None and pod.node is None and state.is_single(pod):
                units.append((pod.order(), pod))
        units.sort(key=lambda unit: unit[0])
        run: list[PodRecord] = []
        inside: Where = ((), None)
        for _, unit in units:
            if isinstance(unit, PodRecord):
                head = run[0] if run else unit
                found_where = where(self._state, unit)
                if (
                    unit.sig is not head.sig
                    or unit.info.priority != head.info.priority
                    or (run and found_where != inside)
                ):
                    yield run
                    run = []
                inside = found_where
                run.append(unit)
                continue
            if run:
                yield run
                run = []
            yield unit
        if run:
            yield run
