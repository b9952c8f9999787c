"""`muster run`'s live mode: NATS, the services, the driver, the report, and a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from muster.bus import Bus, BusConfig, connect
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.cancel import raise_if_cancelling
from muster.bus.permissions import ADMIN, Deployment
from muster.bus.setup import setup_nats
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.clusters import room_of
from muster.launcher.driver import (
    CLUSTER_ANNOTATION,
    Driver,
    kueue_configuration,
    multikueue_clusters,
    render_tracks,
)
from muster.launcher.nats_server import LaunchError, NatsServer
from muster.launcher.progress import Progress
from muster.launcher.reported import not_reported_warning, reported_when_up, until_reported
from muster.launcher.stack import SOLE_BINDERS_BOUND_EVENTS, SOLE_GATEWAYS_CLAIMS, Stack
from muster.launcher.upstate import distrusted

__all__ = ["LaunchError", "fresh_store", "prepare_nats", "run_live"]

# Admission's --cluster-lost-seconds in a live run with worker clusters: gang-permit's
# heartbeat comes every 2 s, so a cluster silent for 5 s is gone.
CLUSTER_LOST_S = 5.0


async def run_live(
    text: str,
    *,
    about: str,
    nats_url: str | None,
    speed: float,
    shards: int,
    cluster: str,
    until_s: float | None,
    log_dir: Path,
    render_queues: Callable[[services_pb2.QueueStatusResponse], str],
    out: Callable[[str], None] = print,
    clusters: Sequence[str] = (),
    routing_policy: str = "static",
) -> int:
    """Run `text` (scenario YAML) on the live services; 0 when every workload finished.

    With MultiKueue worker clusters (`clusters`, and the scenario's MultiKueueClusters), each
    runs its own per-cluster services; a worker's `muster.dev/lost-at-seconds` stops them then.
    `routing_policy` is admission's `--routing-policy`.
    """
    declared = multikueue_clusters(text)
    workers = sorted({*clusters, *declared} - {cluster})
    main = asyncio.current_task()
    # Everything started is stopped, in reverse, even when one stop raises: a failing
    # connection close during Ctrl-C once left the nats-server running.
    async with contextlib.AsyncExitStack() as started:
        if main is not None:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
            started.callback(loop.remove_signal_handler, signal.SIGTERM)
        # Our own server gets one NATS user per service; one given with --nats is used as it is.
        everywhere = (cluster, *workers)
        deployment = Deployment(clusters=everywhere, simulated=everywhere, admission_shards=shards)
        nats = None
        if nats_url is None:
            nats = NatsServer(fresh_store(log_dir, out), deployment=deployment)
            started.push_async_callback(_stop_nats, nats, log_dir)
            nats_url = await nats.start(log_path=log_dir / "nats-server.log")
        admin = await prepare_nats(nats_url, nats, deployment)
        started.push_async_callback(admin.close)
        # Ctrl-C while connecting, swallowed by nats-py: the services would start against a
        # nats-server the same Ctrl-C stopped, and the run end blaming the first to fail.
        raise_if_cancelling()
        stack = Stack(
            nats_url=nats_url,
            cluster=cluster,
            shards=shards,
            speed=speed,
            log_dir=log_dir,
            admission_args=[
                *_kueue_config_args(text, log_dir),
                *(["--cluster-lost-seconds", f"{CLUSTER_LOST_S:g}"] if workers else []),
                *("--routing-policy", routing_policy),
            ],
            workers=workers,
            passwords=nats.passwords if nats is not None else None,
            # On a server given with --nats, gateways of another muster may claim names too,
            # and its gateways and gang-permits may be of before.
            name_claims=SOLE_GATEWAYS_CLAIMS if nats is not None else None,
            bound_events=SOLE_BINDERS_BOUND_EVENTS if nats is not None else None,
        )
        started.push_async_callback(stack.stop)
        where = f" (started here, JetStream in {log_dir})" if nats else ""
        out(
            f"muster run: {about}\n  NATS {nats_url}{where}; {len(stack.services)} service "
            f"processes; {speed:g}x speed; logs in {log_dir}"
            + (f"\n  worker clusters: {', '.join(workers)} (and {cluster})" if workers else "")
        )
        await stack.start()
        out(f"  all services healthy; gateway on {stack.gateway_address}\n")
        backends: dict[str, SimBackend] = {}
        for name in (cluster, *workers):
            backends[name] = await SimBackend.open(admin.kv, cluster=name)
            started.push_async_callback(backends[name].close)
        # Ctrl-C during a connect: nats-py's waits may have swallowed it (Python 3.11).
        raise_if_cancelling()
        driver = Driver(
            gateway=stack.gateway_address,
            speed=speed,
            print_line=out,
            apply_nodes=_node_applier(
                backends,
                default=cluster,
                until_reported=_reported_waiter(admin, stack, out) if workers else None,
            ),
            multicluster=bool(workers),
        )
        losses: list[asyncio.Task[None]] = []
        started.push_async_callback(_cancel_all, losses)
        for name, at_s in sorted(declared.items()):
            if at_s is not None:
                losses.append(asyncio.create_task(_lose(stack, name, at_s / speed, out)))
        tracks = await driver.run(text, until_s=until_s)
        out("\n" + render_tracks(tracks, now_s=driver.now_s(), clusters=bool(workers)) + "\n")
        # A deactivated workload ended as its configuration asked: the run went as it should.
        all_done = all(t.outcome in {"Finished", "Inactive"} for t in tracks)
        out(render_queues(await _queue_status(stack.gateway_address, drained=all_done)))
        lost = {svc.name for svc in stack.services if svc.cluster in _lost_clusters(declared)}
        died = [name for name in stack.died() if name not in lost]
        if died:
            out(f"muster run: services exited early: {', '.join(died)} (see their logs)")
            return 1
        return 0 if until_s is not None or all_done else 1


def fresh_store(log_dir: Path, out: Callable[[str], None] = print) -> Path:
    """`log_dir`'s JetStream store, empty: a run starts as `muster up` does, without the
    events a killed run left there (they would replay into this run). Only that directory is
    removed; a `log_dir` that is not a directory, or that another user owns or may write, is
    refused."""
    if not log_dir.exists():
        log_dir.mkdir(mode=0o700, parents=True)
    if not log_dir.is_dir():
        raise LaunchError(f"log directory {log_dir}: is not a directory")
    refused = distrusted(log_dir)  # `muster up`'s check of its state directory
    if refused:
        raise LaunchError(f"log directory refused: {refused}")
    store = log_dir / "jetstream"
    if store.is_symlink() or store.exists():
        try:
            if store.is_dir() and not store.is_symlink():
                shutil.rmtree(store)
            else:  # a link or a file: itself, never what a link points at
                store.unlink()
        except OSError as exc:
            raise LaunchError(f"{store}: cannot remove a previous run's store: {exc}") from exc
        out(f"muster run: removed {store}, a previous run's store (a run starts empty)")
    return store


async def _stop_nats(nats: NatsServer, log_dir: Path) -> None:
    await nats.stop()
    # The logs stay for the user to read; the JetStream data is only this run's state.
    shutil.rmtree(log_dir / "jetstream", ignore_errors=True)


async def _cancel_all(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def prepare_nats(url: str, nats: NatsServer | None, deployment: Deployment) -> Bus:
    """Connect as the admin and create every stream and bucket the services will bind to (with
    per-service users they may not create them); the launcher writes its nodes as the admin."""
    config = BusConfig(url=url, name="muster-run")
    if nats is not None:
        config = BusConfig(url=url, name="muster-run", user=ADMIN, password=nats.admin_password)
    bus = await connect(config)
    try:
        await setup_nats(bus.js, deployment=deployment)
    except BaseException:
        await bus.close()
        raise
    return bus


def _kueue_config_args(text: str, log_dir: Path) -> list[str]:
    """The scenario's Kueue Configuration, as the admission service reads it: from a file."""
    config = kueue_configuration(text)
    if config is None:
        return []
    path = log_dir / "kueue-config.yaml"
    path.write_text(config)
    return ["--kueue-config", str(path)]


Expected = Mapping[str, set[str]]  # cluster -> the names of its schedulable Nodes


def _node_applier(
    backends: Mapping[str, SimBackend],
    *,
    default: str,
    until_reported: Callable[[Expected], Awaitable[None]] | None = None,
) -> Callable[[Sequence[dict[str, Any]]], Any]:
    """Write each Node into the store of the cluster its `muster.dev/cluster` names; with
    `until_reported` (several clusters), then wait until each cluster's heartbeat lists them."""

    async def apply(nodes: Sequence[dict[str, Any]]) -> None:
        expected: dict[str, set[str]] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            name = (meta.get("annotations") or {}).get(CLUSTER_ANNOTATION, default)
            backend = backends.get(name)
            if backend is None:
                known = ", ".join(sorted(backends))
                raise LaunchError(f"Node {meta.get('name')}: no cluster {name!r} ({known})")
            await backend.apply(node)
            if reported_when_up(node):
                expected.setdefault(name, set()).add(str(meta.get("name")))
        if until_reported is not None:
            await until_reported(expected)

    return apply


def _reported_waiter(
    admin: Bus, stack: Stack, out: Callable[[str], None]
) -> Callable[[Expected], Awaitable[None]]:
    """Wait until each cluster's gang-permit heartbeat lists its nodes, while that progresses
    (`muster.launcher.reported`); say which are missing when the wait stalls, and go on."""

    async def wait(expected: Expected) -> None:
        kv = await admin.kv(CLUSTERS_BUCKET)

        async def listed(cluster: str) -> list[str]:
            room = await room_of(kv, cluster)  # a large cluster's room in parts: read whole
            return [] if room is None else [node.name for node in room.nodes]

        def gangpermit_cpu_s(clusters: Collection[str]) -> float:
            return stack.cpu_s("gangpermit", clusters)

        bound = Progress()
        missing = await until_reported(listed, expected, cpu_s=gangpermit_cpu_s, progress=bound)
        if missing:
            out(not_reported_warning(missing, bound))

    return wait


async def _lose(stack: Stack, cluster: str, after_s: float, out: Callable[[str], None]) -> None:
    """Stop a worker cluster's services `after_s` real seconds in (its lost-at time)."""
    await asyncio.sleep(after_s)
    names = await stack.stop_cluster(cluster)
    out(f"  cluster {cluster} lost: stopped {', '.join(names)}")


def _lost_clusters(declared: Mapping[str, float | None]) -> set[str]:
    return {name for name, at_s in declared.items() if at_s is not None}


async def _queue_status(
    gateway: str, *, drained: bool, settle_s: float = 3.0
) -> services_pb2.QueueStatusResponse:
    """The gateway's queue status; when every workload finished, wait (a little) until the
    admission service has written that nothing is reserved any more."""
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = services_pb2_grpc.VisibilityStub(channel)
        deadline = asyncio.get_running_loop().time() + settle_s
        while True:
            reply: services_pb2.QueueStatusResponse = await stub.QueueStatus(
                services_pb2.QueueStatusRequest()
            )
            reserving = sum(cq.reserving_workloads for cq in reply.cluster_queues)
            if not drained or reserving == 0 or asyncio.get_running_loop().time() > deadline:
                return reply
            await asyncio.sleep(0.05)
