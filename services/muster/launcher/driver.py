"""Replays a scenario against the running services, the way users and clusters would.

Nodes go into the simulated cluster's store (what `kubectl apply` of Nodes would be), the
configuration and every Job/JobSet/Workload go through `Gateway.Submit` (at their
`muster.dev/submit-after`, divided by the speed-up), and `Events.Watch` feeds the progress lines
and the final table. Times shown are scenario seconds (real seconds × speed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import yaml

from muster.api import load_yaml
from muster.bus.cancel import raise_if_cancelling
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.core.conditions import is_deactivation
from muster.core.queued_time import QueuedTime

log = logging.getLogger(__name__)

SUBMIT_AFTER = "muster.dev/submit-after"
NOT_SUBMITTED = frozenset({"Node", "Configuration"})
# Kueue's work, and the cluster objects of gangs outside Kueue (the Workload API, PodGroups).
WORK_KINDS = frozenset({"Job", "JobSet", "Workload", "Pod", "PodGroup"})
# How Gateway.Submit names a scheduling.k8s.io Workload (a Kueue Workload is "Workload").
GANG_WORKLOAD_KIND = "Workload.scheduling.k8s.io"
GANG_POD_GROUP_KIND = "PodGroup.scheduling.k8s.io"  # scheduler-plugins' is "PodGroup"


CLUSTER_ANNOTATION = "muster.dev/cluster"  # on a Node: the cluster it belongs to
LOST_AT = "muster.dev/lost-at-seconds"  # on a MultiKueueCluster: when its services stop


def _documents(text: str) -> list[Any]:
    """The scenario's documents, read with muster's bounded loader; ValueError names the line."""
    documents, problem = load_yaml(text, source="scenario")
    if problem is not None:
        raise ValueError(str(problem))
    return documents


def multikueue_clusters(text: str) -> dict[str, float | None]:
    """The worker clusters the scenario declares (MultiKueueCluster names), each with the
    scenario time its services are stopped at (`muster.dev/lost-at-seconds`), if any."""
    found: dict[str, float | None] = {}
    for doc in _documents(text):
        if not isinstance(doc, dict) or doc.get("kind") != "MultiKueueCluster":
            continue
        meta = doc.get("metadata") or {}
        lost = (meta.get("annotations") or {}).get(LOST_AT)
        found[str(meta.get("name", ""))] = None if lost is None else float(lost)
    return found


def kueue_configuration(text: str) -> str | None:
    """The scenario's Kueue `Configuration` document as YAML, if it has one."""
    docs = [d for d in _documents(text) if isinstance(d, dict)]
    found = [d for d in docs if d.get("kind") == "Configuration"]
    return yaml.safe_dump(found[0]) if found else None


@dataclass
class Track:
    """What one workload went through, in scenario seconds since the run started."""

    key: str
    queue: str = ""
    cluster_queue: str = ""
    submitted_s: float | None = None
    admitted_s: float | None = None
    running_s: float | None = None
    finished_s: float | None = None
    ran_s: float = 0.0
    nodes: set[str] = field(default_factory=set)
    # The nodes of a whole permit whose pods the binder makes on them, until a `bound` or its
    # `running` says they are there: a binder with `--bound-events binds` tells no `bound`.
    to_create: tuple[str, ...] = ()
    cluster: str = ""  # where its last admission sent it
    evictions: int = 0
    outcome: str = "Pending"
    pending: str = ""
    # Kueue's Requeued condition since its last eviction: None (no eviction, or its pods are
    # still stopping), False (waiting: back-off, stopped queue), True (queued again).
    requeued: bool | None = None
    said_submitted: bool = False  # its "submitted" line is printed
    queued: QueuedTime = field(default_factory=QueuedTime)  # the WAITED column

    def state(self) -> str:
        """The OUTCOME column: its state as Kueue's conditions would name it. An evicted
        workload reads Evicted only while its pods stop (Evicted, quota still reserved); then
        Pending, requeued or waiting to be (Requeued True or False)."""
        notes = []
        if self.outcome == "Pending" and self.requeued is not None:
            notes.append("requeued" if self.requeued else "not requeued yet")
        if self.evictions:
            notes.append(f"evicted {self.evictions}x")
        return self.outcome + (f" ({', '.join(notes)})" if notes else "")

    @property
    def done(self) -> bool:
        return self.outcome in {"Finished", "Failed", "Inactive"}

    @property
    def kueue(self) -> bool:
        """Whether Kueue admits it (else it is a gang placed by gang-permit alone)."""
        return self.queue != GANG_QUEUE


