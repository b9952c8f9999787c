"""The gateway's gRPC server: Gateway.Submit, Visibility, Events.Watch and grpc.health.v1.

`GatewayServer` wires the servicers (`submit_servicer`, `visibility_servicer`,
`events_servicer`) to the bus (publish, replay, the visibility bucket), the authentication
interceptor (`auth`), the authorizer (`permissions`), TLS and the health service;
`run_gateway` is the body `run_service` runs. Every call is authorized: each object of a
Submit (PERMISSION_DENIED names the permission, the object and the namespace), the namespaces
a Watch shows, the queues a visibility answer lists. What a Submit publishes carries the
caller as its `submitter`, so the binder writes into the cluster as them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from muster.bus.buckets import CLUSTERS_BUCKET, VISIBILITY_BUCKET
from muster.bus.connection import Bus
from muster.bus.kv import Bucket
from muster.bus.partitions import QueuePartitions
from muster.bus.progress import Tracker, Wording
from muster.bus.subjects import EVENTS_STREAM
from muster.bus.supervision import supervised
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.aio_server import AioServer
from muster.gateway.auth_config import Security, open_reviews, open_security
from muster.gateway.claims import ClaimsClashError
from muster.gateway.config import GatewayConfig, split_listen
from muster.gateway.events_servicer import EventsServicer
from muster.gateway.known import KnownFollower
from muster.gateway.kube_visibility_server import VisibilityServing
from muster.gateway.loop_server import LoopServer
from muster.gateway.submit_servicer import GatewayBus, GatewayServicer
from muster.gateway.visibility import KeyValueStore, VisibilityStore
from muster.gateway.visibility_servicer import VisibilityServicer
from muster.gateway.watched import warn_if_unwatched
from muster.gateway.workloads import BookFollower

if TYPE_CHECKING:
    from muster.cluster.kube.backend import KubeBackend

log = logging.getLogger(__name__)

SUBMITS: Final = "gateway-submit"  # the watchdog's name for the Submits in hand
# "Submits gateway-submit stalled: 1 Submit waiting, ... (call 7 in hand)"
SUBMIT_CALLS: Final = Wording("Submits", "Submit", "call", "answer again")
PARTITIONS_LOAD_S: Final = 2.0  # at start, how long to wait for the LocalQueues' partitions
SERVICE_NAMES: Final = tuple(
    d.full_name for d in services_pb2.DESCRIPTOR.services_by_name.values()
)  # muster.v1.Gateway, muster.v1.Visibility, muster.v1.Events


class HealthStatus(Protocol):
    """The service runtime's health (`muster.bus.service.Health`)."""

    servicer: HealthServicer

    def ready(self) -> None: ...

    def waiting(self, detail: str) -> None: ...


