"""Kueue's Admission Fair Sharing: a LocalQueue's recent usage, and the order it gives.

A ClusterQueue with `admissionScope.admissionMode: UsageBasedAdmissionFairSharing` tries the
workloads of the LocalQueue that used least recently first, so that one team's flood does not
starve another team sharing the ClusterQueue. Rules as in Kueue (kubernetes-sigs/kueue at
ff69552, v0.20.0-devel: pkg/util/admissionfairsharing, pkg/cache/queue/afs, the LocalQueue and
Workload controllers, the scheduler's entry penalty):

- A1 decay. Between two changes of what a LocalQueue runs, its consumed resources move toward
  what it runs: after `elapsed` seconds, consumed·(1-a) + running·a with
  a = 1 - 0.5^(elapsed / usageHalfLifeTime). A half-life of 0 forgets everything at once.
- A2 entry penalty. A workload starting adds a·(its requests) at once, a priced over one
  usageSamplingInterval: the usage it will have added by the next sample. Kueue's scheduler
  prices one only in a ClusterQueue that orders by usage (shouldApplyEntryPenalty).
- A3 order. The usage of a LocalQueue is the sum over resources of weight·consumed (weight from
  `resourceWeights`, 1 if unlisted) divided by the LocalQueue's `spec.fairSharing.weight`
  (+inf if that is 0). Lower usage goes first, before priority and creation time.

Differs from Kueue: Kueue's ledger decays in steps, at each sample of its LocalQueue
controller (every usageSamplingInterval: reconcileConsumedUsage) and as a workload turns
Admitted (updateAfsConsumedUsage, which also settles its penalty), each step moving consumed
toward what is admitted at the step over the whole time since the previous one; its order
reads the ledger of the last step, plus penalties not yet settled. muster sums the same decay
over the runs as they were, at the decision's time: Kueue's value at its steps while what
runs changes only at them, without the lag. Between steps Kueue credits a workload admitted
after one for the time since it, and drops what a workload ran after one before it stopped
(tests/unit/core/test_admission_fair_sharing.py, KueueLedger); muster counts each run from
start to stop, so the usage is a pure function of the events and their times and a replica
rebuilt from the stream orders as the live one. Usage counts from QuotaReserved (Kueue: from
Admitted); the two agree for a ClusterQueue without admission checks.

Amounts are in Kubernetes units as Kueue reports them (cpu in cores, memory in bytes): muster's
milli-units divided by 1000.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import msgspec

from muster.api.model import AdmissionFairSharingConfig
from muster.core.quota import FlavorResource

Amounts = dict[str, float]  # resource name -> amount in units
Order = TypeVar("Order")


def fair_key(usage: float, order: Order) -> tuple[float, Order]:
    """A pending workload's place in its ClusterQueue's order (A3): its LocalQueue's usage,
    then `order`, its place by priority and FIFO. Admission takes the least first
    (`core.queues`), and the visibility views list pending workloads by it (`core.visibility`;
    the gateway, through `usage_ranks`), as Kueue's ClusterQueue heap and its visibility
    snapshot share one ordering function."""
    return usage, order


def usage_ranks(usages: Mapping[str, float]) -> dict[str, int]:
    """Each LocalQueue's usage as a rank in `fair_key` order: 0 for the least, equal usages
    sharing one (their workloads interleave by priority and FIFO). Ranks order workloads as
    the usages do; a reader of the visibility bucket places workloads by them."""
    rank_of = {usage: rank for rank, usage in enumerate(sorted(set(usages.values())))}
    return {local_queue: rank_of[usage] for local_queue, usage in sorted(usages.items())}


def decay_alpha(elapsed_s: float, half_life_s: float) -> float:
    """The share of the running usage that replaces consumed usage over `elapsed_s` (A1)."""
    if half_life_s <= 0:
        return 0.0
    return 1.0 - float(0.5 ** (max(0.0, elapsed_s) / half_life_s))


def decayed(
    consumed: Mapping[str, float],
    running: Mapping[str, float],
    elapsed_s: float,
    half_life_s: float,
) -> Amounts:
    """Consumed usage `elapsed_s` later, with `running` steady meanwhile (A1)."""
    if half_life_s <= 0:
        return {}
    alpha = decay_alpha(elapsed_s, half_life_s)
    out: Amounts = {}
    for name in sorted(consumed.keys() | running.keys()):
        value = consumed.get(name, 0.0) * (1.0 - alpha) + running.get(name, 0.0) * alpha
        if value > 0.0:
            out[name] = value
    return out


def requests_of(usage: Mapping[FlavorResource, int]) -> Amounts:
    """A workload's requests per resource, over every flavor, in units (cores, bytes)."""
    out: Amounts = {}
    for (_, resource), milli in sorted(usage.items()):
        out[resource] = out.get(resource, 0.0) + milli / 1000
    return out