GANG_QUEUE = "(gang)"  # the queue column of a gang outside Kueue
# Admission's eviction reasons for a deactivation: by itself (translate.py's, a check rejected
# it) and by a Stop (core's, spec.active set false while holding quota); and Kueue's
# DeactivatedDueTo<cause> (back-off limit reached, a check rejected it after admission).
DEACTIVATED = frozenset({"InactiveWorkload", "Deactivated"})


def split_scenario(
    text: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, Kueue objects, work) from multi-document YAML, work in arrival order.

    Kueue's own `Configuration` is not among them: it is the admission service's
    `--kueue-config` (see `kueue_configuration`), not something clients submit.
    """
    docs = [d for d in _documents(text) if isinstance(d, dict)]
    nodes = [d for d in docs if d.get("kind") == "Node"]
    config = [d for d in docs if d.get("kind") not in WORK_KINDS | NOT_SUBMITTED]
    work = [d for d in docs if d.get("kind") in WORK_KINDS]
    work.sort(
        key=lambda d: float(
            ((d.get("metadata") or {}).get("annotations") or {}).get(SUBMIT_AFTER, 0)
        )
    )
    return nodes, config, work


async def submit(gateway: Any, manifest: str) -> services_pb2.SubmitResponse:
    """Gateway.Submit, tried again while the gateway answers UNAVAILABLE (NATS restarting):
    a run outlives a NATS restart. A resubmission is harmless: a workload's second
    `submitted` is a duplicate admission drops."""
    delay_s = 0.1
    while True:
        try:
            reply: services_pb2.SubmitResponse = await gateway.Submit(
                services_pb2.SubmitRequest(manifest=manifest)
            )
            return reply
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            log.warning("gateway unavailable (%s); submitting again", err.details())
        await asyncio.sleep(delay_s)
        delay_s = min(2.0, delay_s * 2)


class Driver:
    def __init__(
        self,
        *,
        gateway: str,
        speed: float,
        print_line: Callable[[str], None],
        apply_nodes: Callable[[Sequence[dict[str, Any]]], Any],
        multicluster: bool = False,
    ) -> None:
        self.multicluster = multicluster  # name the cluster each workload is admitted to
        self.gateway = gateway
        self.speed = speed
        self.print_line = print_line
        self.apply_nodes = apply_nodes
        self.tracks: dict[str, Track] = {}
        self.started = time.monotonic()
        self.changed = asyncio.Event()
        # Gang sources submitted -> when: "<namespace>/<name>/" of a scheduling.k8s.io Workload,
        # whose gangs' keys start with it, or a PodGroup's key (docs/events.md).
        self.gang_sources: dict[str, float] = {}

    def now_s(self) -> float:
        return (time.monotonic() - self.started) * self.speed

    async def run(self, text: str, *, until_s: float | None) -> list[Track]:
        nodes, config, work = split_scenario(text)
        async with grpc.aio.insecure_channel(self.gateway) as channel:
            gateway = services_pb2_grpc.GatewayStub(channel)
            events = services_pb2_grpc.EventsStub(channel)
            await self.apply_nodes(nodes)
            if config:
                await submit(gateway, yaml.safe_dump_all(config))
            self.started = time.monotonic()
            watch = asyncio.create_task(self._watch(events))
            try:
                await self._submit_all(gateway, work)
                await self._wait_done(until_s)
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await watch
        return list(self.tracks.values())

    async def _submit_all(self, gateway: Any, work: list[dict[str, Any]]) -> None:
        for doc in work:
            raise_if_cancelling()
            after = float(
                ((doc.get("metadata") or {}).get("annotations") or {}).get(SUBMIT_AFTER, 0)
            )
            delay = after / self.speed - (time.monotonic() - self.started)
            if delay > 0:
                await asyncio.sleep(delay)
            reply = await submit(gateway, yaml.safe_dump(doc))
            for obj in reply.objects:
                if obj.kind == "Workload":
                    track = self.tracks.setdefault(obj.key, Track(key=obj.key))
                    track.queue = _queue_of(doc)
                    if (doc.get("spec") or {}).get("active") is False:
                        track.outcome = "Inactive"  # admission does not queue it
                    self._submitted(track)
                elif obj.kind in (GANG_WORKLOAD_KIND, "PodGroup", GANG_POD_GROUP_KIND):
                    # A PodGroup's gang is keyed by its name; a v1alpha1 Workload's by
                    # name/group/replica (a later Workload's keys no gang: its PodGroups do).
                    prefix = obj.key + ("/" if obj.kind == GANG_WORKLOAD_KIND else "")
                    self.gang_sources[prefix] = self.now_s()
                    self.print_line(f"{self.now_s():7.1f}s  {obj.key:<36} {'submitted':<10} gang")

    async def _wait_done(self, until_s: float | None) -> None:
        while not all(t.done for t in self.tracks.values()):
            raise_if_cancelling()  # Ctrl-C: `wait_for` below may have swallowed it (3.11)
            if until_s is not None and self.now_s() >= until_s:
                return
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)

    async def _watch(self, events: Any) -> None:
        """Follow every event; a cut stream is resumed after the last event seen."""
        after = 0
        while True:
            try:
                request = services_pb2.WatchRequest(from_sequence=after + 1)
                async for env in events.Watch(request):
                    after = env.sequence
                    self._apply(env)
                    self.changed.set()
                return
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
            await asyncio.sleep(0.5)

    def _track(self, key: str) -> Track:
        track = self.tracks.get(key)
        if track is None:
            track = self.tracks[key] = Track(key=key)
            for prefix, at in self.gang_sources.items():
                if key == prefix or (prefix.endswith("/") and key.startswith(prefix)):
                    track.queue, track.submitted_s = GANG_QUEUE, at
                    track.queued.queued(at)
        return track

    def _apply(self, env: events_pb2.Envelope) -> None:
        kind = env.WhichOneof("payload")
        if not env.workload:
            return
        track = self._track(env.workload)
        now = self.now_s()
        if kind == "submitted" and track.queue != GANG_QUEUE:
            track.queue = track.queue or env.submitted.queue_name or "default"
            self._submitted(track)
        elif kind == "gang_waiting" and env.gang_waiting.reason != track.pending:
            track.pending = env.gang_waiting.reason
            self._line(track, "waiting", track.pending)
        elif kind == "gang_permitted":
            self._permitted(track, env.gang_permitted, now)
        elif kind == "gang_rejected":
            track.to_create = ()  # not made (BindFailed), or placed anew
            rejected = env.gang_rejected
            self._line(track, "rejected", f"{rejected.reason}: {rejected.message}")
        elif kind == "routed":
            routed = env.routed
            where = f"{routed.from_cluster_queue} → {routed.to_cluster_queue}"
            self._line(track, "routed", f"{where} ({routed.policy}): {routed.message}")
        elif kind == "pending" and env.pending.message != track.pending:
            track.pending = env.pending.message
            self._line(track, "pending", f"{env.pending.reason}: {env.pending.message}")
        elif kind == "admitted":
            track.cluster = env.cluster
            track.cluster_queue = env.admitted.admission.cluster_queue
            track.admitted_s = track.admitted_s if track.admitted_s is not None else now
            track.queued.dequeued(now)
            track.outcome = "Admitted"
            flavors = sorted(
                {
                    f
                    for ps in env.admitted.admission.pod_set_assignments
                    for f in ps.flavors.values()
                }
            )
            where = f" in cluster {env.cluster}" if self.multicluster else ""
            self._line(track, "admitted", f"{track.cluster_queue} on {','.join(flavors)}{where}")
        elif kind == "evicted":
            track.to_create = ()
            track.evictions += 1
            track.queued.dequeued(now)  # evicted before its admission (a check's Retry)
            if track.running_s is not None:
                track.ran_s += now - track.running_s
                track.running_s = None
            # Deactivated (back-off limit reached, check rejected): nothing more happens to it
            # unless someone resumes it, so it no longer holds the run open.
            reason = env.evicted.reason
            deactivated = reason in DEACTIVATED or is_deactivation(reason)
            track.outcome = "Inactive" if deactivated else "Evicted"
            track.requeued = None
            by = f" by {env.evicted.preemptor}" if env.evicted.preemptor else ""
            self._line(track, "evicted", f"{env.evicted.reason}{by}")
        elif kind == "eviction_completed" and track.outcome == "Evicted":
            # Its pods are gone, its quota given back: pending, queued again at once only when
            # preempted (Kueue's job reconciler); the `requeued` that follows says so anyway.
            track.outcome, track.requeued = "Pending", False
        elif kind == "bound":
            track.to_create = ()  # the binder told it
            track.nodes.update(b.node for b in env.bound.bindings)
            self._line(track, "bound", ",".join(sorted(track.nodes)))
        elif kind == "active_changed" and not env.active_changed.active:
            if track.outcome in {"Pending", "Evicted"}:  # holding nothing: inactive at once
                track.outcome = "Inactive"
                track.queued.dequeued(now)
        elif kind == "requeued":  # queued again: after an eviction, or resumed
            track.queued.queued(now)
            track.outcome, track.requeued = "Pending", True
        elif kind == "running":
            track.running_s = now
            track.outcome = "Running"
            if track.to_create:  # made where they were permitted, as they run there
                self._line(track, "running", ",".join(sorted(self._made(track))))
        elif kind == "finished":
            self._made(track)
            track.queued.dequeued(now)
            if track.running_s is not None:
                track.ran_s += now - track.running_s
                track.running_s = None
            track.finished_s = now
            track.outcome = "Finished" if env.finished.succeeded else "Failed"
            self._line(track, "finished", f"ran {track.ran_s:.0f}s")

    def _permitted(self, track: Track, permitted: events_pb2.GangPermitted, now: float) -> None:
        """A gang outside Kueue is admitted by its permit. A whole permit to create pods on
        their nodes is answered by those pods, maybe with no `bound` (docs/events.md, "`bound`
        only for binds"): its nodes wait for its `running`."""
        if permitted.create and permitted.parts <= 1:
            track.to_create = tuple(sorted({b.node for b in permitted.bindings}))
        if track.kueue:
            return
        track.admitted_s = track.admitted_s if track.admitted_s is not None else now
        track.queued.dequeued(now)
        track.outcome = "Permitted"
        line = f"{len(permitted.bindings)} pods at once"
        if permitted.parts > 1:
            line += f" (part {permitted.part + 1} of {permitted.parts})"
        self._line(track, "permitted", line)

    @staticmethod
    def _made(track: Track) -> set[str]:
        """The nodes its pods run on, once seen running with no `bound` told for them."""
        track.nodes.update(track.to_create)
        track.to_create = ()
        return track.nodes

    def _submitted(self, track: Track) -> None:
        """Its "submitted" line, once: from the Submit's reply or from its event, whichever
        comes first (the reply may come after its admission's event, which printed first)."""
        if track.submitted_s is None:
            track.submitted_s = self.now_s()
            # Queued from now, unless inactive or its admission's event came first.
            if track.outcome == "Pending" and track.admitted_s is None:
                track.queued.queued(track.submitted_s)
        if not track.said_submitted:
            track.said_submitted = True
            self._line(track, "submitted", f"to {track.queue}")

    def _line(self, track: Track, what: str, detail: str) -> None:
        self.print_line(f"{self.now_s():7.1f}s  {track.key:<36} {what:<10} {detail}")


def _queue_of(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    if doc.get("kind") == "Workload":
        return str((doc.get("spec") or {}).get("queueName", "default"))
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    name = labels.get("kueue.x-k8s.io/queue-name") or annotations.get("kueue.x-k8s.io/queue-name")
    return str(name or "default")


def render_tracks(tracks: Sequence[Track], *, now_s: float, clusters: bool = False) -> str:
    """One row per workload; with `clusters`, the cluster it ran (or last ran) in. WAITED is
    its time queued over every wait (after each requeue too), up to `now_s` for one still
    queued."""
    rows = [
        (
            "WORKLOAD",
            "QUEUE",
            *(("CLUSTER",) if clusters else ()),
            "WAITED",
            "RAN",
            "NODES",
            "OUTCOME",
        )
    ]
    for t in sorted(
        tracks, key=lambda t: (t.submitted_s if t.submitted_s is not None else 1e18, t.key)
    ):
        waited = "-" if t.submitted_s is None else f"{t.queued.waited_s(now_s):.0f}"
        queue = f"{t.queue} → {t.cluster_queue}" if t.cluster_queue else t.queue
        outcome = t.state()
        where = (t.cluster or "-",) if clusters else ()
        nodes = ",".join(sorted(t.nodes)) or "-"
        rows.append((t.key, queue, *where, waited, f"{t.ran_s:.0f}", nodes, outcome))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
