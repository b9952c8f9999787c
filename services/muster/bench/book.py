"""The book section: what the gateway's workload book costs (`muster workloads`, the dashboard).

A stream of N workloads, each with the events a Job's workload gets on its way (submitted
with its manifest, which the book validates, pending, admitted (with its reservation), two
pods_pending, bound of 4 pods, running; half of them finished), is folded into a
`WorkloadBook` as the gateway's follower does at start; then one ListWorkloads answer over all
of them is built (filter, sort, summaries). Rows: events folded per second, the list's time,
and the book's memory per live workload (tracemalloc, so the fold's time is measured in a
separate run). One process, best of two runs.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Iterator

import msgspec

from muster.bench.admission_pending import workload
from muster.bench.table import Column, number, render_table
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.book import WorkloadBook
from muster.gateway.workloads import matching, summaries

SECTION = "book"
SIZES = (10_000, 50_000)
_TRIES = 2


class BookRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str
    workloads: int
    events: int
    fold_s: float
    events_per_s: float
    list_ms: float
    kib_per_workload: float


def stream(workloads: int) -> list[events_pb2.Envelope]:
    """The events of `workloads` Job workloads, in stream order, sequences set."""
    out: list[events_pb2.Envelope] = []
    admission = events_pb2.Admission(cluster_queue="cq")
    for i in range(workloads):
        namespace, name = f"team-{i % 10}", f"job-train-{i}-abcde"
        key = f"{namespace}/{name}"
        manifest = json.dumps(workload(namespace, name, cpu=1, priority=0))
        pods = [events_pb2.PodRef(namespace="ns", name=f"job-train-{i}-main-{p}") for p in range(4)]
        bindings = [events_pb2.PodBinding(pod=pod, node=f"node-{i % 100}") for pod in pods]
        payloads = [
            ("submitted", events_pb2.WorkloadSubmitted(
                queue_name="lq", owner=events_pb2.OwnerRef(kind="Job", name=f"train-{i}"),
                manifest_json=manifest)),
            ("pending", events_pb2.WorkloadPending(
                reason="WaitingForQuota", message="1 more needed", cluster_queue="cq")),
            ("admitted", events_pb2.WorkloadAdmitted(admission=admission, with_reservation=True)),
            ("pods_pending", events_pb2.PodsPending(pods=pods)),
            ("pods_pending", events_pb2.PodsPending(pods=pods[:2])),
            ("bound", events_pb2.PodsBound(bindings=bindings)),
            ("running", events_pb2.WorkloadRunning()),
        ]  # fmt: skip
        if i % 2:
            payloads.append(("finished", events_pb2.WorkloadFinished(succeeded=True)))
        for field, payload in payloads:
            env = new_event(field, payload, cluster="local", workload=key, source="bench")
            env.sequence = len(out) + 1
            out.append(env)
    return out


def _fold(envs: list[events_pb2.Envelope]) -> WorkloadBook:
    book = WorkloadBook(finished_kept=len(envs))
    for env in envs:
        book.apply(env)
    return book


def run(*, scale: float) -> Iterator[BookRow]:
    for size in SIZES:
        workloads = max(1, round(size * scale))
        envs = stream(workloads)
        fold_s = list_s = float("inf")
        book = WorkloadBook()
        for _ in range(_TRIES):
            started = time.perf_counter()
            book = _fold(envs)
            fold_s = min(fold_s, time.perf_counter() - started)
            started = time.perf_counter()
            summaries(matching(book, services_pb2.ListWorkloadsRequest()), {})
            list_s = min(list_s, time.perf_counter() - started)
        del book
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = _fold(envs)
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        yield BookRow(
            section=SECTION,
            workloads=workloads,
            events=len(envs),
            fold_s=round(fold_s, 3),
            events_per_s=round(len(envs) / fold_s),
            list_ms=round(list_s * 1000, 1),
            kib_per_workload=round(used / 1024 / max(1, len(kept)), 2),
        )


def columns() -> list[Column[BookRow]]:
    return [
        Column("workloads", lambda r: f"{r.workloads:,}".replace(",", " ")),
        Column("events", lambda r: f"{r.events:,}".replace(",", " ")),
        Column("fold s", lambda r: number(r.fold_s)),
        Column("events/s", lambda r: f"{r.events_per_s:,.0f}".replace(",", " ")),
        Column("list all ms", lambda r: number(r.list_ms, digits=1)),
        Column("KiB/workload", lambda r: number(r.kib_per_workload, digits=2)),
    ]


def render(rows: list[BookRow]) -> str:
    return render_table(columns(), rows)
