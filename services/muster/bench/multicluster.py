"""`muster bench multicluster`: one-pod Jobs through the services on Kubernetes, over a manager
and 3 worker clusters (MultiKueue), against the same Jobs on a single cluster in the same run.

Each cluster is an API-server stand-in in its own process, with its Job controller; each
cluster's watcher, gang-permit and binder, and admission and preemption, are service processes
(`muster service ...` with `--cluster-backend kube`), on one loopback nats-server. In the
multicluster case the manager's ClusterQueue has a MultiKueue admission check over the three
workers (each served from its own API server, with one node), so every Job is dispatched and
its copy created, started, placed and bound in a worker, and, managed by MultiKueue
(`spec.managedBy`), has its copy's status mirrored onto it in the manager; in the single case
the manager has the three nodes and binds the Jobs itself. The Jobs (100m cpu) are created in
the manager, 64 in flight, after every service serves (and, multicluster, every worker is
Active). The services' writes are not rate-limited (`--kube-write-qps 0`): at the default
50/s, the manager's watcher (each Job's Workload and its status changes) bounds both cases
alike.

Rows: throughput = Jobs / (last bound - first create); dispatch->bound = the `bound` event's
time minus the `admitted` one's (`Envelope.time_unix_nano`, one host clock), p50 and p99. The
stand-ins run no kubelet, so a Job's pods are bound, not Running: binding is muster's last act.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from muster.api.wellknown import MULTIKUEUE_CONTROLLER
from muster.bench.e2e import percentile
from muster.bench.kube import standin
from muster.bench.table import Column, number, render_table
from muster.bus import BusConfig, connect
from muster.bus.service import run_loop
from muster.bus.subjects import workload_filters
from muster.cluster.kube import KubeBackend, KubeConfig
from muster.cluster.kube.resources import resource_for_kind
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import ServiceProcess, Stack, service_argv

SECTION = "multicluster"
MANAGER = "local"
WORKERS = ("east", "west", "north")
NAMESPACE = "team-a"
IN_FLIGHT = 64
POLL_S = 0.05
READY_S = 60.0  # every worker Active, at most this long after the services serve
PER_CLUSTER = ("watcher", "gangpermit", "binder")
# Writes unthrottled: at the default 50/s the manager's watcher (a Workload and its status
# changes per Job) would be what is measured, the same in both cases.
UNLIMITED = ("--kube-write-qps", "0")


class MultiClusterRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    case: str  # "single" or "multikueue"
    clusters: int  # the clusters the Jobs ran in
    jobs: int
    bound: int  # Jobs whose pods were bound before the case's time ran out
    seconds: float  # first create to last bound
    jobs_per_s: float
    p50_ms: float  # dispatch (admitted) -> bound
    p99_ms: float
    vs_single_pct: float | None = None  # multikueue: throughput as a share of single's


def not_valid(row: MultiClusterRow) -> str | None:
    """Why a row is not a measurement: Jobs left unbound when the case's time ran out."""
    if row.bound == row.jobs:
        return None
    missing = row.jobs - row.bound
    return f"{row.case}: {missing} of {row.jobs} Jobs not bound before the case's time ran out"


def manager_objects(*, workers: Sequence[str], jobs: int, nodes: int) -> list[dict[str, Any]]:
    """The manager's namespace, flavor and queues; with `workers`, its MultiKueue check."""
    queue: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": jobs}]}
                ],
            }
        ],
    }
    objects: list[dict[str, Any]] = [
        _kueue("ResourceFlavor", "default"),
        _kueue("LocalQueue", "main", namespace=NAMESPACE, spec={"clusterQueue": "global"}),
    ]
    if workers:
        queue["admissionChecks"] = ["dispatch"]
        parameters = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}
        controller = MULTIKUEUE_CONTROLLER
        objects += [
            _kueue("AdmissionCheck", "dispatch", spec={"controllerName": controller,
                                                       "parameters": parameters}),
            _kueue("MultiKueueConfig", "workers", spec={"clusters": list(workers)}),
            *(_kueue("MultiKueueCluster", w) for w in workers),
        ]  # fmt: skip
    else:
        objects += [node(f"{MANAGER}-{i}", jobs=jobs, nodes=nodes) for i in range(nodes)]
    return [_namespace(), *objects, _kueue("ClusterQueue", "global", spec=queue)]