def entry_penalty(requests: Mapping[str, float], config: AdmissionFairSharingConfig) -> Amounts:
    """What a workload adds to its LocalQueue's consumed usage as it starts (A2)."""
    alpha = decay_alpha(config.usage_sampling_interval_s, config.usage_half_life_s)
    return {name: value * alpha for name, value in sorted(requests.items())}


def weighted_usage(
    consumed: Mapping[str, float], config: AdmissionFairSharingConfig, queue_weight: float
) -> float:
    """A LocalQueue's usage as the order compares it (A3)."""
    if queue_weight <= 0:
        return float("inf")  # Kueue: a queue of weight 0 goes last, never NaN
    weights = dict(config.resource_weights)
    total = sum(weights.get(name, 1.0) * consumed[name] for name in sorted(consumed))
    return total / queue_weight


def _plus(into: Amounts, amounts: Mapping[str, float], scale: float = 1.0) -> None:
    for name, value in amounts.items():
        into[name] = into.get(name, 0.0) + value * scale


def _run_at(run: Run, now_s: float, half_life_s: float) -> Amounts:
    """What one workload's run adds to its LocalQueue's consumed usage at `now_s` (A1, A2):
    its requests approached while it ran, its entry penalty fading; once it stopped, what it
    had reached fading. A1 is a linear decay, so runs add up in any order."""
    ran_until_s = max(now_s, run.start_s)
    if run.stop_s is not None:
        ran_until_s = min(ran_until_s, max(run.start_s, run.stop_s))
    reached = decay_alpha(ran_until_s - run.start_s, half_life_s)  # of its requests
    out = {name: value * reached for name, value in run.requests.items()}
    _plus(out, run.penalty, 1.0 - reached)
    if now_s > ran_until_s:  # stopped: fades from its end
        fade = 1.0 - decay_alpha(now_s - ran_until_s, half_life_s)
        out = {name: value * fade for name, value in out.items()}
    return out


class Run(msgspec.Struct, kw_only=True):
    """One workload's stay in its LocalQueue's usage: from QuotaReserved to release."""

    local_queue: str
    requests: Amounts
    penalty: Amounts
    start_s: float
    stop_s: float | None = None


class Decaying:
    """Amounts that only fade (A1 with nothing running): `amounts` as of `at_s`."""

    __slots__ = ("amounts", "at_s")

    def __init__(self) -> None:
        self.amounts: Amounts = {}
        self.at_s = float("-inf")

    def at(self, now_s: float, half_life_s: float) -> Amounts:
        """The amounts at `now_s` (not before `at_s`: a late look fades nothing)."""
        return _faded(self.amounts, now_s - self.at_s, half_life_s)

    def add(
        self, at_s: float, amounts: Mapping[str, float], half_life_s: float, sign: float = 1.0
    ) -> None:
        """Add (or take away) `amounts` as of `at_s`; both are carried to the later instant."""
        if at_s >= self.at_s:
            out = self.at(at_s, half_life_s)
            self.at_s = at_s
            _plus(out, amounts, sign)
        else:
            out = dict(self.amounts)
            _plus(out, _faded(amounts, self.at_s - at_s, half_life_s), sign)
        self.amounts = {name: value for name, value in sorted(out.items()) if value > 1e-12}

    def clear(self) -> None:
        self.amounts, self.at_s = {}, float("-inf")


