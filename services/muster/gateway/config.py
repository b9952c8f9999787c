"""The gateway's own settings (`GatewayConfig`), checked once when built, and the listen
address they name. Read by `__main__` (flags), the server and the servicers."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.subjects import DEFAULT_CLUSTER, check_cluster
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.book import FINISHED_RETENTION_S
from muster.gateway.claims import NameClaims, name_claims
from muster.gateway.kube_visibility_server import VisibilityServing

DEFAULT_LISTEN: Final = "127.0.0.1:50051"
DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_CALLS: Final = 256  # a Watch holds a thread of its own while it follows
GrpcServer = Literal["threads", "aio"]
GRPC_SERVERS: Final[tuple[GrpcServer, ...]] = ("threads", "aio")


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway's own settings (the common ones are in the bus's ServiceConfig)."""

    listen: str = DEFAULT_LISTEN  # HOST:PORT; port 0 picks a free one
    security: SecurityConfig = SecurityConfig()  # none: loopback only, everyone an admin
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # larger requests: RESOURCE_EXHAUSTED
    cluster: str = DEFAULT_CLUSTER  # Submit's cluster when the request names none
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES  # the bus's limit on one envelope
    grace_s: float = 10.0  # how long unary calls in flight may take at shutdown
    # Calls in flight at once (a following Watch counted); past them a call is refused with
    # RESOURCE_EXHAUSTED (loop_server). Watches take at most half of them (watch_slots).
    max_calls: int = DEFAULT_MAX_CALLS
    # How long the workload book keeps a finished workload (book.py, "Memory")
    finished_retention_s: float = FINISHED_RETENTION_S
    # "kube": Submit writes into the API server of `security.kube` as the caller (kube_submit)
    cluster_backend: Literal["sim", "kube"] = "sim"
    # Kueue's visibility API for the API server's aggregation layer (kube_visibility_server)
    visibility: VisibilityServing | None = None
    # A worker's heartbeat larger than this (head and parts) is shown Refused (cluster_cache)
    heartbeat_max_bytes: int = HEARTBEAT_MAX_BYTES
    # Where Submit claims a name: "kv" (as before), "both", "submitted" (gateway/known.py)
    name_claims: NameClaims = "kv"
    # What serves gRPC: "threads", gRPC's threaded server handing each call to the loop
    # (loop_server), or "aio", grpc.aio's on the loop itself (aio_server); docs/benchmarks.md,
    # "grpc.aio's server as an option", says why threads stay the default.
    grpc_server: GrpcServer = "threads"

    def __post_init__(self) -> None:
        host, _ = split_listen(self.listen)
        check_cluster(self.cluster)
        if self.cluster_backend not in ("sim", "kube"):
            raise ValueError(f"cluster backend must be sim or kube, got {self.cluster_backend!r}")
        if self.visibility is not None:
            split_listen(self.visibility.listen)
        name_claims(self.name_claims)
        grpc_server(self.grpc_server)
        if self.max_calls < 1:
            raise ValueError(f"max calls must be >= 1, got {self.max_calls}")
        if not self.finished_retention_s >= 0:  # NaN too
            raise ValueError(
                f"finished retention must be >= 0 seconds, got {self.finished_retention_s:g}"
            )
        if self.max_request_bytes < 1:
            raise ValueError(f"max request bytes must be >= 1, got {self.max_request_bytes}")
        self.security.check_listen(host)


def split_listen(listen: str) -> tuple[str, int]:
    """Return (host, port) of "HOST:PORT" ("[::1]:0" too); ValueError when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f'listen address must be HOST:PORT, got "{listen}"')
    return host, int(port)


def grpc_server(value: str) -> GrpcServer:
    """`value` as a GrpcServer; ValueError naming both when it is neither."""
    for known in GRPC_SERVERS:
        if value == known:
            return known
    raise ValueError(f"grpc server must be threads or aio, got {value!r}")
