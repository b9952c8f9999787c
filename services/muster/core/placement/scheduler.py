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
from muster.core.placement.fit import NO_CODE, Fit, Group, Placer
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
    PlacementPreempted,
    PodInfo,
    PodKey,
    Scoring,
    TopologyRequest,
)
from muster.core.placement.nodes import Bools, Ints
from muster.core.placement.state import (
    WAITING_FOR_SPEC,
    GangRecord,
    Nomination,
    PlacementState,
    PodRecord,
    UnitOrder,
)
from muster.core.placement.treefit import Branch, Leaf, flattened, place_tree
from muster.core.placement.victims import Pool, candidates_below, pick_victims, usable_positions

DEFAULT_TIMEOUT_S = 300.0

Groups = list[tuple[Group, list[PodKey]]]  # pods by signature, each group's pods by key
Domains = tuple[tuple[str, str], ...]  # (node label, value) pairs a unit must stay inside
Where = tuple[Domains, TopologyRequest | None]  # and a label whose one value it must choose


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
        version = (self._state.table.room_version, self._state.nomination_version)
        if version != self._fits_version:
            self._fits.clear()
            self._fits_version = version

    def next_deadline_s(self) -> float | None:
        """The earliest deadline of a waiting gang, for the caller's timer; None if none."""
        return self._state.next_deadline_s()

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
        return self._state.free_of(node)

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
                where = self._where(unit)
                if (
                    unit.sig is not head.sig
                    or unit.info.priority != head.info.priority
                    or (run and where != inside)
                ):
                    yield run
                    run = []
                inside = where
                run.append(unit)
                continue
            if run:
                yield run
                run = []
            yield unit
        if run:
            yield run

    def _groups(self, pods: Sequence[PodKey]) -> Groups:
        """`pods` by signature, largest first; each group's pods in key order."""
        by_sig: dict[object, list[PodKey]] = {}
        for key in pods:
            by_sig.setdefault(self._state.pods[key].sig.key, []).append(key)
        groups = [(Group(self._state.sigs[s], len(keys)), keys) for s, keys in by_sig.items()]
        return sorted(groups, key=lambda group: group[0].sig.order)

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
            state.push_deadline(gang)
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
        domain = self._held_domain(gang)
        inside = self._domains_above(gang)
        unheld = self._unheld_above(gang)
        tries = [pending, pending[:need]] if len(pending) > need else [pending]
        free: Ints | None = None
        fit: Fit | None = None
        for pods in tries:
            groups = self._groups(pods)
            plain = [g for g, _ in groups]
            # Gangs of the same shape fit alike until some room changes: try each shape once.
            shape = tuple((g.sig, g.count) for g in plain)
            key = (shape, spec.topology, domain, inside, spec.priority)
            fit = self._fits.get(key) if gang.nomination is None else None
            if fit is None:
                if free is None:
                    free = self._state.view(spec.priority, own=gang.key)
                if unheld:
                    fit = self._fit_inside(gang, groups, unheld, free, within=self._mask(inside))
                else:
                    fit = self._placer.place(
                        plain,
                        free,
                        topology=spec.topology,
                        domain=domain,
                        within=self._mask(inside),
                    )
                if gang.nomination is None:
                    self._fits[key] = fit
            if fit.complete:
                break
        assert fit is not None
        return fit, groups

    def _held_domain(self, gang: GangRecord) -> str | None:
        """The value of a required topology label where the gang's bound pods already are."""
        spec = gang.spec
        if spec is None or spec.topology is None or not spec.topology.required or not gang.held:
            return None
        return self._label_held(gang, spec.topology.key)

    def _label_held(self, record: GangRecord, label: str) -> str | None:
        """The value of node label `label` where the first pod held under `record` (a gang,
        or a CompositePodGroup's whole subtree) is; None when none holds room."""
        table = self._state.table
        for leaf in trees.leaves(self._state, record):
            if not leaf.held:
                continue
            for key in sorted(leaf.pods):
                node = self._state.pods[key].node
                row = None if node is None else table.index.get(node)
                info = None if row is None else table.infos[row]
                if info is not None:
                    return info.labels.get(label)
        return None

    def _domains_above(self, gang: GangRecord) -> Domains:
        """(label, value) of each CompositePodGroup above `gang` whose tree holds a domain of
        its topology: the gang's pods must stay inside all of them."""
        found: list[tuple[str, str]] = []
        for composite in trees.ancestors(self._state, gang):
            spec = composite.composite
            if spec is None or spec.topology is None:
                continue
            value = self._label_held(composite, spec.topology.key)
            if value is not None:
                found.append((spec.topology.key, value))
        return tuple(found)

    def _unheld_above(self, gang: GangRecord) -> list[GangRecord]:
        """The CompositePodGroups above `gang` with a topology but no held domain (their tree
        holds nothing, or only on nodes gone since), innermost first."""
        return [
            composite
            for composite in trees.ancestors(self._state, gang)
            if composite.composite is not None
            and composite.composite.topology is not None
            and self._label_held(composite, composite.composite.topology.key) is None
        ]

    def _fit_inside(
        self,
        gang: GangRecord,
        groups: Groups,
        unheld: list[GangRecord],
        free: Ints,
        *,
        within: Bools | None,
    ) -> Fit:
        """`gang` placed as the one child of the CompositePodGroups `unheld` above it, each
        choosing a domain of its topology anew."""
        assert gang.spec is not None
        node: Leaf | Branch = Leaf(key=gang.key, tries=(groups,), topology=gang.spec.topology)
        for composite in unheld:
            assert composite.composite is not None
            node = Branch(
                key=composite.key,
                children=(node,),
                min_children=1,
                topology=composite.composite.topology,
            )
        found = place_tree(self._placer, node, free, within=within)
        if found.complete:
            return found.leaves[gang.key].fit
        wanted = sum(g.count for g, _ in groups)
        return Fit(slots=(), placed=0, wanted=wanted, reason=found.reason)

    def _where(self, pod: PodRecord) -> Where:
        """Where a pod placed on its own must go: inside its gang's held domain (required
        topology) and those of the CompositePodGroups above it; in one domain of the innermost
        CompositePodGroup above whose tree holds none (on nodes gone since)."""
        gang_key = pod.info.gang
        gang = None if gang_key is None else self._state.gangs.get(gang_key)
        if gang is None or gang.spec is None:
            return (), None
        own = self._held_domain(gang)
        above = self._domains_above(gang)
        topology = gang.spec.topology
        domains = ((topology.key, own), *above) if own is not None and topology else above
        unheld = self._unheld_above(gang)
        return domains, unheld[0].composite.topology if unheld and unheld[0].composite else None

    def _mask(self, domains: Domains) -> Bools | None:
        if not domains:
            return None
        table = self._state.table
        mask = np.ones(table.capacity, dtype=np.bool_)
        for label, value in domains:
            column = table.label(label)
            mask &= column.codes == column.vocab.get(value, NO_CODE)
        return mask

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
        domains, topology = self._where(head)
        # A signature none of which fits stays so until some room changes.
        hopeless = ("alone", head.sig, head.info.priority, domains, topology)
        fit = self._fits.get(hopeless)
        if fit is None:
            free = state.view(head.info.priority, own=None)
            within = self._mask(domains)
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
        spec = gang.spec
        assert spec is not None
        timeout = state.default_timeout_s if spec.timeout_s is None else spec.timeout_s
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
        groups = [g for g, _ in self._groups(pending[: spec.min_count - gang.held])]
        domain = self._held_domain(gang)
        within = self._mask(self._domains_above(gang))

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
        """Workload-aware preemption for `unit` (a gang, or a tree's root), whose pods are
        `groups` and which `place` places on a matrix of free room: evict the fewest victims
        (a pod, a group or a tree, as their disruption mode says; spared most important
        first) that make it fit, and nominate their room. False if no such set exists."""
        state = self._state
        if not state.holds_below(priority):
            return False
        base = state.view(priority, own=unit.key)
        pool = self._pool(priority)
        usable = usable_positions(self._state, pool, groups)  # in eviction order

        def placing(victims: Sequence[int]) -> Sequence[int] | None:
            if isinstance(victims, range):  # a prefix, as a slice: no list of them built
                positions = usable[victims.start : victims.stop]
            else:
                positions = usable[np.asarray(victims, dtype=np.int64)]
            placed = place(pool.room(base, positions))
            if placed is None:
                return None
            rows = np.concatenate([rows for _, rows, _ in placed])
            touched = np.flatnonzero(np.isin(positions, pool.touching(positions, rows)))
            return [victims[n] for n in touched.tolist()]

        chosen = pick_victims(len(usable), placing)
        if chosen is None:
            return False
        positions = usable[np.asarray(chosen, dtype=np.int64)]
        placed = place(pool.room(base, positions))
        assert placed is not None
        victims = [pool.candidates[n] for n in positions.tolist()]
        usage = [
            (state.table.name(row), group.sig, count)
            for group, rows, counts in placed
            for row, count in zip(rows.tolist(), counts.tolist(), strict=True)
        ]
        state.nominate(unit, Nomination(priority, usage, {k for v in victims for k in v.pods}))
        owners = sorted(victim.owner for victim in victims)
        every_pod = sorted(k for owner in owners for k in state.owned.get(owner, ()))
        unit.reason = f"preempting {len(owners)} workload(s): {', '.join(owners)}"
        out.append(PlacementPreempted(gang=unit.key, victims=tuple(owners), pods=tuple(every_pod)))
        return True

    # --- CompositePodGroup trees -----------------------------------------------------------------

    def _decide_tree(self, root: GangRecord, now_s: float, out: list[Decision]) -> None:
        """Place a tree not placed yet in one decision: every group at quorum, or nothing."""
        state = self._state
        if root.placed:
            return
        pending = sum(len(state.pending(leaf)) for leaf in trees.leaves(state, root))
        groups = trees.groups_below(state, root)
        if not pending:
            state.waiting_gangs.discard(root.key)
            return
        node, reason = self._tree(root)
        assert root.composite is not None
        if node is None:
            state.waiting_gangs.discard(root.key)
            self._wait(root, reason, pending, root.composite.min_groups, out, groups=groups)
            return
        free = state.view(root.priority, own=root.key)
        fit = place_tree(self._placer, node, free)
        if fit.complete:
            for key in sorted(fit.leaves):
                leaf = fit.leaves[key]
                self._permit_gang(state.gangs[key], leaf.fit, leaf.groups, out)
            self._tree_placed(root)
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
        root.reason = ""
        root.tried = -1
        state.waiting_gangs.discard(root.key)
        state.drop_nomination(root)
        for leaf in trees.leaves(state, root):
            if not leaf.placed:
                state.regroup(leaf)  # its own gang from now on, inside the tree's domains

    def _tree(self, record: GangRecord) -> tuple[Leaf | Branch | None, str]:
        """The part of the tree under `record` at quorum, bottom-up (a gang: `min_count` of its
        pods present; a CompositePodGroup: `min_groups` of its children at quorum), or None and
        why not."""
        state = self._state
        spec = record.spec
        if record.composite is None:
            if spec is None:
                return None, f"{record.key}: {WAITING_FOR_SPEC}"
            pending = state.pending(record)
            need = spec.min_count - record.held
            if len(pending) < need:
                return None, f"{record.key}: {len(pending) + record.held} of {spec.min_count} pods"
            if need <= 0 and not pending:
                return None, ""
            tries = [pending, pending[:need]] if 0 < need < len(pending) else [pending]
            groups = tuple(self._groups(pods) for pods in tries)
            return Leaf(key=record.key, tries=groups, topology=spec.topology), ""
        composite = record.composite
        children: list[Leaf | Branch] = []
        short: list[str] = []
        for key in sorted(record.children):
            child, why = self._tree(state.gangs[key])
            if child is not None:
                children.append(child)
            elif why:
                short.append(why)
        if len(children) < composite.min_groups:
            reason = f"{len(children)} of {composite.min_groups} groups of {record.key} ready"
            return None, f"{reason}: {'; '.join(short)}" if short else reason
        branch = Branch(
            key=record.key,
            children=tuple(children),
            min_children=composite.min_groups,
            topology=composite.topology,
        )
        return branch, ""

    def _preempts(self, root: GangRecord) -> bool:
        return all(
            leaf.spec is None or leaf.spec.preempts for leaf in trees.leaves(self._state, root)
        )

    def _preempt_tree(self, root: GangRecord, node: Leaf | Branch, out: list[Decision]) -> bool:
        """Workload-aware preemption with the whole tree (at quorum) as the preemptor."""
        quorum = _at_minimum(node)
        groups = [g for leaf in _leaves(quorum) for g, _ in leaf.tries[-1]]

        def place(free: Ints) -> Placed | None:
            fit = place_tree(self._placer, quorum, free, explain=False)
            return flattened(fit) if fit.complete else None

        return self._preempt_for(root, root.priority, groups, place, out)


Placed = list[tuple[Group, Ints, Ints]]  # each group placed: its rows and pods per row


def _at_minimum(node: Leaf | Branch) -> Leaf | Branch:
    """`node` asking only for its quorum: each gang its first `min_count` pods."""
    if isinstance(node, Leaf):
        return Leaf(key=node.key, tries=node.tries[-1:], topology=node.topology)
    children = tuple(_at_minimum(child) for child in node.children)
    return Branch(
        key=node.key, children=children, min_children=node.min_children, topology=node.topology
    )


def _leaves(node: Leaf | Branch) -> Iterator[Leaf]:
    if isinstance(node, Leaf):
        yield node
        return
    for child in node.children:
        yield from _leaves(child)
