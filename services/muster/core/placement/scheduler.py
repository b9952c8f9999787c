"""The gang scheduler of one cluster: pure state, fed facts, asked for decisions.

Callers report nodes, gangs and pods as they appear, change and go, then call `schedule`;
it returns what to do now (permit, wait, time out, preempt). The same object runs inside the
gangpermit service (facts from the cluster watch and the event stream) and inside the
simulator (facts from the virtual clock). No I/O, no clock: `now_s` is always passed in.

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
  nominated until it is placed.

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

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence

import numpy as np

from muster.core.placement import trees
from muster.core.placement.domains import (
    Where,
    domains_above,
    held_domain,
    mask,
    unheld_above,
    where,
)
from muster.core.placement.fit import Fit, Group, Placer
from muster.core.placement.model import (
    Binding,
    Decision,
    GangKey,
    GangPermitted,
    GangSpec,
    GangStatus,
    GangTimedOut,
    GangWaiting,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
)
from muster.core.placement.nodes import Ints
from muster.core.placement.records import WAITING_FOR_SPEC, GangRecord, PodRecord, UnitOrder
from muster.core.placement.state import PlacementState
from muster.core.placement.treefit import (
    Branch,
    Leaf,
    at_minimum,
    flattened,
    leaves_of,
    place_tree,
    place_under,
)
from muster.core.placement.units import at_quorum, groups_of
from muster.core.placement.victims import Placed, Pool, candidates_below, preempt

DEFAULT_TIMEOUT_S = 300.0

Groups = list[tuple[Group, list[PodKey]]]  # pods by signature, each group's pods by key


class GangScheduler:
    def __init__(
        self,
        *,
        scoring: Scoring = "binpack",
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        preemption: bool = True,
    ) -> None:
        self._state = PlacementState(default_timeout_s=default_timeout_s)
        self._placer = Placer(self._state.table, scoring)
        self._preemption = preemption
        self._seen_epoch = 0
        self._pools: dict[tuple[int, int], Pool] = {}
        self._fits: dict[Hashable, Fit] = {}
        self._fits_version = (-1, -1)

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
        state.take_due(now_s)
        self._pools.clear()  # new pods may have added resource columns since the last pass
        self._fits.clear()
        while True:
            self._forget_fits()
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
                self._forget_fits()
                if isinstance(unit, list):
                    self._decide_singles(unit, out)
                elif unit.composite is not None:
                    self._decide_tree(unit, now_s, out)
                else:
                    self._decide_gang(unit, now_s, out)

    def _forget_fits(self) -> None:
        """Drop the fits tried so far once any room or nomination changed."""
        version = (self._state.table.room_version, self._state.nominated.version)
        if version != self._fits_version:
            self._fits.clear()
            self._fits_version = version

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

    def free(self, node: NodeName) -> dict[str, int]:
        """Allocatable minus used, reserved and nominated room, `pods` included."""
        return self._state.nominated.free_of(node)

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

    def _decide_gang(self, gang: GangRecord, now_s: float, out: list[Decision]) -> None:
        state = self._state
        spec = gang.spec
        if gang.timed_out or (gang.placed and spec is not None):
            return
        pending = state.pending(gang)
        if spec is None:
            if pending:
                self._wait(gang, WAITING_FOR_SPEC, len(pending), 0, out)
            return
        if not pending:
            state.waiting_gangs.discard(gang.key)
            return
        if gang.held >= spec.min_count:  # enough bound already (min_count was lowered)
            gang.placed = True
            state.regroup(gang)
            return
        deadline = gang.deadline_s(state.default_timeout_s)
        present = len(pending) + gang.held
        if present < spec.min_count:
            reason = f"{present} of {spec.min_count} pods pending"
            if deadline is not None and now_s >= deadline:
                self._time_out(gang, reason, pending, out)
            else:
                state.waiting_gangs.discard(gang.key)
                self._wait(gang, reason, len(pending), spec.min_count, out)
            return
        if gang.started_s is None:  # the first attempt of this try starts the clock
            gang.started_s = now_s
            state.deadlines.push(gang)
            deadline = gang.deadline_s(state.default_timeout_s)
        fit, groups = self._fit_gang(gang, spec, pending)
        if fit.complete:
            self._permit_gang(gang, fit, groups, out)
        elif deadline is not None and now_s >= deadline:
            self._time_out(gang, fit.reason, pending, out)
        else:
            gang.tried = state.epoch
            state.waiting_gangs.add(gang.key)
            nomination = gang.nomination
            if nomination is not None and nomination.victim_pods:
                return  # the victims are still terminating; their room is kept for the gang
            if not (self._preemption and spec.preempts and self._preempt(gang, spec, pending, out)):
                self._wait(gang, fit.reason, len(pending), spec.min_count, out)

    def _fit_gang(
        self, gang: GangRecord, spec: GangSpec, pending: list[PodKey]
    ) -> tuple[Fit, Groups]:
        """Every pending pod if they all fit, else the first that make `min_count`."""
        need = spec.min_count - gang.held
        domain = held_domain(self._state, gang)
        inside = domains_above(self._state, gang)
        unheld = unheld_above(self._state, gang)
        tries = [pending, pending[:need]] if len(pending) > need else [pending]
        free: Ints | None = None
        fit: Fit | None = None
        for pods in tries:
            groups = groups_of(self._state, pods)
            plain = [g for g, _ in groups]
            # Gangs of the same shape fit alike until some room changes: try each shape once.
            shape = tuple((g.sig, g.count) for g in plain)
            key = (shape, spec.topology, domain, inside, spec.priority)
            fit = self._fits.get(key) if gang.nomination is None else None
            if fit is None:
                if free is None:
                    free = self._state.nominated.view(spec.priority, own=gang.key)
                if unheld:
                    leaf = Leaf(key=gang.key, tries=(groups,), topology=spec.topology)
                    above = [
                        (c.key, topology)
                        for c in unheld
                        if c.composite is not None and (topology := c.composite.topology)
                    ]
                    within = mask(self._state.table, inside)
                    fit = place_under(self._placer, leaf, above, free, within=within)
                else:
                    fit = self._placer.place(
                        plain,
                        free,
                        topology=spec.topology,
                        domain=domain,
                        within=mask(self._state.table, inside),
                    )
                if gang.nomination is None:
                    self._fits[key] = fit
            if fit.complete:
                break
        assert fit is not None
        return fit, groups

    def _place(self, groups: Groups, fit: Fit) -> list[Binding]:
        """Hold the room `fit` found for `groups`; the bindings, in the groups' pod order."""
        state = self._state
        table = state.table
        bindings = []
        for (group, keys), slots in zip(groups, fit.slots, strict=False):
            if not slots.total:
                continue
            table.add_use_rows(slots.rows, slots.counts, group.sig.demand(table))
            rows = np.repeat(slots.rows, slots.counts).tolist()
            for key, row in zip(keys, rows, strict=False):
                node = table.name(row)
                state.hold(state.pods[key], node, bound=False)
                bindings.append(Binding(pod=key, node=node))
        return bindings

    def _permit_gang(self, gang: GangRecord, fit: Fit, groups: Groups, out: list[Decision]) -> None:
        state = self._state
        bindings = sorted(self._place(groups, fit), key=lambda b: b.pod)
        gang.placed = True
        gang.started_s = None
        gang.reason = ""
        gang.tried = -1
        state.waiting_gangs.discard(gang.key)
        state.drop_nomination(gang)
        state.regroup(gang)  # pods left pending are placed on their own
        state.dirty_gangs.discard(gang.key)
        out.append(GangPermitted(gang=gang.key, bindings=tuple(bindings)))

    def _decide_singles(self, run: list[PodRecord], out: list[Decision]) -> None:
        """Place a run of identical pods on their own: as many as fit, in order."""
        state = self._state
        head = run[0]
        group = Group(head.sig, len(run))
        domains, topology = where(self._state, head)
        # A signature none of which fits stays so until some room changes.
        hopeless = ("alone", head.sig, head.info.priority, domains, topology)
        fit = self._fits.get(hopeless)
        if fit is None:
            free = state.nominated.view(head.info.priority, own=None)
            within = mask(self._state.table, domains)
            fit = self._placer.place([group], free, whole=False, within=within, topology=topology)
            if not fit.placed:
                self._fits[hopeless] = fit
        keys = [pod.info.key for pod in run]
        placed = self._place([(group, keys)], fit) if fit.placed else []
        out.extend(GangPermitted(gang=GangKey(b.pod), bindings=(b,), basic=True) for b in placed)
        for pod in run[fit.placed :]:
            pod.tried = state.epoch
            state.waiting_singles.add(pod.info.key)
            if pod.reason != fit.reason:
                pod.reason = fit.reason
                key = GangKey(pod.info.key)
                out.append(GangWaiting(gang=key, reason=fit.reason, pending=1, min_count=1))

    def _wait(
        self,
        gang: GangRecord,
        reason: str,
        pending: int,
        min_count: int,
        out: list[Decision],
        *,
        groups: tuple[GangKey, ...] = (),
    ) -> None:
        """Report that `gang` (or a tree, whose gangs are `groups`) waits, if the reason is
        new."""
        if gang.reason != reason:
            gang.reason = reason
            out.append(
                GangWaiting(
                    gang=gang.key,
                    reason=reason,
                    pending=pending,
                    min_count=min_count,
                    groups=groups,
                )
            )

    def _time_out(
        self, gang: GangRecord, reason: str, pending: list[PodKey], out: list[Decision]
    ) -> None:
        state = self._state
        deadline = gang.deadline_s(state.default_timeout_s)
        assert deadline is not None
        assert gang.started_s is not None
        timeout = deadline - gang.started_s
        gang.timed_out = True
        gang.started_s = None
        gang.reason = f"not placed within {timeout:g}s: {reason}"
        gang.tried = -1
        state.waiting_gangs.discard(gang.key)
        state.drop_nomination(gang)
        out.append(GangTimedOut(gang=gang.key, reason=gang.reason, pods=tuple(pending)))

    # --- preemption ----------------------------------------------------------------------------

    def _pool(self, priority: int) -> Pool:
        """The preemption candidates below `priority`, kept for the rest of the epoch."""
        key = (self._state.epoch, priority)
        pool = self._pools.get(key)
        if pool is None:
            pool = candidates_below(self._state, priority)
            self._pools = {key: pool}  # older epochs are stale
        return pool

    def _preempt(
        self, gang: GangRecord, spec: GangSpec, pending: list[PodKey], out: list[Decision]
    ) -> bool:
        """Evict the fewest whole lower-priority workloads that let the gang's first
        `min_count` pods fit, and nominate their room; False if no such set exists."""
        groups = [g for g, _ in groups_of(self._state, pending[: spec.min_count - gang.held])]
        domain = held_domain(self._state, gang)
        within = mask(self._state.table, domains_above(self._state, gang))

        def place(free: Ints) -> Placed | None:
            fit = self._placer.place(
                groups, free, topology=spec.topology, domain=domain, within=within, explain=False
            )
            if not fit.complete:
                return None
            return [(g, s.rows, s.counts) for g, s in zip(groups, fit.slots, strict=True)]

        return self._preempt_for(gang, spec.priority, groups, place, out)

    def _preempt_for(
        self,
        unit: GangRecord,
        priority: int,
        groups: Sequence[Group],
        place: Callable[[Ints], Placed | None],
        out: list[Decision],
    ) -> bool:
        """Workload-aware preemption for `unit` (a gang, or a tree's root): see `preempt`."""
        if not self._state.holds_below(priority):
            return False
        found = preempt(self._state, self._pool(priority), unit, priority, groups, place)
        if found is not None:
            out.append(found)
        return found is not None

    # --- CompositePodGroup trees -----------------------------------------------------------------

    def _decide_tree(self, root: GangRecord, now_s: float, out: list[Decision]) -> None:
        """Place a tree not placed yet in one decision: every group at quorum, or nothing."""
        state = self._state
        if root.placed or root.timed_out:
            return
        pending = sum(len(state.pending(leaf)) for leaf in trees.leaves(state, root))
        groups = trees.groups_below(state, root)
        if not pending:
            state.waiting_gangs.discard(root.key)
            return
        node, reason = at_quorum(self._state, root)
        assert root.composite is not None
        if node is None:
            state.waiting_gangs.discard(root.key)
            self._wait(root, reason, pending, root.composite.min_groups, out, groups=groups)
            return
        if root.started_s is None:  # the first attempt of this try starts the clock
            root.started_s = now_s
            state.deadlines.push(root)
        free = state.nominated.view(root.priority, own=root.key)
        fit = place_tree(self._placer, node, free)
        if fit.complete:
            for key in sorted(fit.leaves):
                leaf = fit.leaves[key]
                self._permit_gang(state.gangs[key], leaf.fit, leaf.groups, out)
            self._tree_placed(root)
            return
        deadline = root.deadline_s(state.default_timeout_s)
        if deadline is not None and now_s >= deadline:
            every = [p for leaf in trees.leaves(state, root) for p in state.pending(leaf)]
            self._time_out(root, fit.reason, sorted(every), out)
            return
        root.tried = state.epoch
        state.waiting_gangs.add(root.key)
        nomination = root.nomination
        if nomination is not None and nomination.victim_pods:
            return  # the victims are still terminating; their room is kept for the tree
        if not (self._preemption and self._preempts(root) and self._preempt_tree(root, node, out)):
            self._wait(root, fit.reason, pending, root.composite.min_groups, out, groups=groups)

    def _tree_placed(self, root: GangRecord) -> None:
        state = self._state
        root.placed = True
        root.started_s = None
        root.reason = ""
        root.tried = -1
        state.waiting_gangs.discard(root.key)
        state.drop_nomination(root)
        for leaf in trees.leaves(state, root):
            if not leaf.placed:
                state.regroup(leaf)  # its own gang from now on, inside the tree's domains

    def _preempts(self, root: GangRecord) -> bool:
        return all(
            leaf.spec is None or leaf.spec.preempts for leaf in trees.leaves(self._state, root)
        )

    def _preempt_tree(self, root: GangRecord, node: Leaf | Branch, out: list[Decision]) -> bool:
        """Workload-aware preemption with the whole tree (at quorum) as the preemptor."""
        quorum = at_minimum(node)
        groups = [g for leaf in leaves_of(quorum) for g, _ in leaf.tries[-1]]

        def place(free: Ints) -> Placed | None:
            fit = place_tree(self._placer, quorum, free, explain=False)
            return flattened(fit) if fit.complete else None

        return self._preempt_for(root, root.priority, groups, place, out)
