"""An index of every live workload a replica reads about, with its last recorded state. Pure.

An admission replica reads the events of its own partitions (and, from before partitions, every
event). For the workloads it decides it keeps an `Engine`; for all it reads about it keeps this
ledger: the spec and cluster from `submitted`, and what the decisions published so far and the
facts reported since say about it. When a workload comes to decide here (a configuration change,
a route, a partition's history handed over), the ledger is what the replica adopts it from
(`state.adopt`); after a restart, replaying the stream into the ledger is the rebuild. A
workload whose LocalQueue went to a partition another replica decides stays here, away: what
still arrives about it here is forwarded there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import msgspec

from muster.admission.decisions import DEACTIVATED, Manifests
from muster.admission.facts import Recorded
from muster.api.model import Admission, PodSet, ReclaimablePod, Workload, WorkloadKey
from muster.core.check_retries import NO_RETRIES, retries_after_eviction
from muster.core.conditions import (
    ADMISSION_CHECK,
    PODS_READY_TIMEOUT,
    REACTIVATED,
    is_deactivation,
)
from muster.core.conditions import DEACTIVATED as KUEUE_DEACTIVATED
from muster.core.requeue_state import count_after_eviction, later, retry_end_s


class Phase(StrEnum):
    PENDING = "Pending"
    RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    EVICTING = "Evicting"  # evicted, holding its quota until eviction_completed
    BACKOFF = "Backoff"  # evicted for PodsReadyTimeout and stopped: waits out a back-off
    INACTIVE = "Inactive"  # deactivated


_HOLDING = frozenset({Phase.RESERVED, Phase.ADMITTED, Phase.EVICTING})
_DECIDING = frozenset({Phase.RESERVED, Phase.ADMITTED})  # where a check's state may evict
# Without quota to decide on, what a check tells is kept (the engine's `set_admission_check`):
# a Ready or Pending for the next reservation, a Retry or Rejected holds it unreserved while a
# ClusterQueue naming it would reserve it.
_WAITING = frozenset({Phase.EVICTING, Phase.BACKOFF, Phase.PENDING, Phase.INACTIVE})
_KEPT_WAITING = frozenset({"Ready", "Pending"})
_UNRESERVED = frozenset({Phase.BACKOFF, Phase.PENDING})


class CheckState(NamedTuple):
    """What a check last told about a workload since its last eviction: holding quota, what a
    rebuilt replica answers when no decision about it followed (`AdmissionState._told_checks`);
    without, a Ready or Pending its next reservation starts from."""

    state: str
    message: str
    at_s: float  # when it entered that state
    requeue_after_s: float = 0.0  # a Retry's requeueAfterSeconds


# Check states are only set for checks a reservation named, in the map that reservation gave its
# entry (`record`); every other entry shares this one (an empty map each was 64 MB at a million).
_NO_CHECK_STATES: dict[str, CheckState] = {}


@dataclass(slots=True)
class Entry:
    """One live workload as the stream tells it."""

    workload: Workload
    # `workload.key`, made once: the ledger, the log, the engine and `adopted` share it.
    key: WorkloadKey
    cluster: str
    generation: int
    submitted_s: float
    order: int  # arrival order, for adopting in FIFO order
    phase: Phase = Phase.PENDING
    decided: bool = False  # some decision about it has been recorded (a route aside)
    routed_queue: str = ""  # the LocalQueue its last recorded Routed event sent it to
    declared_only: bool = False  # a cluster refused its routed requests: never routed again
    admission: Admission | None = None
    checks: tuple[str, ...] = ()
    reserved_s: float = 0.0
    admitted_s: float | None = None
    pods_ready: bool = False
    unready_s: float | None = None  # when its pods lost the readiness they had (recovery)
    evicted_reason: str = ""
    evicted_message: str = ""
    evicted_s: float = 0.0
    # Evicted since its last reservation (Kueue's Evicted condition): a stop then resets nothing.
    evicted: bool = False
    eviction_id: str = ""  # the event id of its last `evicted`: what eviction_completed names
    stopped_s: float = 0.0
    # PodsReadyTimeout evictions since submitted or last reactivated (Kueue's
    # requeueState.count): handed to the engine on adoption, so a rebuilt replica's back-off
    # and backoffLimitCount count on instead of starting over.
    requeue_count: int = 0
    # A check's Retry with requeueAfterSeconds while it held quota: when it may queue again
    # (`core.lifecycle.requeue_end_s`), for the engine to wait as the live one did.
    retry_at_s: float | None = None
    pending_reason: str = ""
    pending_message: str = ""
    # Reported since its last eviction (Kueue's only reset); while none are, the one shared
    # empty map (never written).
    check_states: dict[str, CheckState] = field(default_factory=lambda: _NO_CHECK_STATES)
    # Its checks' retry counts (Kueue's retryCount, `core.check_retries`), as of its last
    # eviction; the one shared empty map until a check said Retry before one.
    retry_counts: Mapping[str, int] = field(default_factory=lambda: NO_RETRIES)
    # As submitted, for its `admitted` (payloads.MANIFEST_COPY_LIMIT), and the Job it stands
    # for: kept here only when no log keeps its `submitted` (`Ledger.submissions`).
    manifest_json: str = ""
    owner_manifest_json: str = ""
    active: bool = True  # spec.active as last set through the gateway (active_changed)
    # status.reclaimablePods as last told (reclaimable_pods); None: as submitted
    reclaimable_pods: tuple[ReclaimablePod, ...] | None = None
    # The partition whose events tell its story (its `submitted`'s, or where they were
    # forwarded); None for a workload stored before partitions (docs/events.md, "Partitions").
    partition: int | None = None
    submitted_id: str = ""  # the event id of its `submitted`, which its decisions name

    @property
    def queue_name(self) -> str:
        """The LocalQueue it waits or runs in now: where it was routed, else as declared."""
        return self.routed_queue or self.workload.queue_name

    @property
    def holds_quota(self) -> bool:
        return self.phase in _HOLDING


_NO_ENTRIES: Mapping[str, str] = {}  # read-only by its type, as every map of the model


class SharedParts:
    """One copy of each part of a Workload that many workloads have alike.

    Workloads of one Job template, or of one class of jobs, ask for the same pods: decoded,
    each had its own pod sets (structs and dicts, about 0.5 KiB), its own empty label and
    annotation maps, its own copy of its namespace and queue name. Pod sets are keyed by their
    encoding, so a workload gets an equal copy; that table is started over when full
    (`limit`), which costs only sharing.
    """

    def __init__(self, *, limit: int = 1 << 16) -> None:
        self._pod_sets: dict[bytes, tuple[PodSet, ...]] = {}
        self._limit = limit
        self._encoder = msgspec.msgpack.Encoder()

    def __len__(self) -> int:
        return len(self._pod_sets)

    def of(self, wl: Workload) -> Workload:
        """`wl` with the parts it has alike with workloads kept already taken from them."""
        meta = msgspec.structs.replace(
            wl.meta,
            namespace=sys.intern(wl.meta.namespace),
            labels=wl.meta.labels or _NO_ENTRIES,
            annotations=wl.meta.annotations or _NO_ENTRIES,
        )
        return msgspec.structs.replace(
            wl, meta=meta, queue_name=sys.intern(wl.queue_name), pod_sets=self._shared(wl)
        )

    def _shared(self, wl: Workload) -> tuple[PodSet, ...]:
        key = self._encoder.encode(wl.pod_sets)
        known = self._pod_sets.get(key)
        if known is None:
            if len(self._pod_sets) >= self._limit:
                self._pod_sets.clear()
            known = self._pod_sets[key] = wl.pod_sets
        return known


# Finished workloads remembered, newest last. A submitted event redelivered after its workload
# finished comes within minutes; by then far fewer workloads have finished than this.
FINISHED_KEPT = 100_000
# The latest submissions whose manifests are kept beside the log's copy: a workload is most
# often admitted in the round it arrived in or soon after, within this many arrivals.
RECENT_KEPT = 1024
RECENT_CHARS = 16 * 1024  # per submission, manifest and owner: at most 16 MiB kept in all


class Ledger:
    """Live workloads by key. Every method is idempotent: replaying an event changes nothing."""

    def __init__(
        self, *, finished_kept: int = FINISHED_KEPT, recent_kept: int = RECENT_KEPT
    ) -> None:
        self.entries: dict[WorkloadKey, Entry] = {}
        # A finished workload is not submitted again; a dict keeps them in finishing order, so
        # the oldest are forgotten first once there are more than `finished_kept`.
        self.finished: dict[WorkloadKey, None] = {}
        self.finished_kept = finished_kept
        self._order = 0
        self.shared = SharedParts()
        # Where a live workload's manifests are read back from: the log that keeps its
        # `submitted` (snapshot.CompactLog sets it). A manifest is the largest part of a
        # waiting workload; kept twice, it was a tenth of a replica's memory (issue 19).
        self.submissions: Callable[[WorkloadKey], tuple[str, str]] | None = None
        # The manifests of the latest submissions, oldest first, while a log keeps them all:
        # read back from the log, each `admitted` decoded its `submitted` again (issue 19).
        self._recent: dict[WorkloadKey, tuple[str, str]] = {}
        self._recent_kept = recent_kept

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: WorkloadKey) -> Entry | None:
        return self.entries.get(key)

    def live(self) -> Iterator[Entry]:
        """Every live workload, in arrival order."""
        return iter(sorted(self.entries.values(), key=lambda e: e.order))

    def submit(
        self,
        wl: Workload,
        *,
        cluster: str,
        generation: int,
        at_s: float,
        manifest_json: str = "",
        partition: int | None = None,
        owner_manifest_json: str = "",
        submitted_id: str = "",
    ) -> Entry | None:
        """Record a submission; None when the workload is already known (a duplicate)."""
        key = wl.key
        if key in self.entries or key in self.finished:
            return None
        self._order += 1
        entry = Entry(
            self.shared.of(wl),
            key=key,
            cluster=cluster,
            generation=generation,
            submitted_s=at_s,
            order=self._order,
            partition=partition,
            submitted_id=submitted_id,
        )
        if self.submissions is None:
            entry.manifest_json, entry.owner_manifest_json = manifest_json, owner_manifest_json
        else:
            self._keep_recent(key, manifest_json, owner_manifest_json)
        self.entries[key] = entry
        return entry

    def _keep_recent(self, key: WorkloadKey, manifest_json: str, owner_json: str) -> None:
        self._recent.pop(key, None)  # a workload deleted and submitted again: its newest only
        if len(manifest_json) + len(owner_json) > RECENT_CHARS:
            return  # the log's copy alone: large ones kept twice would be memory, not time
        self._recent[key] = (manifest_json, owner_json)
        if len(self._recent) > self._recent_kept:
            del self._recent[next(iter(self._recent))]

    def manifests(self, key: WorkloadKey, *, default_cluster: str) -> Manifests:
        """Live workload `key`'s manifests as submitted (empty when not known), and where."""
        entry = self.entries.get(key)
        if entry is None:
            return Manifests()
        workload_json, owner_json = entry.manifest_json, entry.owner_manifest_json
        if self.submissions is not None and not workload_json:
            recent = self._recent.get(key)
            workload_json, owner_json = self.submissions(key) if recent is None else recent
        return Manifests(
            workload_json=workload_json,
            owner_json=owner_json,
            origin_cluster=entry.cluster or default_cluster,
        )

    def finish(self, key: WorkloadKey) -> None:
        self._recent.pop(key, None)
        if self.entries.pop(key, None) is not None:
            self.finished[key] = None
            if len(self.finished) > self.finished_kept:
                del self.finished[next(iter(self.finished))]

    def remember_finished(self, keys: Iterable[str]) -> None:
        """Start from a snapshot's finished workloads (oldest first): their `submitted` is not
        in the snapshot, and a copy of it must not bring them back."""
        for key in keys:
            self.finished[WorkloadKey(key)] = None
        while len(self.finished) > self.finished_kept:
            del self.finished[next(iter(self.finished))]

    def delete(self, key: WorkloadKey) -> None:
        self._recent.pop(key, None)
        self.entries.pop(key, None)
        self.finished.pop(key, None)

    def pods_ready(self, key: WorkloadKey) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry.phase is Phase.ADMITTED:
            entry.pods_ready = True
            entry.unready_s = None

    def pods_unready(self, key: WorkloadKey, *, at_s: float) -> None:
        """Readiness told before was lost at `at_s` (waitForPodsReady's recovery)."""
        entry = self.entries.get(key)
        if entry is not None and entry.phase is Phase.ADMITTED and entry.pods_ready:
            entry.pods_ready = False
            entry.unready_s = at_s

    def requests_refused(self, key: WorkloadKey) -> None:
        """The cluster refused the requests of the alternative it was routed to: from now on
        it runs on its declared queue only."""
        entry = self.entries.get(key)
        if entry is not None:
            entry.declared_only = True

    def check_updated(
        self,
        key: WorkloadKey,
        check: str,
        state: CheckState,
        *,
        retry_at_s: float | None = None,
        counts_waiting: bool = False,
        kept: bool = False,
    ) -> None:
        """A check's state, kept while it is reserved or admitted (a Retry or Rejected not yet
        followed by its eviction is answered by a rebuilt replica); a Retry's `retry_at_s`
        while it holds quota (before its eviction or while its pods stop) moves that end only
        later, as the engine's `set_admission_check` does, and is kept until it queues again.
        Without quota (its back-off, or queued for quota) the Retry counts when
        `counts_waiting` (`core.requeue_state.retry_counts_waiting`, the engine's rule): it
        moves the back-off's end later, or holds a queued workload out until `retry_at_s`.
        A Ready or Pending without quota to decide on is kept, when `kept` (an AdmissionCheck
        the configuration has), for its next reservation to start from (`_reserve`); so is a
        Retry or Rejected told once its eviction began (its pods stopping), or while it is
        queued, backing off or inactive, which keeps it unreserved until that check says
        otherwise (the engine's `Heads`)."""
        entry = self.entries.get(key)
        if entry is None:
            return
        unreserved = entry.phase in _UNRESERVED
        if entry.phase in _WAITING:
            if kept:
                entry.check_states = {**entry.check_states, check: state}
            stopping = entry.phase is Phase.EVICTING and check in entry.checks
            if state.state == "Retry" and stopping:  # its requeueAt, as while it holds quota
                entry.retry_at_s = later(entry.retry_at_s, retry_at_s)
            if state.state != "Retry" or not unreserved:
                return
        if state.state == "Retry" and not entry.holds_quota:
            if not counts_waiting or retry_at_s is None:
                return
            if entry.phase is Phase.BACKOFF:
                entry.retry_at_s = later(entry.retry_at_s, retry_at_s)
            elif entry.phase is Phase.PENDING:
                entry.phase, entry.retry_at_s = Phase.BACKOFF, retry_at_s
            return
        if check not in entry.checks:
            return
        if entry.phase in _DECIDING:
            entry.check_states[check] = state
        if state.state == "Retry" and entry.holds_quota:
            entry.retry_at_s = later(entry.retry_at_s, retry_at_s)

    def set_active(
        self, key: WorkloadKey, active: bool, *, held_until_s: float | None = None
    ) -> None:
        """active_changed: a pending workload stopped is inactive at once, one holding quota
        once its pods are gone (`stopped`); an inactive one resumed is pending again, or held
        out of its queue until `held_until_s` (a Retry told since its last eviction: the
        engine's `set_active`)."""
        entry = self.entries.get(key)
        if entry is None:
            return
        entry.active = active
        if not active and entry.phase in (Phase.PENDING, Phase.BACKOFF):
            entry.phase = Phase.INACTIVE
            if not entry.evicted:  # evicted now (not before, since reserved): checks reset
                _reset_checks(entry)
            entry.evicted = True
            # Kueue evicts it (reason Deactivated) though it holds nothing, and drops its count.
            entry.requeue_count = count_after_eviction(entry.requeue_count, KUEUE_DEACTIVATED)
        elif active and entry.phase is Phase.INACTIVE:
            entry.requeue_count = 0  # as the engine's set_active (Kueue clears requeueState)
            _requeue(entry)
            if held_until_s is not None:
                entry.phase, entry.retry_at_s = Phase.BACKOFF, held_until_s

    def set_reclaimable(self, key: WorkloadKey, pods: tuple[ReclaimablePod, ...]) -> None:
        """reclaimable_pods: kept for the engine a rebuild starts (`_adopt`)."""
        entry = self.entries.get(key)
        if entry is not None:
            entry.reclaimable_pods = pods

    def completes(self, key: WorkloadKey, eviction_id: str) -> bool:
        """Whether an eviction_completed naming `eviction_id` completes `key`'s eviction now:
        it is being evicted, and that was its last eviction ("" names none: any, as before
        evictions were named)."""
        entry = self.entries.get(key)
        if entry is None or entry.phase is not Phase.EVICTING:
            return False
        return not eviction_id or not entry.eviction_id or entry.eviction_id == eviction_id

    def stopped(self, key: WorkloadKey, *, at_s: float) -> None:
        """eviction_completed: quota is released; back-off after a PodsReady timeout; a
        stopped workload (spec.active false) stays inactive."""
        entry = self.entries.get(key)
        if entry is None or entry.phase is not Phase.EVICTING:
            return
        entry.stopped_s = at_s
        if not entry.active:
            entry.phase = Phase.INACTIVE
            entry.admission = None
        elif entry.evicted_reason == PODS_READY_TIMEOUT or entry.retry_at_s is not None:
            entry.phase = Phase.BACKOFF  # until `requeued` (its back-off may be over already)
        else:
            _requeue(entry)

    def record(self, fact: Recorded) -> bool:
        """Apply a published decision about a workload; False when it is not about a live one.

        A decision naming another `submitted` than the entry's is about an earlier workload of
        that name, deleted since: its replica decided before it read the deletion and the
        submission after it, but stored the decision after both.
        """
        entry = self.entries.get(fact.key)
        if entry is None:
            return False
        if fact.submitted_id and entry.submitted_id and fact.submitted_id != entry.submitted_id:
            return False
        if fact.kind == "routed":
            # Where it waits, not what became of it: it still needs an answer.
            entry.routed_queue = fact.queue_name
            return True
        entry.decided = True
        match fact.kind:
            case "pending":
                if entry.phase is Phase.RESERVED:
                    _requeue(entry)  # a stopped queue took back quota only reserved
                    entry.check_states = _NO_CHECK_STATES  # Kueue evicts it: checks reset
                    entry.evicted = True
                # Interned: a queue's waiting workloads are told the same few messages.
                entry.pending_reason = sys.intern(fact.reason)
                entry.pending_message = sys.intern(fact.message)
            case "quota_reserved":
                if entry.holds_quota or fact.admission is None:
                    return True  # a late copy of what its `admitted` said already
                _reserve(entry, fact)
            case "admitted":
                if not entry.holds_quota and fact.admission is not None:
                    # It tells the reservation too (events.md, "Admitted with its reservation"),
                    # as a `quota_reserved` would have.
                    _reserve(entry, fact)
                if entry.phase is Phase.RESERVED:
                    entry.phase = Phase.ADMITTED
                    entry.admitted_s = fact.at_s
            case "evicted":
                if fact.reason == DEACTIVATED or entry.phase in _DECIDING:
                    _reset_checks(entry)
                    entry.evicted = True
                if fact.reason == DEACTIVATED:
                    entry.phase = Phase.INACTIVE
                    entry.admission = None
                    entry.requeue_count = count_after_eviction(
                        entry.requeue_count, fact.reason, deactivated=True
                    )
                elif entry.phase in (Phase.RESERVED, Phase.ADMITTED):
                    if is_deactivation(fact.reason):  # a check, the back-off limit: stays
                        entry.active = False  # inactive once its pods are gone, as if stopped
                    entry.phase = Phase.EVICTING
                    entry.evicted_reason, entry.evicted_message = fact.reason, fact.message
                    entry.evicted_s = fact.at_s
                    entry.eviction_id = fact.event_id
                    if fact.reason != ADMISSION_CHECK:
                        entry.retry_at_s = None  # evicted for another reason first
                    entry.requeue_count = count_after_eviction(entry.requeue_count, fact.reason)
            case "requeued":
                # The reactivation's own (`set_active` applied it) ends no wait: one a Retry
                # told since its last eviction began then goes on.
                if entry.phase in (Phase.EVICTING, Phase.BACKOFF) and fact.reason != REACTIVATED:
                    _requeue(entry)
        return True