def node(name: str, *, jobs: int, nodes: int) -> dict[str, Any]:
    """A node with room for its share of the Jobs (100m each), and some to spare."""
    pods = math.ceil(jobs / nodes) + 10
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": str(math.ceil(pods / 10) + 1), "memory": "64Gi", "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job(i: int, *, managed: bool = False) -> dict[str, Any]:
    """Job `i`; `managed`: by MultiKueue (`spec.managedBy`), so the manager mirrors its status."""
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "resources": {"requests": {"cpu": "100m"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"job-{i:05d}",
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": "main"},
        },
        "spec": {
            "suspend": True,
            **({"managedBy": MULTIKUEUE_CONTROLLER} if managed else {}),
            "template": {
                "spec": {
                    "schedulerName": "muster",
                    "restartPolicy": "Never",
                    "containers": [container],
                }
            },
        },
    }


def _namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def _kueue(
    kind: str, name: str, *, namespace: str = "", spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": kind, "metadata": meta,
            "spec": spec or {}}  # fmt: skip


def services(urls: dict[str, str], *, nats_url: str, log_dir: Path) -> list[ServiceProcess]:
    """Watcher, gang-permit and binder of each cluster, on its own API server."""
    return [
        ServiceProcess(
            name=f"{name}-{cluster}",
            argv=service_argv(
                name,
                nats_url=nats_url,
                cluster=cluster,
                extra=["--cluster-backend", "kube", "--kube-host", url, *UNLIMITED],
            ),
            log_dir=log_dir,
            cluster=cluster,
        )
        for cluster, url in urls.items()
        for name in PER_CLUSTER
    ]


@contextlib.asynccontextmanager
async def standins(clusters: Sequence[str], *, history: int) -> AsyncIterator[dict[str, str]]:
    """A stand-in per cluster (its own process, its Job controller); cluster -> URL."""
    async with contextlib.AsyncExitStack() as stack:
        urls = {
            c: await stack.enter_async_context(standin(history=history, job_controller=True))
            for c in clusters
        }
        yield urls


async def run_case(*, workers: Sequence[str], jobs: int, timeout_s: float) -> MultiClusterRow:
    """One case: `workers` empty is the single cluster (see the module docstring)."""
    log_dir = Path(tempfile.mkdtemp(prefix="muster-bench-multicluster-"))
    nats = NatsServer(log_dir / "jetstream")
    url = await nats.start(log_path=log_dir / "nats-server.log")
    clusters = [MANAGER, *workers]
    try:
        async with standins(clusters, history=8 * jobs + 1000) as urls:
            backends = {c: await KubeBackend.connect(KubeConfig(host=u)) for c, u in urls.items()}
            try:
                row = await _case(backends, urls, workers, jobs, nats_url=url, log_dir=log_dir,
                                  timeout_s=timeout_s)  # fmt: skip
            finally:
                for backend in backends.values():
                    await backend.close()
    finally:
        await nats.stop()
    shutil.rmtree(log_dir, ignore_errors=True)  # kept when the case failed
    return row


async def _case(
    backends: dict[str, KubeBackend],
    urls: dict[str, str],
    workers: Sequence[str],
    jobs: int,
    *,
    nats_url: str,
    log_dir: Path,
    timeout_s: float,
) -> MultiClusterRow:
    # The single cluster has as many nodes as the workers together (one each), as large.
    for obj in manager_objects(workers=workers, jobs=jobs, nodes=len(WORKERS)):
        await backends[MANAGER].create(obj)
    for w in workers:
        await backends[w].create(_namespace())
        await backends[w].create(node(f"{w}-1", jobs=jobs, nodes=len(WORKERS)))
    stack = Stack(
        nats_url=nats_url, cluster=MANAGER, shards=1, speed=1.0, log_dir=log_dir,
        only={"admission", "preemption"},
    )  # fmt: skip
    stack.services[:0] = services(urls, nats_url=nats_url, log_dir=log_dir)
    try:
        await stack.start()
        await _all_active(backends[MANAGER], workers)
        return await _measure(backends[MANAGER], workers, jobs, nats_url, timeout_s=timeout_s)
    finally:
        await stack.stop()


