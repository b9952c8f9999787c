"""The placement section: the gang scheduler alone, in the shape of Kubernetes' scheduler_perf.

5 000 nodes (4 cpu, 32Gi, 110 pods) with 1 000 pods already bound, then 10 000 pods of 100m cpu
and 500Mi measured; and 5 000 nodes with 1 000, 2 000 and 3 000 gangs of 3 such pods. Then the
same at cluster scale (issue 19): 50 000 nodes with 10 000 pods bound and 100 000 pods measured,
and 50 000 nodes with 1 000 gangs of 32. Each case runs "batched" (everything pending, then one
pass) and "streamed" (one pod or gang reported, then one pass, each in turn). The wall time
covers reporting the pods, the passes, and reporting every permitted pod bound, as the binder
would; building the objects and the cluster is left out. RSS is the process's after the case,
with its scheduler still alive.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from muster.bench.memory import rss_mib
from muster.bench.table import Column, number, render_table
from muster.core.placement.model import (
    ONE_POD,
    PODS,
    Decision,
    GangKey,
    GangPermitted,
    GangSpec,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
)
from muster.core.placement.scheduler import GangScheduler

SECTION = "placement"
MILLI_CPU = 100
MEMORY = 500 * 2**20 * 1000  # 500Mi in milli-units
NODE_ALLOCATABLE = {"cpu": 4_000, "memory": 32 * 2**30 * 1000, PODS: 110 * ONE_POD}

Case = Literal["pods", "gangs"]
Mode = Literal["batched", "streamed"]
MODES: tuple[Mode, ...] = ("batched", "streamed")


class PlacementRow(msgspec.Struct, frozen=True, kw_only=True):
    """One case in one mode; `-o json` prints exactly these fields."""

    section: str = SECTION
    case: str  # "pods" (placed on their own), "gangs", or a gang API case (`podgroups`)
    api: str = ""  # a gang API case's: "v1beta1" (today's objects) or "v1alpha1" (v1.35's)
    mode: str  # "batched" or "streamed"
    scoring: str
    scale: float
    nodes: int
    placed_before: int  # pods bound before the measurement
    pods: int  # pods measured
    gangs: int  # gangs measured (0 for the pods case)
    gang_size: int = 0  # pods per gang (0 for the pods case)
    permitted: int  # measured pods permitted
    passes: int
    wall_s: float
    pods_per_s: float
    ms_per_gang: float | None
    rss_mib: float | None = None  # the process's resident memory after the case
    target_pods_per_s: float | None = None  # the pods case's target at scale 1
    target_ms_per_gang: float | None = None  # a gangs case's target at scale 1


@dataclass(frozen=True, slots=True)
class Size:
    """One cluster size and the work measured on it, at scale 1, with its targets."""

    nodes: int
    placed: int  # pods bound before the pods case
    pods: int  # pods measured in the pods case
    gang_counts: tuple[int, ...]
    gang_size: int
    pods_per_s: float  # target, one core
    ms_per_gang: float  # target, one core


SIZES = (
    Size(
        nodes=5_000,
        placed=1_000,
        pods=10_000,
        gang_counts=(1_000, 2_000, 3_000),
        gang_size=3,
        pods_per_s=1_500.0,
        ms_per_gang=3.0,
    ),
    Size(  # issue 19: placement at the size of a large cluster
        nodes=50_000,
        placed=10_000,
        pods=100_000,
        gang_counts=(1_000,),
        gang_size=32,
        pods_per_s=5_000.0,
        ms_per_gang=5.0,
    ),
)


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


def cluster(nodes: int, placed: int, *, scoring: Scoring) -> GangScheduler:
    """A scheduler with `nodes` identical nodes and `placed` pods bound round-robin on them."""
    scheduler = GangScheduler(scoring=scoring)
    for i in range(nodes):
        scheduler.upsert_node(
            NodeInfo(name=NodeName(f"node-{i:05d}"), allocatable=NODE_ALLOCATABLE)
        )
    for i in range(placed):
        scheduler.upsert_pod(pod(f"placed/p-{i:05d}", node=f"node-{i % nodes:05d}"))
    scheduler.schedule(now_s=0.0)
    return scheduler


def pod(
    key: str, *, gang: GangKey | None = None, node: str = "", created_s: float = 0.0
) -> PodInfo:
    return PodInfo(
        key=PodKey(key),
        gang=gang,
        created_s=created_s,
        requests={"cpu": MILLI_CPU, "memory": MEMORY},
        node=NodeName(node) if node else "",
    )


class Feed:
    """Reports units to a scheduler, runs passes, and binds what is permitted; counts both."""

    def __init__(self, scheduler: GangScheduler) -> None:
        self.scheduler = scheduler
        self.pods: dict[PodKey, PodInfo] = {}
        self.permitted = 0
        self.passes = 0

    def report(self, specs: Sequence[GangSpec], pods: Sequence[PodInfo]) -> None:
        for spec in specs:
            self.scheduler.upsert_gang(spec)
        for p in pods:
            self.pods[p.key] = p
            self.scheduler.upsert_pod(p)

    def schedule(self, now_s: float) -> None:
        decisions: list[Decision] = self.scheduler.schedule(now_s=now_s)
        self.passes += 1
        for decision in decisions:
            if isinstance(decision, GangPermitted):
                for binding in decision.bindings:
                    bound = msgspec.structs.replace(self.pods[binding.pod], node=binding.node)
                    self.scheduler.upsert_pod(bound)
                    self.permitted += 1


Unit = tuple[tuple[GangSpec, ...], tuple[PodInfo, ...]]


def pod_units(count: int) -> list[Unit]:
    return [((), (pod(f"ns/p-{i:06d}", created_s=float(i)),)) for i in range(count)]


def gang_units(count: int, size: int) -> list[Unit]:
    units: list[Unit] = []
    for g in range(count):
        key = GangKey(f"ns/g-{g:05d}")
        spec = GangSpec(key=key, min_count=size, created_s=float(g))
        members = tuple(pod(f"ns/g-{g:05d}-{i}", gang=key) for i in range(size))
        units.append(((spec,), members))
    return units


def measure(scheduler: GangScheduler, units: list[Unit], mode: Mode) -> tuple[float, Feed]:
    """Feed `units` in `mode`; the wall time of the whole feed."""
    feed = Feed(scheduler)
    started = time.perf_counter()
    if mode == "batched":
        for specs, pods in units:
            feed.report(specs, pods)
        feed.schedule(1.0)
    else:
        for n, (specs, pods) in enumerate(units):
            feed.report(specs, pods)
            feed.schedule(1.0 + n)
    return time.perf_counter() - started, feed


def run_case(
    case: Case, mode: Mode, size: Size, *, units: int, scale: float, scoring: Scoring
) -> PlacementRow:
    nodes = scaled(size.nodes, scale)
    placed = scaled(size.placed, scale) if case == "pods" else 0
    scheduler = cluster(nodes, placed, scoring=scoring)
    work = pod_units(units) if case == "pods" else gang_units(units, size.gang_size)
    wall_s, feed = measure(scheduler, work, mode)
    pods = sum(len(p) for _, p in work)
    gangs = case == "gangs"
    return PlacementRow(
        case=case,
        mode=mode,
        scoring=scoring,
        scale=scale,
        nodes=nodes,
        placed_before=placed,
        pods=pods,
        gangs=units if gangs else 0,
        gang_size=size.gang_size if gangs else 0,
        permitted=feed.permitted,
        passes=feed.passes,
        wall_s=round(wall_s, 4),
        pods_per_s=round(pods / wall_s, 1) if wall_s > 0 else 0.0,
        ms_per_gang=round(1000 * wall_s / units, 4) if gangs else None,
        rss_mib=round(rss_mib(), 1),
        target_pods_per_s=None if gangs else size.pods_per_s,
        target_ms_per_gang=size.ms_per_gang if gangs else None,
    )


def run(*, scale: float, scoring: Scoring = "binpack") -> Iterator[PlacementRow]:
    """Every size, case and mode at `scale`, one row each, as each finishes (the gang API's
    rows follow: `podgroups.run`)."""
    for size in SIZES:
        for mode in MODES:
            pods = scaled(size.pods, scale)
            yield run_case("pods", mode, size, units=pods, scale=scale, scoring=scoring)
        for count in size.gang_counts:
            for mode in MODES:
                units = scaled(count, scale)
                yield run_case("gangs", mode, size, units=units, scale=scale, scoring=scoring)


# --- the table -------------------------------------------------------------------------------


def render(rows: list[PlacementRow]) -> str:
    """The table, then one line per row saying whether it meets its target."""
    columns: list[Column[PlacementRow]] = [
        Column("CASE", lambda r: r.case, numeric=False),
        Column("API", lambda r: r.api or "-", numeric=False),
        Column("MODE", lambda r: r.mode, numeric=False),
        Column("NODES", lambda r: str(r.nodes)),
        Column("PLACED", lambda r: str(r.placed_before)),
        Column("PODS", lambda r: str(r.pods)),
        Column("GANGS", gangs_cell),
        Column("PERMITTED", lambda r: str(r.permitted)),
        Column("WALL(s)", lambda r: number(r.wall_s, digits=2)),
        Column("PODS/s", lambda r: number(r.pods_per_s, digits=0)),
        Column("MS/GANG", lambda r: number(r.ms_per_gang, digits=3)),
        Column("RSS(MiB)", lambda r: number(r.rss_mib, digits=0)),
    ]
    notes = [target_note(row) for row in rows]
    if any(row.scale != 1.0 for row in rows):
        notes.append("(counts scaled with --scale; the targets are for scale 1)")
    return render_table(columns, rows) + "\n" + "".join(f"{note}\n" for note in notes)


def gangs_cell(row: PlacementRow) -> str:
    if row.gang_size:
        return f"{row.gangs}x{row.gang_size}"
    return str(row.gangs) if row.gangs else "-"


def target_note(row: PlacementRow) -> str:
    if row.api:
        return _api_note(row, f"{row.case} {row.api} {row.mode}")
    gangs = f", {row.gangs} gangs of {row.gang_size}" if row.gangs else ""
    name = f"{row.case} {row.mode} ({row.nodes} nodes{gangs})"
    if row.ms_per_gang is not None and row.target_ms_per_gang is not None:
        target = row.target_ms_per_gang
        met = "met" if row.ms_per_gang <= target else "MISSED"
        shown = number(row.ms_per_gang, digits=3)
        return f"{name}: <= {target:g} ms per gang: {met} ({shown})"
    target = row.target_pods_per_s or 0.0
    met = "met" if row.pods_per_s >= target else "MISSED"
    shown = number(row.pods_per_s, digits=0)
    return f"{name}: >= {target:g} pods/s: {met} ({shown})"


# The gang API's cases (`podgroups`) and their targets, in ms per gang or per decision.
GANGS_CASE, BIG_CASE, TREE_CASE = "podgroups of 8", "podgroup of 1000, racks", "tree 16x8"
API_TARGET_MS = {GANGS_CASE: 1.0, BIG_CASE: 50.0, TREE_CASE: 20.0}


def _api_note(row: PlacementRow, name: str) -> str:
    target = API_TARGET_MS.get(row.case)
    unit = "per gang" if row.case == GANGS_CASE else "per decision"
    shown = number(row.ms_per_gang, digits=3)
    if target is None or row.ms_per_gang is None:
        return f"{name}: {shown} ms {unit}"
    met = "met" if row.ms_per_gang <= target else "MISSED"
    return f"{name}: <= {target:g} ms {unit}: {met} ({shown})"