class GatewayServer:
    """The gateway's gRPC server over one bus connection; `start`, then `stop`."""

    def __init__(
        self,
        bus: GatewayBus,
        config: GatewayConfig,
        *,
        health: HealthServicer | None = None,
        submits: Tracker | None = None,
    ) -> None:
        self._bus = bus
        self._submits = submits
        self.config = config
        self.health = health or HealthServicer()
        self._events: EventsServicer | None = None
        self._server: LoopServer | AioServer | None = None
        self._exits = contextlib.AsyncExitStack()
        self._kube: KubeBackend | None = None
        self.visibility_address = ""  # Kueue's visibility API, when served
        self.security: Security | None = None
        self.address = ""
        # The workload book (ListWorkloads, DescribeWorkload, Stop, ...): read from the stream
        # from its first event on, from the first call that needs it until `stop`.
        self.follower = BookFollower(
            bus, finished_retention_s=config.finished_retention_s, manager=config.cluster
        )
        # Submit's duplicates, from the first Submit on (or the start check), its claims of names
        self.known = KnownFollower(bus, claims=config.name_claims)
        self._clusters: Bucket | None = None  # MUSTER_CLUSTERS, opened when first asked
        # Why Submits are refused: a gateway of a --name-claims mode this one may not run beside
        self.clashed: str | None = None
        self._clash_told: list[Callable[[str], None]] = []
        self.partitions = QueuePartitions()

    async def start(self) -> str:
        """Listen, report SERVING for every service; return the address ("HOST:PORT").

        Raises ValueError for a bad security file, ClusterError when a kube mode finds no
        API server configuration, OSError when it cannot listen.
        """
        store = KeyValueStore(await self._bus.kv(VISIBILITY_BUCKET))
        if self.config.cluster_backend == "sim":  # Submit publishes workloads: their partitions
            await self._follow_partitions()
            # Refused beside a gateway claiming names where this one does not look (and told
            # of one seen later): Submit writes into NATS, so the claims are NATS's.
            self.known.on_clash = self._clashed
            try:
                await self.known.start_check()
            except BaseException:
                await self.known.stop()
                await self._exits.aclose()
                raise
        try:
            security = await self._exits.enter_async_context(open_security(self.config.security))
            if self.config.cluster_backend == "kube":
                self._kube = await self._open_kube()
            if self.config.visibility is not None:
                self.visibility_address = await self._serve_visibility(
                    store, self.config.visibility
                )
            address = await self._serve(store, security)
        except BaseException:
            await self._exits.aclose()
            raise
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.known.clashed is not None:  # read while starting to serve: not ready after all
            self._clashed(self.known.clashed)
        await warn_if_unwatched(self._bus, self.config.cluster)
        self.security = security
        self.address = address
        return address

    def _clashed(self, detail: str) -> None:
        """A gateway of a mode this one may not run beside was read: Submits are refused
        (`KnownFollower.publish`), so the gateway is not ready for them; Watch and the
        visibility calls still serve."""
        for name in ("", services_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name):
            status = health_pb2.HealthCheckResponse.NOT_SERVING
            supervised(self.health.set(name, status), name="gateway-health-clash")
        self.clashed = detail
        for tell in self._clash_told:
            tell(detail)

    def tell_clash(self, tell: Callable[[str], None]) -> None:
        """Call `tell` with what `clashed` says once it is set (at once if it is already)."""
        self._clash_told.append(tell)
        if self.clashed is not None:
            tell(self.clashed)

    async def _follow_partitions(self) -> None:
        """Follow the LocalQueues' partitions for the server's lifetime; wait a little for what
        is stored (a workload published in its stand-in partition is forwarded, only slower)."""
        follow = supervised(self.partitions.follow(self._bus.kv), name="gateway-partitions")

        async def stop() -> None:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow

        self._exits.push_async_callback(stop)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.partitions.loaded.wait(), PARTITIONS_LOAD_S)

    async def _open_kube(self) -> KubeBackend:
        """The API server Submit writes into, for the server's lifetime."""
        from muster.cluster.kube.backend import KubeBackend  # the client: on Kubernetes only

        backend = await KubeBackend.connect(self.config.security.kube)
        self._exits.push_async_callback(backend.close)
        return backend

    async def _serve_visibility(self, store: VisibilityStore, serving: VisibilityServing) -> str:
        """Kueue's visibility API over HTTPS, for the server's lifetime; its address."""
        from muster.gateway.kube_visibility_server import VisibilityServer, front_proxy_of

        reviews = await open_reviews(self.config.security.kube)
        self._exits.push_async_callback(reviews.close)
        proxy = await front_proxy_of(serving, reviews)
        server = VisibilityServer(store, reviews, serving=serving, front_proxy=proxy)
        address = await server.start()
        self._exits.push_async_callback(server.stop)
        return address

    async def _serve(self, store: VisibilityStore, security: Security) -> str:
        options = [
            ("grpc.max_receive_message_length", self.config.max_request_bytes),
            # BDP probing grows each stream's flow-control window to megabytes, which a
            # refused call's unread body then fills: 128 unauthenticated 4 MiB calls cost
            # 40 MiB kept after, against 2 MiB without (`muster bench gateway`).
            ("grpc.http2.bdp_probe", 0),
        ]
        server: LoopServer | AioServer
        if self.config.grpc_server == "aio":
            server = AioServer(
                security.authentication, max_calls=self.config.max_calls, options=options
            )
        else:
            server = LoopServer(
                asyncio.get_running_loop(),
                security.authentication,
                max_calls=self.config.max_calls,
                options=options,
            )
        authorizer = security.authorizer
        self._events = EventsServicer(self._bus, authorizer, max_calls=self.config.max_calls)
        services_pb2_grpc.add_GatewayServicer_to_server(
            GatewayServicer(
                self._bus,
                self.config,
                authorizer,
                self.follower,
                kube=self._kube,
                partitions=self.partitions,
                known=self.known,
                submits=self._submits,
            ),
            server,
        )
        services_pb2_grpc.add_VisibilityServicer_to_server(
            VisibilityServicer(
                store,
                authorizer,
                self.follower,
                self._clusters_bucket,
                heartbeat_max_bytes=self.config.heartbeat_max_bytes,
            ),
            server,
        )
        services_pb2_grpc.add_EventsServicer_to_server(self._events, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        host, port = split_listen(self.config.listen)
        try:
            if security.credentials is not None:
                bound = server.add_secure_port(f"{host}:{port}", security.credentials)
            else:
                bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:  # grpcio raises when it cannot bind
            raise OSError(f"cannot listen on {self.config.listen}: {exc}") from exc
        if bound == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        await server.start()
        self._server = server
        return f"{host}:{bound}"

    async def _clusters_bucket(self) -> Bucket:
        if self._clusters is None:
            self._clusters = await self._bus.kv(CLUSTERS_BUCKET)
        return self._clusters

    async def stop(self) -> None:
        """Report NOT_SERVING, end the watches, let unary calls finish within the grace period."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            if self._events is not None:
                self._events.end_watches()
            await self._server.stop(grace=self.config.grace_s)
            self._server = None
        await self.follower.stop()
        await self.known.stop()
        await self._exits.aclose()


def track_submits(bus: Bus) -> Tracker:
    """The watchdog's tracker of the Submits in hand (bus/progress.py), worded as calls."""
    return bus.progress.track(
        SUBMITS, stream=EVENTS_STREAM, consumer="", max_ack_pending=0, wording=SUBMIT_CALLS
    )


async def run_gateway(bus: Bus, health: HealthStatus, config: GatewayConfig) -> None:
    """Serve the gateway until cancelled; prints "gateway: HOST:PORT" once listening. Each
    Submit is in the watchdog's hands while it runs (a claim or a publish that hangs)."""
    submits = track_submits(bus)
    server = GatewayServer(bus, config, health=health.servicer, submits=submits)
    try:
        address = await server.start()
    except ClaimsClashError as exc:
        log.error("gateway not started: %s", exc)
        raise
    health.ready()
    server.tell_clash(health.waiting)  # NOT_SERVING, and why, from a clash on
    print(f"gateway: {address}", flush=True)
    if server.visibility_address:
        print(f"visibility: {server.visibility_address}", flush=True)
    log.info("gateway listening on %s", address)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()
