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
  usageSamplingInterval: the usage it will have added by the next sample.
- A3 order. The usage of a LocalQueue is the sum over resources of weight·consumed (weight from
  `resourceWeights`, 1 if unlisted) divided by the LocalQueue's `spec.fairSharing.weight`
  (+inf if that is 0). Lower usage goes first, before priority and creation time.

Differs from Kueue: Kueue samples the decay every usageSamplingInterval, so its order lags the
usage by up to one interval; muster evaluates the same decay at the decision's time (the value
Kueue reaches at its next sample, without the lag), which also makes it a pure function of the
events and their times. Usage counts from QuotaReserved (Kueue: from Admitted); the two agree
for a ClusterQueue without admission checks.

Amounts are in Kubernetes units as Kueue reports them (cpu in cores, memory in bytes): muster's
milli-units divided by 1000.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from muster.api.model import AdmissionFairSharingConfig
from muster.core.quota import FlavorResource

Amounts = dict[str, float]  # resource name -> amount in units


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


def _add(into: Amounts, amounts: Mapping[str, float], sign: float) -> None:
    for name, value in amounts.items():
        left = into.get(name, 0.0) + sign * value
        if left > 1e-12:
            into[name] = left
        else:
            into.pop(name, None)  # a float rest of a workload that stopped, not usage


class QueueUsage:
    """One LocalQueue's consumed usage as of `since_s`, and what it runs since then."""

    __slots__ = ("consumed", "last", "running", "since_s")

    def __init__(self, since_s: float) -> None:
        self.consumed: Amounts = {}
        self.running: Amounts = {}
        self.since_s = since_s
        # (now_s, config, queue weight) -> usage of the last look: a round asks again and
        # again at one instant, and the order compares it by equality (core.queues).
        self.last: tuple[float, AdmissionFairSharingConfig, float, float] | None = None

    def at(self, now_s: float, config: AdmissionFairSharingConfig) -> Amounts:
        """Consumed usage at `now_s` (never before the last change: a late fact decays 0)."""
        return decayed(self.consumed, self.running, now_s - self.since_s, config.usage_half_life_s)

    def fold(self, now_s: float, config: AdmissionFairSharingConfig) -> None:
        """Carry the decay up to `now_s`, before what runs changes."""
        self.consumed = self.at(now_s, config)
        self.since_s = max(self.since_s, now_s)


class AdmissionUsage:
    """Every LocalQueue's usage, changed only by workloads starting and stopping at given
    times: replaying the same facts with the same times gives the same usage."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueUsage] = {}

    def record(
        self,
        local_queue: str,
        usage: Mapping[FlavorResource, int],
        *,
        started: bool,
        at_s: float,
        config: AdmissionFairSharingConfig,
    ) -> None:
        """A workload of `local_queue` holding `usage` started (or stopped) at `at_s`: the
        decay is carried up to then (A1); a start adds its entry penalty (A2)."""
        queue = self.queues.get(local_queue)
        if queue is None:
            if not started:
                return
            queue = self.queues[local_queue] = QueueUsage(at_s)
        queue.fold(at_s, config)
        queue.last = None
        requests = requests_of(usage)
        if started and config.usage_half_life_s > 0:
            _add(queue.consumed, entry_penalty(requests, config), 1.0)
        _add(queue.running, requests, 1.0 if started else -1.0)

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
        value = weighted_usage(queue.at(now_s, config), config, queue_weight)
        queue.last = (now_s, config, queue_weight, value)
        return value

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the LocalQueues not in `keep` that run nothing (deleted ones: Kueue drops
        their history with them)."""
        kept = set(keep)
        for name in sorted(self.queues):
            if name not in kept and not self.queues[name].running:
                del self.queues[name]