class QueueUsage:
    """One LocalQueue's usage, in closed form so that a look costs O(resources) however many
    workloads run: what retired workloads' runs left (`ended`), what its live workloads'
    stopped runs left (`stopped`), and its open runs: consumed(t) from them is
    `running - fading·0.5^((t - anchor_s)/h)` (A1 summed over runs; A2's penalty inside
    `fading`). The runs are kept by workload, to take each out again when it stops or retires.
    """

    __slots__ = (
        "anchor_s", "ended", "fading", "last", "open", "running", "runs", "stopped", "stopped_runs",
    )  # fmt: skip

    def __init__(self) -> None:
        self.ended = Decaying()
        self.stopped = Decaying()
        self.running: Amounts = {}  # requests of the open runs
        self.fading: Amounts = {}  # sum of (requests - penalty)·0.5^((anchor_s - start)/h)
        self.anchor_s = 0.0
        self.open = 0  # open runs
        self.stopped_runs = 0  # stopped runs of live workloads, in `stopped`
        self.runs: dict[str, list[Run]] = {}
        # (now_s, config, queue weight) -> usage of the last look: a round asks again and
        # again at one instant, and the order compares it by equality (core.queues).
        self.last: tuple[float, AdmissionFairSharingConfig, float, float] | None = None

    def at(self, now_s: float, config: AdmissionFairSharingConfig) -> Amounts:
        """Consumed usage at `now_s` (A1)."""
        h = config.usage_half_life_s
        if h <= 0:
            return {}
        out = self.ended.at(now_s, h)
        _plus(out, self.stopped.at(now_s, h))
        if self.open:
            _plus(out, self.running)
            _plus(out, self.fading, -float(0.5 ** ((now_s - self.anchor_s) / h)))
        return {name: value for name, value in sorted(out.items()) if value > 1e-12}

    def opened(self, run: Run, half_life_s: float) -> None:
        if not self.open:
            self.anchor_s = run.start_s
        elif abs(run.start_s - self.anchor_s) > 64 * half_life_s:  # keep 2**x finite
            self.fading = self._weighted(self.fading, self.anchor_s - run.start_s, half_life_s)
            self.anchor_s = run.start_s
        self.open += 1
        _plus(self.running, run.requests)
        _plus(self.fading, self._fading_of(run, half_life_s))

    def closed(self, run: Run, half_life_s: float) -> None:
        """Take open `run` out (it stopped: what it left goes to `stopped`)."""
        self.open -= 1
        if not self.open:  # exactly nothing left, not a float rest
            self.running, self.fading = {}, {}
        else:
            _plus(self.running, run.requests, -1.0)
            _plus(self.fading, self._fading_of(run, half_life_s), -1.0)
        self.stopped.add(_end_of(run), run_left(run, half_life_s), half_life_s)
        self.stopped_runs += 1

    def retired(self, runs: list[Run], half_life_s: float) -> None:
        """Move a retired workload's stopped `runs` from `stopped` to `ended`."""
        for run in runs:
            left = run_left(run, half_life_s)
            self.stopped.add(_end_of(run), left, half_life_s, sign=-1.0)
            self.ended.add(_end_of(run), left, half_life_s)
            self.stopped_runs -= 1
        if not self.stopped_runs:
            self.stopped.clear()  # no stopped run left: exactly nothing, not a float rest

    def _fading_of(self, run: Run, half_life_s: float) -> Amounts:
        """`run`'s part of `fading`: (requests - penalty) weighed to `anchor_s`."""
        out = dict(run.requests)
        _plus(out, run.penalty, -1.0)
        return self._weighted(out, run.start_s - self.anchor_s, half_life_s)

    @staticmethod
    def _weighted(amounts: Mapping[str, float], by_s: float, half_life_s: float) -> Amounts:
        scale = float(2.0 ** (by_s / half_life_s)) if half_life_s > 0 else 0.0
        return {name: value * scale for name, value in amounts.items()}


def _end_of(run: Run) -> float:
    assert run.stop_s is not None
    return max(run.start_s, run.stop_s)


def run_left(run: Run, half_life_s: float) -> Amounts:
    """What a stopped run left in its LocalQueue's usage at its stop."""
    return _run_at(run, _end_of(run), half_life_s)


def _faded(amounts: Mapping[str, float], elapsed_s: float, half_life_s: float) -> Amounts:
    if not amounts:
        return {}
    fade = 1.0 - decay_alpha(elapsed_s, half_life_s)
    return {name: value * fade for name, value in amounts.items()}