def _reset_checks(entry: Entry) -> None:
    """Kueue's resetChecksOnEviction: what its checks told is forgotten, a Retry counted."""
    states = {check: s.state for check, s in entry.check_states.items()}
    entry.retry_counts = retries_after_eviction(entry.retry_counts, states)
    entry.check_states = _NO_CHECK_STATES


def _reserve(entry: Entry, fact: Recorded) -> None:
    entry.phase = Phase.RESERVED
    entry.admission = fact.admission
    entry.checks = fact.checks
    # A Ready or Pending told since its last eviction: those this reservation names start
    # from there (a Retry or Rejected held it unreserved while its ClusterQueue named it).
    entry.check_states = {
        c: s for c, s in entry.check_states.items() if c in fact.checks and s.state in _KEPT_WAITING
    }
    entry.reserved_s = fact.at_s
    entry.evicted = False
    entry.retry_at_s = None
    entry.admitted_s = None
    entry.pods_ready = False
    entry.unready_s = None
    entry.pending_reason = entry.pending_message = ""


def retry_ends_of(entry: Entry) -> dict[str, float]:
    """When each check told Retry since its last eviction asked it to queue again (its
    lastTransitionTime + requeueAfterSeconds; the engine's `WorkloadRecord.retry_ends`)."""
    return {
        check: end_s
        for check, s in entry.check_states.items()
        if s.state == "Retry"
        and (end_s := retry_end_s(s.at_s, s.requeue_after_s, now_s=s.at_s)) is not None
    }


def _requeue(entry: Entry) -> None:
    entry.phase = Phase.PENDING
    entry.admission = None
    entry.checks = ()
    entry.retry_at_s = None
    entry.admitted_s = None
    entry.pods_ready = False
    entry.unready_s = None
    entry.pending_reason = entry.pending_message = ""