async def _all_active(manager: KubeBackend, workers: Sequence[str]) -> None:
    """Wait until every worker's MultiKueueCluster is Active (its heartbeats arrive)."""
    resource = resource_for_kind("MultiKueueCluster", kueue_version=manager.config.kueue_version)
    async with asyncio.timeout(READY_S):
        for w in workers:
            while True:
                response = await manager.transport.request("GET", resource.object_path(w), obj=w)
                conditions = (response.json().get("status") or {}).get("conditions") or []
                if any(c["type"] == "Active" and c["status"] == "True" for c in conditions):
                    break
                await asyncio.sleep(POLL_S)


async def _measure(
    manager: KubeBackend, workers: Sequence[str], jobs: int, nats_url: str, *, timeout_s: float
) -> MultiClusterRow:
    bus = await connect(BusConfig(url=nats_url, name="muster-bench"))
    try:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def create(i: int) -> None:
            async with gate:
                await manager.create(job(i, managed=bool(workers)))

        started_ns = time.time_ns()
        await asyncio.gather(*(create(i) for i in range(jobs)))
        times = await _wait_bound(bus, jobs, timeout_s=timeout_s)
    finally:
        await bus.close()
    admitted, bound = times
    latencies = [(bound[k] - admitted[k]) / 1e6 for k in bound if k in admitted]
    seconds = (max(bound.values()) - started_ns) / 1e9 if bound else float("nan")
    return MultiClusterRow(
        case="multikueue" if workers else "single",
        clusters=len(workers) or 1,
        jobs=jobs,
        bound=len(bound),
        seconds=seconds,
        jobs_per_s=len(bound) / seconds if bound else 0.0,
        p50_ms=percentile(latencies, 0.5),
        p99_ms=percentile(latencies, 0.99),
    )


async def _wait_bound(
    bus: Any, jobs: int, *, timeout_s: float
) -> tuple[dict[str, int], dict[str, int]]:
    """(workload -> its first `admitted` time, workload -> its first `bound` time), once every
    Job is bound or `timeout_s` passed (the row then shows how many were)."""
    admitted: dict[str, int] = {}
    bound: dict[str, int] = {}
    subjects = [*workload_filters("*", "admitted"), *workload_filters("*", "bound")]
    position = 1
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while len(bound) < jobs:
                end = await bus.last_sequence()
                if end >= position:
                    async for env in bus.replay(
                        subjects, from_sequence=position, until_sequence=end
                    ):
                        seen = admitted if env.type == "workload.admitted" else bound
                        seen.setdefault(env.workload, env.time_unix_nano)
                    position = end + 1
                await asyncio.sleep(POLL_S)
    return admitted, bound


def run(*, scale: float) -> Iterator[MultiClusterRow]:
    """The single cluster, then the manager and its workers, with the same Jobs."""
    jobs = max(6, round(1000 * scale))
    timeout_s = 60.0 + jobs * 0.5
    single = run_loop(run_case(workers=(), jobs=jobs, timeout_s=timeout_s))
    yield single
    multi = run_loop(run_case(workers=WORKERS, jobs=jobs, timeout_s=timeout_s))
    share = 100.0 * multi.jobs_per_s / single.jobs_per_s if single.jobs_per_s else None
    yield msgspec.structs.replace(multi, vs_single_pct=share)


def render(rows: list[MultiClusterRow]) -> str:
    columns: list[Column[MultiClusterRow]] = [
        Column("CASE", lambda r: r.case, numeric=False),
        Column("CLUSTERS", lambda r: str(r.clusters)),
        Column("JOBS", lambda r: str(r.jobs)),
        Column("BOUND", lambda r: str(r.bound)),
        Column("SECONDS", lambda r: number(r.seconds)),
        Column("JOBS/S", lambda r: number(r.jobs_per_s, digits=1)),
        Column("P50 MS", lambda r: number(r.p50_ms, digits=0)),
        Column("P99 MS", lambda r: number(r.p99_ms, digits=0)),
        Column("VS SINGLE", _share),
    ]
    return render_table(columns, rows)


def _share(row: MultiClusterRow) -> str:
    return "-" if row.vs_single_pct is None else f"{row.vs_single_pct:.0f}%"
