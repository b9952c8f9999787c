"""One admission replica's state: the engine for its shard, the ledger of all workloads. Pure.

Two modes, one after the other:
- *replay* (`replay`): the rebuild. Configuration goes into the engine, workloads and every
  recorded decision into the ledger; nothing is decided and nothing is put in the engine.
- *owning* (`take_ownership`, then `apply` and `decide`): the engine holds the workloads of
  this shard, adopted from the ledger, and decides for them.

A workload's queue timestamp is the time of its `submitted` event (Kueue orders by creation
time), so a replica that adopts it after a restart or a shard move orders it the same way.

Finished and deleted workloads leave the engine (`Engine.forget`) once their round's events are
translated: nothing needs them afterwards. A redelivered `submitted` or `finished` is stopped by
the ledger and by `adopted`, and a rebuild adopts live workloads only.

Admission fair sharing: each LocalQueue's usage is fed from the facts' times (a recorded
QuotaReserved starts a run, the `finished`/`deleted`/`eviction_completed` that released it ends
it), in replay as live, so every replica has the same usage; a snapshot carries what finished
workloads left (`ended_usage`, `restore_usage`).

Routing (docs/routing.md): the engine routes workloads with alternatives; a recorded `routed`
puts an adopted workload back on the queue it was routed to before anything else is restored,
and is not announced again. A shard routes only among the alternatives in its own cohort trees
(`Sharding.foreign_alternatives`); the Routed message names the others.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Final

import msgspec

from muster.admission.fact_application import FactApplication
from muster.admission.facts import ConfigRefusedError, Fact, PartitionRecord, Term
from muster.admission.homes import Handover, Move, queue_key
from muster.admission.ledger import Entry, Phase, retry_ends_of
from muster.admission.replica_parts import PENDING_PHASE
from muster.admission.snapshot import EndedUsage
from muster.admission.usage_carry import valid_usage
from muster.api.model import WorkloadKey
from muster.core.events import Event, EventType
from muster.core.lifecycle import assignment_of
from muster.core.quota import FlavorResource
from muster.core.reclaim import NONE, reclaimable_of, reclaimed_usage, requested_usage
from muster.core.records import local_queue_of

# Workloads adopted between two of `taking_ownership`'s steps: a few ms of work each.
ADOPT_STEP: Final = 128
log = logging.getLogger(__name__)


class AdmissionState(FactApplication):
    """The engine of shard `shard` of `shards` and the ledger of the workloads it reads about.

    Built in layers (`replica_parts`, `decision_reads`, `fact_application`); this one holds
    the modes, fair sharing's runs, partition records and adoption."""

    # --- rebuild --------------------------------------------------------------------------

    def replay(self, fact: Fact | None, *, sequence: int, cluster: str = "") -> bool:
        """Record one event of history (from `cluster`); decides nothing. Call in stream order.
        False when it was refused (a configuration event of a cluster that does not own the
        object: dead-lettered when it was consumed), so the snapshot log does not keep it."""
        self.last_sequence = max(self.last_sequence, sequence)
        try:
            counted = self.counted(fact, cluster=cluster) if fact is not None else None
        except ConfigRefusedError as exc:
            log.info("rebuild skips config event #%d: %s", sequence, exc)
            return False
        if counted is not None:
            self._record(counted, now_s=0.0)
        return True

    def take_ownership(self, *, now_s: float) -> list[Event]:
        """End the rebuild: adopt the live workloads of this shard, then run one round.

        Returns what adoption and the round decided that was not recorded yet (a replica that
        died between consuming and publishing left it undecided). A workload whose story is
        stored away from its home is to be forwarded there (`moves`) again: its replica may have
        died before it had, and a story forwarded twice changes nothing.
        """
        return [event for step in self.taking_ownership(now_s=now_s) for event in step]

    def taking_ownership(self, *, now_s: float, step: int | None = None) -> Iterator[list[Event]]:
        """`take_ownership` in steps: what each `step` workloads adopted reported, then what
        the round decided. A shell runs its other tasks between steps (the lease's renewal:
        on a slow host one stretch of a large backlog outlasted the lease's TTL); none of them
        may change the state meanwhile. `step`: ADOPT_STEP when None."""
        step = step or ADOPT_STEP
        self.owning = True
        # The rebuild read its partitions after every record it replayed: only a record
        # applied from now on calls for another (left set, every batch rebuilt again).
        self.repartitioned = False
        self.engine.settle()
        self.homes.update(self.engine)
        self.trees.reset(self.engine)
        events: list[Event] = []
        for i, entry in enumerate(self.ledger.live(), start=1):
            home = self.home_of(entry)
            if entry.partition is not None and entry.partition != home:
                self.moves[entry.key] = Move(entry.key, home)
            if home in self.sharding.owned:
                events += self._adopt(entry)
            if i % step == 0:
                yield events
                events = []
        yield events + self.decide(now_s=now_s)

    # --- owning ---------------------------------------------------------------------------

    def apply(self, fact: Fact, *, now_s: float, story: bool = False) -> list[Event]:
        """Apply one consumed fact; returns what the engine reported (decide comes after).

        `story`: part of a workload's story forwarded here (forwarding.py): a decision in it is
        history even when this replica made it once.
        """
        return self._record(fact, now_s=now_s, story=story)

    def decide(self, *, now_s: float) -> list[Event]:
        """One admission round: admit what fits, preempt where allowed; fire due timers.

        Every workload that arrived since the last round gets an answer: when the round said
        nothing about it (it waits in a group behind a head that cannot be admitted), it is
        reported pending for its group's reason, as Kueue reports each workload it tried.
        """
        events = self.engine.schedule(now_s=now_s)
        fresh, self._fresh = self._fresh, []
        told = {e.object for e in events if e.type is not EventType.ROUTED}  # where, not whether
        for key in fresh:
            if key not in told:
                events += self._pending_answer(key, now_s=now_s)
        return events + self.dispatch.after_schedule(self.engine, events, now_s=now_s)

    def settled(self) -> bool:
        """Whether deciding now could tell nothing new, the engine being as the last round left
        it (the caller's part): no workload of this shard arrived or ended since, and no
        MultiKueue dispatch waits."""
        return not self._fresh and not self._done and self.dispatch.idle

    def _pending_answer(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        if self.engine.phase(key) != PENDING_PHASE:
            return []
        r = self.engine.records[key]
        if r.pending_message:
            return []  # told already
        waiting = next(
            (c for c in self.engine.workload(key).conditions if c.type == "QuotaReserved"), None
        )
        if waiting is None or waiting.status != "False" or not waiting.message:
            return []
        self.engine.restore_pending(key, reason=waiting.reason, message=waiting.message)
        return [
            Event(
                time=now_s,
                type=EventType.PENDING,
                object=key,
                reason=waiting.reason,
                message=waiting.message,
            )
        ]

    def next_wakeup_s(self) -> float | None:
        wakeups = [self.engine.next_wakeup_s(), self.dispatch.next_wakeup_s()]
        return min((t for t in wakeups if t is not None), default=None)

    # --- fair sharing runs ----------------------------------------------------------------

    def _run_started(self, key: WorkloadKey) -> None:
        """A recorded QuotaReserved starts the workload's run in its LocalQueue's usage at
        the recorded time: a rebuild learns finished workloads' usage from their history (the
        engine never holds them). The engine's own start of the same run changes nothing."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return  # not configured: no ledger look-up either
        entry = self.ledger.get(key)
        if entry is None or entry.admission is None or not entry.holds_quota:
            return
        wl = entry.workload
        local_queue = local_queue_of(wl.meta.namespace, entry.routed_queue or wl.queue_name)
        assert entry.admission is not None
        book.start(
            key,
            local_queue,
            self._held(entry),
            at_s=entry.reserved_s,
            config=fair.admission_fair_sharing,
            penalized=self.engine.state.config.usage_based(entry.admission.cluster_queue),
            requested=requested_usage(
                assignment_of(entry.admission).pod_sets,
                entry.workload.pod_sets,
                self._reclaimable(entry),
            ),
        )

    def _run_resized(self, key: WorkloadKey, *, at_s: float) -> None:
        """Pods given back (or taken back) change what `key`'s run holds from the fact's time,
        before the engine changes it at the round's (its own change is then a no-op): a live
        replica and a rebuilt one record the same instant."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        entry = self.ledger.get(key)
        if entry is None or entry.admission is None or not entry.holds_quota:
            return
        book.resize(key, self._held(entry), at_s=at_s, config=fair.admission_fair_sharing)

    def _held(self, entry: Entry) -> Mapping[FlavorResource, int]:
        """What `entry`'s admission holds, less its reclaimable pods (as the engine's record:
        `WorkloadRecord.usage`), so the usage a rebuild replays is the live one's."""
        assert entry.admission is not None
        assignment = assignment_of(entry.admission)
        reclaimable = self._reclaimable(entry)
        if not reclaimable:
            return assignment.usage
        return reclaimed_usage(assignment.pod_sets, entry.workload.pod_sets, reclaimable)

    def _reclaimable(self, entry: Entry) -> Mapping[str, int]:
        """`entry`'s reclaimable pods as the engine counts them (none without the gate)."""
        told = entry.reclaimable_pods
        if not told or not self.engine.state.config.kueue.reclaimable_pods:
            return NONE
        return reclaimable_of(told)

    def _run_stopped(self, key: WorkloadKey, *, at_s: float, retire: bool = False) -> None:
        """The fact that released `key`'s quota ends its run at the fact's time, before the
        engine releases it at the round's (its own stop is then a no-op): a live replica and
        a rebuilt one record the same instant. `retire`: the workload is gone (finished,
        deleted), what its runs left is its LocalQueue's from now on (a snapshot keeps it)."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        book.stop(key, at_s=at_s, config=fair.admission_fair_sharing)
        if retire:
            book.retire(key, config=fair.admission_fair_sharing)

    def ended_usage(self) -> tuple[EndedUsage, ...]:
        """What retired workloads left in the usage of the LocalQueues of this replica's
        partitions, for its snapshot (they are not in it)."""
        book = self.engine.state.admission_usage
        if book is None:
            return ()
        out: list[EndedUsage] = []
        for local_queue in sorted(book.queues):
            ended = book.ended(local_queue)
            namespace, _, name = local_queue.partition("/")
            partition = self.sharding.partition_of_local_queue(namespace, name)
            if ended is not None and partition in self.sharding.owned:
                at_s, consumed = ended
                out.append(
                    EndedUsage(
                        local_queue=local_queue, partition=partition, at_s=at_s, consumed=consumed
                    )
                )
        return tuple(out)

    def restore_usage(
        self, usage: Sequence[EndedUsage], partitions: Collection[int], *, sequence: int = 0
    ) -> None:
        """Start from what a snapshot (of stream sequence `sequence`) says retired workloads
        left in the LocalQueues of `partitions` (before its events are replayed: their runs
        add to it; so do the records carrying usage there after it: usage_carry.py)."""
        self.usage_carry.restored_from(dict.fromkeys(partitions, sequence))
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        for ended in usage:
            if ended.partition not in partitions:
                continue
            if not valid_usage(ended.at_s, ended.consumed):
                log.warning("snapshot usage of LocalQueue %s skipped: at_s %r, consumed %r",
                            ended.local_queue, ended.at_s, ended.consumed)  # fmt: skip
                continue
            book.restore_ended(
                ended.local_queue,
                ended.at_s,
                ended.consumed,
                config=fair.admission_fair_sharing,
            )

    # --- partitions -----------------------------------------------------------------------

    def _partition_record(self, record: PartitionRecord) -> None:
        """A record fences its partition; one naming a shard moves the partition there."""
        self.fences[record.partition] = max(self.fences.get(record.partition, 0), record.sequence)
        if record.takeover is not None:
            self._taken_over(record.partition, record.takeover)
        if record.shard is not None:
            self.partitions.move(record.partition, record.shard)
            self.repartitioned = self.sharding.refresh() or self.repartitioned
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is not None and fair.admission_fair_sharing is not None:
            owned = self.sharding.owned
            self.usage_carry.apply(record, book, fair.admission_fair_sharing, owned=owned)

    def _taken_over(self, partition: int, term: Term) -> None:
        """A term of `term.shard` began deciding `partition` (takeover.py): a later term of
        this replica's shard than its own supersedes it on a partition it decides."""
        mine = self.term
        if (
            mine is not None
            and term.shard == mine.shard
            and term.number > mine.number
            and partition in self.sharding.owned
            and not self.superseded
        ):
            self.superseded = f"partition {partition} was taken over by a later {term}"

    def _rebalance(self, *, now_s: float) -> list[Event]:
        """After a configuration change: the LocalQueues it moved to another partition take
        their workloads along (homes.py). Adopt those whose home is now one of ours, drop
        those that left (their story is forwarded to their new home), and fetch the stories
        of LocalQueues that came from another replica's partition (`handovers`)."""
        if not self.owning:
            return []
        self.trees.note(self.engine)  # for the views: a tree that left and came back
        moved = self.homes.update(self.engine)
        if not moved:
            return []
        owned = self.sharding.owned
        for queue, (old, new) in sorted(moved.items()):
            if new.partition in owned and old.partition not in owned and old.in_tree:
                self.handovers.append(Handover(queue, old.partition, new.partition))
        events: list[Event] = []
        for entry in self.ledger.live():
            if queue_key(entry.workload.meta.namespace, entry.queue_name) not in moved:
                continue
            home = self.home_of(entry)
            if entry.partition is not None and entry.partition != home:
                self.moves[entry.key] = Move(entry.key, home)
            if home in owned and entry.key not in self.adopted:
                events += self._adopt(entry)
            elif home not in owned and entry.key in self.adopted:
                self.adopted.discard(entry.key)
                self.notes.pop(entry.key, None)
                self.engine.delete(entry.key, now_s=now_s)
                self._done.append(entry.key)
                events = [e for e in events if e.object != entry.key]
        return events

    # --- adoption -------------------------------------------------------------------------

    def _adopt(self, entry: Entry) -> list[Event]:
        """Put a live workload into the engine as the ledger records it.

        Returns what the engine reported only for a workload nothing was decided about yet
        (it may arrive admitted); otherwise the recorded decisions stand and are not redone.
        """
        engine, key = self.engine, entry.key
        wl = ours = self._routable(entry)  # only the alternatives this shard routes to
        # A copy only where it differs: at a million pending, one per workload was 0.1 GiB.
        if entry.decided and wl.admission is not None:
            wl = msgspec.structs.replace(wl, admission=None)
        if entry.phase is Phase.INACTIVE and wl.active:
            wl = msgspec.structs.replace(wl, active=False)
        if entry.reclaimable_pods is not None:  # told since it was submitted
            wl = msgspec.structs.replace(wl, reclaimable_pods=entry.reclaimable_pods)
        events = engine.submit(wl, now_s=entry.submitted_s, key=key)
        self.adopted.add(key)
        if entry.requeue_count or entry.retry_at_s is not None:  # before its eviction's
            engine.restore_requeues(key, entry.requeue_count, retry_at_s=entry.retry_at_s)
        if entry.phase is Phase.BACKOFF and entry.admission is None and entry.retry_at_s:
            # Held out of its queue by a check's Retry told while it waited for quota.
            engine.restore_held_out(key, entry.retry_at_s)
        if entry.routed_queue:
            # Back where its last Routed sent it, before its quota is restored; announced then.
            engine.restore_routed(key, queue_name=entry.routed_queue)
            events = [e for e in events if e.type is not EventType.ROUTED]
        if entry.admission is None:
            self._restore_told_checks(entry)
        if not entry.decided:
            self._fresh.append(key)
            return events + self._stays_unrouted(entry, ours, entry.submitted_s)
        if entry.admission is not None and entry.phase in (
            Phase.RESERVED,
            Phase.ADMITTED,
            Phase.EVICTING,
            Phase.BACKOFF,
        ):
            engine.restore_reserved(
                key, entry.admission, checks=entry.checks, now_s=entry.reserved_s
            )
            if entry.admitted_s is not None:
                engine.restore_admitted(key, now_s=entry.admitted_s)
                if entry.pods_ready or entry.unready_s is not None:
                    engine.pods_ready(key, now_s=entry.admitted_s)
                if entry.unready_s is not None:  # its recoveryTimeout counts from then
                    engine.pods_unready(key, now_s=entry.unready_s)
            if entry.phase in (Phase.EVICTING, Phase.BACKOFF):
                engine.restore_evicted(
                    key,
                    reason=entry.evicted_reason,
                    message=entry.evicted_message,
                    now_s=entry.evicted_s,
                )
            if entry.phase is Phase.BACKOFF:
                # Its back-off over by the time its pods were gone, it was requeued then; the
                # `requeued` is not stored (the replica stopped first): it is said now.
                events = engine.stopped(key, now_s=entry.stopped_s)
            if not entry.active:  # stopped while it held quota: inactive once evicted
                engine.set_active(key, False, now_s=entry.evicted_s)
            self._restore_told_checks(entry)  # after its eviction, which resets them
            if entry.phase in (Phase.RESERVED, Phase.ADMITTED) and entry.check_states:
                return self._told_checks(entry)
            if entry.phase is Phase.RESERVED and not entry.checks:
                return self._admit_now(entry)
            if entry.phase is Phase.BACKOFF:
                return [e for e in events if e.type is EventType.REQUEUED]
        elif entry.phase is Phase.PENDING and entry.pending_message:
            # A preemptor recorded as waiting for its victims stays parked: no second preemption.
            engine.restore_pending(key, reason=entry.pending_reason, message=entry.pending_message)
        return []

    def _restore_told_checks(self, entry: Entry) -> None:
        """What its checks told since its last eviction while it held no quota, for its next
        reservation to start from (or to be set aside for), as the live engine's did; and
        their retry counts as of that eviction (after it: it counts from states a rebuild
        does not have)."""
        if entry.retry_counts:
            self.engine.restore_retry_counts(entry.key, entry.retry_counts)
        if entry.check_states and entry.phase not in (Phase.RESERVED, Phase.ADMITTED):
            told = {check: s.state for check, s in entry.check_states.items()}
            self.engine.restore_told_checks(
                entry.key, told, evicted=entry.evicted, retry_ends=retry_ends_of(entry)
            )

    def _admit_now(self, entry: Entry) -> list[Event]:
        """Reserved with no check to pass, yet not admitted: the round that reserved it admitted
        it too, but its replica died between publishing the two (they go in separate waves).
        Admitted now, or it would hold its quota and never start."""
        self.engine.restore_admitted(entry.key, now_s=entry.reserved_s)
        cq = entry.admission.cluster_queue if entry.admission is not None else ""
        message = f"The workload is admitted to ClusterQueue {cq}"
        return [
            Event(
                time=entry.reserved_s,
                type=EventType.ADMITTED,
                object=entry.key,
                reason="Admitted",
                message=message,
            )
        ]

    def _told_checks(self, entry: Entry) -> list[Event]:
        """What the checks told since the reservation, answered again: a Retry or Rejected
        evicts it (no eviction was stored after it, or the entry would be evicting: its replica
        died first, or none ran when it was told), else Ready ones count (they may admit it).
        As Kueue's workload controller, which acts on the Workload's check states whenever it
        reconciles, not on the update that set them."""
        told = sorted(entry.check_states.items())
        # Kueue's order: a Rejected check deactivates it, else a Retry evicts it.
        answered = next(
            (picked for wanted in ("Rejected", "Retry", "Ready")
             if (picked := [(c, s) for c, s in told if s.state == wanted])),
            [],
        )  # fmt: skip
        events: list[Event] = []
        for check, s in answered:
            events += self.engine.set_admission_check(
                entry.key,
                check,
                s.state,
                message=s.message,
                requeue_after_s=s.requeue_after_s,
                since_s=s.at_s,
                now_s=max(s.at_s, entry.reserved_s),
            )
        return events
