"""One unit's decision in a pass: a gang, or a run of pods placed on their own.

`Decider` places the unit against the free room its priority sees (`NominatedRoom.view`):
permit it (holding the room until the pods bind), say why it waits, time it out when its
deadline has passed, or (a gang) preempt the fewest lower-priority workloads that let it fit.
Fits tried for gangs of one shape are kept until any room changes. `GangScheduler` says which
units and in what order; `treedecisions` decides a CompositePodGroup tree with these verbs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from muster.core.placement.domains import domains_above, held_domain, mask, unheld_above, where
from muster.core.placement.fit import Fit, Group, Placer
from muster.core.placement.model import (
    Binding,
    Decision,
    GangKey,
    GangPermitted,
    GangSpec,
    GangTimedOut,
    GangWaiting,
    PodKey,
)
from muster.core.placement.nodes import Ints
from muster.core.placement.records import WAITING_FOR_SPEC, GangRecord, PodRecord
from muster.core.placement.state import PlacementState
from muster.core.placement.treefit import Leaf, place_under
from muster.core.placement.units import groups_of
from muster.core.placement.victims import Placed, Pool, candidates_below, preempt

Groups = list[tuple[Group, list[PodKey]]]  # pods by signature, each group's pods by key


class Decider:
    """Decides units against one cluster's state; its caches live for one pass at most."""

    def __init__(self, state: PlacementState, placer: Placer, *, preemption: bool) -> None:
        self.state = state
        self.placer = placer
        self.preemption = preemption
        self._pools: dict[tuple[int, int], Pool] = {}
        self._fits: dict[Hashable, Fit] = {}
        self._fits_version = (-1, -1)

    def start_pass(self) -> None:
        """New pods may have added resource columns since the last pass: forget every fit."""
        self._pools.clear()
        self._fits.clear()

    def forget_fits(self) -> None:
        """Drop the fits tried so far once any room or nomination changed."""
        version = (self.state.table.room_version, self.state.nominated.version)
        if version != self._fits_version:
            self._fits.clear()
            self._fits_version = version

    def gang(self, gang: GangRecord, now_s: float, out: list[Decision]) -> None:
        """Permit `gang` whole, or say why it waits, time it out, or preempt for it (the
        rules are in `scheduler`'s docstring)."""
        state = self.state
        spec = gang.spec
        if gang.timed_out or (gang.placed and spec is not None):
            return
        # Counted, not listed, until the gang may be tried: a gang whose pods are still being
        # made is looked at every pass (a listing is n log n for each of a big gang's passes).
        waiting = len(gang.pods) - gang.held  # its pods that hold nothing
        if spec is None:
            if waiting:
                self.wait(gang, WAITING_FOR_SPEC, waiting, 0, out)
            return
        if not waiting:
            state.waiting_gangs.discard(gang.key)
            return
        if gang.held >= spec.min_count:  # enough bound already (min_count was lowered)
            gang.placed = True
            state.regroup(gang)
            return
        deadline = gang.deadline_s(state.default_timeout_s)
        present = len(gang.pods)
        if present < spec.min_count:
            reason = f"{present} of {spec.min_count} pods pending"
            if deadline is not None and now_s >= deadline:
                self.time_out(gang, reason, state.pending(gang), out)
            else:
                state.waiting_gangs.discard(gang.key)
                self.wait(gang, reason, waiting, spec.min_count, out)
            return
        pending = state.pending(gang)
        resumed = False
        if gang.started_s is None:  # the first attempt of this try starts the clock
            resumed = state.start_try(gang, now_s)
            deadline = gang.deadline_s(state.default_timeout_s)
        fit, groups = self._fit_gang(gang, spec, pending)
        if fit.complete:
            self.permit_gang(gang, fit, groups, out)
        elif deadline is not None and now_s >= deadline:
            if resumed and self.preemption and spec.preempts:
                # Its deadline passed while gang-permit was down: the nomination it held is
                # made again, so that it waits for those victims as it would have.
                self._preempt(gang, spec, pending, out)
            self.time_out(gang, fit.reason, pending, out)
        else:
            gang.tried = state.epoch
            state.waiting_gangs.add(gang.key)
            nomination = gang.nomination
            if nomination is not None and nomination.victim_pods:
                return  # the victims are still terminating; their room is kept for the gang
            if not (self.preemption and spec.preempts and self._preempt(gang, spec, pending, out)):
                self.wait(gang, fit.reason, len(pending), spec.min_count, out)

    def _fit_gang(
        self, gang: GangRecord, spec: GangSpec, pending: list[PodKey]
    ) -> tuple[Fit, Groups]:
        """Every pending pod if they all fit, else the first that make `min_count`."""
        need = spec.min_count - gang.held
        domain = held_domain(self.state, gang)
        inside = domains_above(self.state, gang)
        unheld = unheld_above(self.state, gang)
        tries = [pending, pending[:need]] if len(pending) > need else [pending]
        free: Ints | None = None
        fit: Fit | None = None
        for pods in tries:
            groups = groups_of(self.state, pods)
            plain = [g for g, _ in groups]
            # Gangs of the same shape fit alike until some room changes: try each shape once.
            shape = tuple((g.sig, g.count) for g in plain)
            key = (shape, spec.topology, domain, inside, spec.priority)
            fit = self._fits.get(key) if gang.nomination is None else None
            if fit is None:
                if free is None:
                    free = self.state.nominated.view(spec.priority, own=gang.key)
                if unheld:
                    leaf = Leaf(key=gang.key, tries=(groups,), topology=spec.topology)
                    above = [
                        (c.key, topology)
                        for c in unheld
                        if c.composite is not None and (topology := c.composite.topology)
                    ]
                    within = mask(self.state.table, inside)
                    fit = place_under(self.placer, leaf, above, free, within=within)
                else:
                    fit = self.placer.place(
                        plain,
                        free,
                        topology=spec.topology,
                        domain=domain,
                        within=mask(self.state.table, inside),
                    )
                if gang.nomination is None:
                    self._fits[key] = fit
            if fit.complete:
                break
        assert fit is not None
        return fit, groups

    def _place(self, groups: Groups, fit: Fit) -> list[Binding]:
        """Hold the room `fit` found for `groups`; the bindings, in the groups' pod order."""
        state = self.state
        table = state.table
        bindings = []
        for (group, keys), slots in zip(groups, fit.slots, strict=False):
            if not slots.total:
                continue
            table.add_use_rows(slots.rows, slots.counts, group.sig.demand(table))
            if len(slots.rows) == 1:  # all on one node (a one-pod gang): no numpy call
                rows = [int(slots.rows[0])] * slots.total
            else:
                rows = np.repeat(slots.rows, slots.counts).tolist()
            for key, row in zip(keys, rows, strict=False):
                node = table.name(row)
                state.hold(state.pods[key], node, bound=False)
                bindings.append(Binding(pod=key, node=node))
        return bindings

    def permit_gang(self, gang: GangRecord, fit: Fit, groups: Groups, out: list[Decision]) -> None:
        state = self.state
        bindings = sorted(self._place(groups, fit), key=lambda b: b.pod)
        state.mark_placed(gang)
        state.regroup(gang)  # pods left pending are placed on their own
        state.dirty_gangs.discard(gang.key)
        out.append(GangPermitted(gang=gang.key, bindings=tuple(bindings)))

    def singles(self, run: list[PodRecord], out: list[Decision]) -> None:
        """Place a run of identical pods on their own: as many as fit, in order."""
        state = self.state
        head = run[0]
        group = Group(head.sig, len(run))
        domains, topology = where(self.state, head)
        # A signature none of which fits stays so until some room changes.
        hopeless = ("alone", head.sig, head.info.priority, domains, topology)
        fit = self._fits.get(hopeless)
        if fit is None:
            free = state.nominated.view(head.info.priority, own=None)
            within = mask(self.state.table, domains)
            fit = self.placer.place([group], free, whole=False, within=within, topology=topology)
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

    def wait(
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

    def time_out(
        self, gang: GangRecord, reason: str, pending: list[PodKey], out: list[Decision]
    ) -> None:
        state = self.state
        deadline = gang.deadline_s(state.default_timeout_s)
        assert deadline is not None
        assert gang.started_s is not None
        timeout = deadline - gang.started_s
        gang.timed_out = True
        gang.started_s = None
        gang.reason = f"not placed within {timeout:g}s: {reason}"
        gang.tried = -1
        state.waiting_gangs.discard(gang.key)
        state.await_victims(gang)
        out.append(GangTimedOut(gang=gang.key, reason=gang.reason, pods=tuple(pending)))

    def _pool(self, priority: int) -> Pool:
        """The preemption candidates below `priority`, kept for the rest of the epoch."""
        key = (self.state.epoch, priority)
        pool = self._pools.get(key)
        if pool is None:
            pool = candidates_below(self.state, priority)
            self._pools = {key: pool}  # older epochs are stale
        return pool

    def _preempt(
        self, gang: GangRecord, spec: GangSpec, pending: list[PodKey], out: list[Decision]
    ) -> bool:
        """Evict the fewest whole lower-priority workloads that let the gang's first
        `min_count` pods fit, and nominate their room; False if no such set exists."""
        groups = [g for g, _ in groups_of(self.state, pending[: spec.min_count - gang.held])]
        domain = held_domain(self.state, gang)
        within = mask(self.state.table, domains_above(self.state, gang))

        def place(free: Ints) -> Placed | None:
            fit = self.placer.place(
                groups, free, topology=spec.topology, domain=domain, within=within, explain=False
            )
            if not fit.complete:
                return None
            return [(g, s.rows, s.counts) for g, s in zip(groups, fit.slots, strict=True)]

        return self.preempt_for(gang, spec.priority, groups, place, out)

    def preempt_for(
        self,
        unit: GangRecord,
        priority: int,
        groups: Sequence[Group],
        place: Callable[[Ints], Placed | None],
        out: list[Decision],
    ) -> bool:
        """Workload-aware preemption for `unit` (a gang, or a tree's root): see `preempt`."""
        if not self.state.holds_below(priority):
            return False
        found = preempt(self.state, self._pool(priority), unit, priority, groups, place)
        if found is not None:
            out.append(found)
        return found is not None
