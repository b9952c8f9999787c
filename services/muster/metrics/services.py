"""Each service's own `muster_*` series, beside the bus's (`bus.py`) and Kueue's.

- admission: `muster_admission_round_duration_seconds{shard,phase}` (phase `decide`: applying
  the batch and deciding; `publish`: until every decision has its PubAck),
  `muster_admission_round_size{shard,kind}` (`facts` applied, `decisions` made per round),
  `muster_admission_snapshot_age_seconds{shard}` (since the snapshot last read or written),
  `muster_admission_views_written_total{shard}` (passes of the visibility loop that wrote its
  changed views; rounds and their facts are the round-size histogram's count and sum),
  `muster_admission_step_downs_total{shard,cause}` (terms that ended with the shard lease
  lost: `expired`, `taken_over`, `unreachable`, `superseded`);
- gangpermit: `muster_placement_pass_duration_seconds{cluster}` (one placement pass, the
  decision latency), `muster_gangs_waiting{cluster}` (gangs that do not fit yet);
- binder: `muster_bind_duration_seconds{cluster}` (one pod's bind through the cluster's API),
  `muster_create_bound_duration_seconds{cluster}` (creating one permit's, or part's, pods
  on their nodes: placed before they existed, so no bind), `muster_pods_created_bound_total
  {cluster}`, `muster_bind_errors_total{cluster,kind}` (binds or creations on nodes that
  failed; `temporary`: retried, `permanent`: the gang is rejected with BindFailed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Compute times: tens of microseconds (one pod) to seconds (a round of thousands).
DURATION_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class AdmissionSeries:
    """Rounds and snapshots of admission replica `shard`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        shard: int,
        clock: Callable[[], float] = time.time,
        step_down_causes: Sequence[str] = (),
    ) -> None:
        """`step_down_causes`: the causes a lost lease names, each counted from 0."""
        labels = ["shard"]
        self.shard = str(shard)
        round_s = Histogram(
            "muster_admission_round_duration_seconds",
            "Time an admission round took: deciding (decide) and storing its decisions (publish).",
            [*labels, "phase"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._decide_s = round_s.labels(self.shard, "decide")
        self._publish_s = round_s.labels(self.shard, "publish")
        size = Histogram(
            "muster_admission_round_size",
            "Facts applied (facts) and decisions made (decisions) per admission round.",
            [*labels, "kind"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self._facts = size.labels(self.shard, "facts")
        self._decisions = size.labels(self.shard, "decisions")
        self._snapshot_at: float | None = None
        self._clock = clock
        self._views_written = Counter(
            "muster_admission_views_written_total",
            "Passes of the visibility loop that wrote this replica's changed views.",
            labels,
            registry=registry,
        ).labels(self.shard)
        Gauge(
            "muster_admission_snapshot_age_seconds",
            "Seconds since this replica's snapshot was last written or read (NaN: never).",
            labels,
            registry=registry,
        ).labels(self.shard).set_function(self._snapshot_age)

        self._step_downs = Counter(
            "muster_admission_step_downs_total",
            "Terms of this admission replica that ended with its shard lease lost, by cause.",
            [*labels, "cause"],
            registry=registry,
        )
        for cause in step_down_causes:  # each series exists at 0, so a rate over it is defined
            self._step_downs.labels(self.shard, cause)

    def stepped_down(self, cause: str) -> None:
        """A term ended with the shard lease lost, for `cause`."""
        self._step_downs.labels(self.shard, cause).inc()

    def decided(self, seconds: float, *, facts: int, decisions: int) -> None:
        self._decide_s.observe(seconds)
        self._facts.observe(facts)
        self._decisions.observe(decisions)

    def published(self, seconds: float) -> None:
        self._publish_s.observe(seconds)

    def views_written(self) -> None:
        """A pass of the visibility loop wrote the views that changed."""
        self._views_written.inc()

    def snapshot_taken(self) -> None:
        """A snapshot was just written (or read at start)."""
        self._snapshot_at = self._clock()

    def _snapshot_age(self) -> float:
        at = self._snapshot_at  # read once: a scrape runs on another thread
        return float("nan") if at is None else max(0.0, self._clock() - at)


class PlacementSeries:
    """gangpermit's passes over cluster `cluster`."""

    def __init__(self, registry: CollectorRegistry, *, cluster: str) -> None:
        self._pass_s = Histogram(
            "muster_placement_pass_duration_seconds",
            "Time one placement pass took to decide (its events not yet published).",
            ["cluster"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        ).labels(cluster)
        self._waiting = Gauge(
            "muster_gangs_waiting",
            "Gangs with pods that do not fit yet (GangWaiting), after the last pass.",
            ["cluster"],
            registry=registry,
        ).labels(cluster)

        self._resent = Counter(
            "muster_placement_evictions_resent_total",
            "Placement cmd.evict commands sent again, unanswered after their back-off.",
            ["cluster"],
            registry=registry,
        ).labels(cluster)
        self._resent_told = 0

    def passed(self, seconds: float, *, waiting: int, evictions_resent: int = 0) -> None:
        """A pass; `evictions_resent` is the count of re-sends so far (the counter follows)."""
        self._pass_s.observe(seconds)
        self._waiting.set(waiting)
        if evictions_resent > self._resent_told:
            self._resent.inc(evictions_resent - self._resent_told)
            self._resent_told = evictions_resent


class BinderSeries:
    """The binder's binds in cluster `cluster`."""

    def __init__(self, registry: CollectorRegistry, *, cluster: str) -> None:
        self._bind_s = Histogram(
            "muster_bind_duration_seconds",
            "Time one pod's bind took (the Binding API, or the simulated store).",
            ["cluster"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        ).labels(cluster)
        self._create_s = Histogram(
            "muster_create_bound_duration_seconds",
            "Time creating one permit's (or part's) pods on their nodes took.",
            ["cluster"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        ).labels(cluster)
        self._created = Counter(
            "muster_pods_created_bound_total",
            "Pods created already on their nodes (placed before they existed: no bind).",
            ["cluster"],
            registry=registry,
        ).labels(cluster)
        errors = Counter(
            "muster_bind_errors_total",
            "Pod binds, or creations on their nodes, that failed: temporary (retried) or "
            "permanent (gang rejected).",
            ["cluster", "kind"],
            registry=registry,
        )
        self._temporary = errors.labels(cluster, "temporary")
        self._permanent = errors.labels(cluster, "permanent")

    def bound(self, seconds: float) -> None:
        self._bind_s.observe(seconds)

    def created(self, pods: int, seconds: float) -> None:
        """`pods` created on their nodes, in `seconds` (one permit or part)."""
        self._create_s.observe(seconds)
        self._created.inc(pods)

    def failed(self, *, temporary: bool) -> None:
        (self._temporary if temporary else self._permanent).inc()