class AdmissionUsage:
    """Every LocalQueue's usage, from the runs of its workloads: a run starts and stops at
    given instants (the facts' times), and the usage is a sum over runs, so a replica that
    learns the same runs in another order (a rebuild from the stream) has the same usage.

    A stopped run stays its workload's until the workload is retired (finished, deleted):
    a rebuild from a snapshot replays a live workload's whole story, earlier runs included,
    and takes what retired ones left from the snapshot (`ended`)."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueUsage] = {}
        self.owners: dict[str, str] = {}  # workload -> the LocalQueue of its runs
        self.open: set[str] = set()  # workloads whose last run has not stopped

    def start(
        self,
        key: str,
        local_queue: str,
        usage: Mapping[FlavorResource, int],
        *,
        at_s: float,
        config: AdmissionFairSharingConfig,
        penalized: bool = True,
    ) -> None:
        """Workload `key` of `local_queue` holds `usage` from `at_s`: its run counts (A1) with
        its entry penalty (A2) when `penalized` (Kueue's scheduler prices one only in a
        ClusterQueue that orders by usage). A workload already running keeps its first start."""
        if key in self.open:
            return
        owner = self.owners.get(key)
        if owner is not None and owner != local_queue:
            self.retire(key, config=config)  # moved to another LocalQueue (routed)
        requests = requests_of(usage)
        priced = penalized and config.usage_half_life_s > 0
        penalty = entry_penalty(requests, config) if priced else {}
        queue = self.queues.get(local_queue)
        if queue is None:
            queue = self.queues[local_queue] = QueueUsage()
        run = Run(local_queue=local_queue, requests=requests, penalty=penalty, start_s=at_s)
        queue.runs.setdefault(key, []).append(run)
        queue.opened(run, config.usage_half_life_s)
        queue.last = None
        self.owners[key] = local_queue
        self.open.add(key)

    def resize(
        self,
        key: str,
        usage: Mapping[FlavorResource, int],
        *,
        at_s: float,
        config: AdmissionFairSharingConfig,
    ) -> None:
        """Running workload `key` holds `usage` from `at_s` (pods reclaimed, or taken back):
        its run stops there and one of `usage` goes on, without a second entry penalty
        (Kueue's LocalQueue usage counts a podset's pods less its reclaimable ones; the
        penalty was priced at admission). A no-op when it runs nowhere or holds `usage`."""
        if key not in self.open:
            return
        local_queue = self.owners[key]
        queue = self.queues[local_queue]
        requests = requests_of(usage)
        if requests == queue.runs[key][-1].requests:
            return
        self.stop(key, at_s=at_s, config=config)
        run = Run(local_queue=local_queue, requests=requests, penalty={}, start_s=at_s)
        queue.runs[key].append(run)
        queue.opened(run, config.usage_half_life_s)
        self.open.add(key)

    def stop(self, key: str, *, at_s: float, config: AdmissionFairSharingConfig) -> None:
        """Workload `key` released its quota at `at_s` (a no-op when it runs nowhere)."""
        if key not in self.open:
            return
        self.open.discard(key)
        queue = self.queues[self.owners[key]]
        run = queue.runs[key][-1]
        run.stop_s = at_s
        queue.closed(run, config.usage_half_life_s)
        queue.last = None

    def retire(self, key: str, *, config: AdmissionFairSharingConfig) -> None:
        """Workload `key` is gone (finished, deleted): what its runs left stays in its
        LocalQueue's `ended` (one still running is stopped first, at its start: a caller
        that knows when it stopped says so with `stop`)."""
        if key in self.open:
            run = self.queues[self.owners[key]].runs[key][-1]
            self.stop(key, at_s=run.start_s, config=config)
        local_queue = self.owners.pop(key, None)
        if local_queue is None:
            return
        queue = self.queues[local_queue]
        queue.retired(queue.runs.pop(key, []), config.usage_half_life_s)
        queue.last = None

    def ended(self, local_queue: str) -> tuple[float, Amounts] | None:
        """What retired workloads' runs left in `local_queue`, and the instant it is for (a
        snapshot keeps it: their stories are not in it)."""
        queue = self.queues.get(local_queue)
        if queue is None or not queue.ended.amounts:
            return None
        return queue.ended.at_s, dict(queue.ended.amounts)

    def restore_ended(
        self,
        local_queue: str,
        at_s: float,
        amounts: Mapping[str, float],
        *,
        config: AdmissionFairSharingConfig,
        sign: float = 1.0,
    ) -> None:
        """Add what retired workloads left in `local_queue` at `at_s` (read from a snapshot,
        or carried from the partition it left); `sign` -1 takes it away again."""
        queue = self.queues.get(local_queue)
        if queue is None:
            queue = self.queues[local_queue] = QueueUsage()
        queue.ended.add(at_s, amounts, config.usage_half_life_s, sign)
        queue.last = None

    def forget_ended(self, local_queue: str) -> None:
        """Forget what retired workloads left in `local_queue` (it moved to a partition
        another replica decides: that one carries it from now on)."""
        queue = self.queues.get(local_queue)
        if queue is not None:
            queue.ended.clear()
            queue.last = None

    def consumed(
        self, local_queue: str, *, now_s: float, config: AdmissionFairSharingConfig
    ) -> Amounts:
        queue = self.queues.get(local_queue)
        return queue.at(now_s, config) if queue is not None else {}

    def usage(
        self,
        local_queue: str,
        *,
        now_s: float,
        config: AdmissionFairSharingConfig,
        queue_weight: float,
    ) -> float:
        """The number the ClusterQueue's order compares: lower goes first (A3)."""
        queue = self.queues.get(local_queue)
        if queue is None:
            return weighted_usage({}, config, queue_weight)
        last = queue.last
        if last is not None and last[0] == now_s and last[1] is config and last[2] == queue_weight:
            return last[3]
        # Nine significant digits: what the same runs summed in another order (or their times
        # read back from nanoseconds) differ by in the last bits must not reorder queues.
        value = float(f"{weighted_usage(queue.at(now_s, config), config, queue_weight):.9g}")
        queue.last = (now_s, config, queue_weight, value)
        return value

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the LocalQueues not in `keep` that run nothing (deleted ones: Kueue drops
        their history with them)."""
        kept = set(keep)
        for name in sorted(self.queues):
            if name not in kept and not self.queues[name].runs:
                del self.queues[name]
