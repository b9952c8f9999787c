"""`muster service gateway` (or `python -m muster.gateway`): flags → GatewayConfig → run.

The common service flags (`--nats`, `--cluster`, `--health-port`, ...) plus the gateway's own,
each with its MUSTER_GATEWAY_* environment variable: where to listen, TLS, who may call
(`--tokens-file`, `--client-ca`, `--authentication kube`, the legacy `--token`) and what they
may do (`--policy-file`, `--authorization kube`), and the API server for the kube modes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Literal, cast

from muster.bus.client import MusterClient
from muster.bus.connection import Bus
from muster.bus.heartbeats import HEARTBEAT_MAX_BYTES_FLAG
from muster.bus.redact import register
from muster.bus.service import (
    Flag,
    Health,
    add_common_flags,
    add_flags,
    config_from_args,
    run_service,
)
from muster.cluster.choose import BACKEND_FLAGS, BACKENDS, on_off
from muster.cluster.kube.settings import KUEUE_VERSIONS, KubeConfig
from muster.gateway.auth_certs import TlsFiles
from muster.gateway.auth_config import (
    AUTHENTICATION_MODES,
    AUTHORIZATION_MODES,
    AuthenticationMode,
    AuthorizationMode,
    SecurityConfig,
)
from muster.gateway.book import FINISHED_KEPT, FINISHED_RETENTION_S
from muster.gateway.claims import name_claims
from muster.gateway.config import (
    DEFAULT_LISTEN,
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_REQUEST_BYTES,
    GatewayConfig,
    grpc_server,
)
from muster.gateway.kube_visibility_server import VisibilityServing
from muster.gateway.service import run_gateway


def _choice_flag(parse: Callable[[str], str]) -> Callable[[str], str]:
    """A choice flag as argparse shows a bad one: the values named, where a plain ValueError
    was shown as "invalid name_claims value" alone."""

    def flag(value: str) -> str:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    flag.__name__ = parse.__name__
    return flag


_claims_flag = _choice_flag(name_claims)


GATEWAY_FLAGS = (
    Flag("--listen", "HOST:PORT", str, "MUSTER_GATEWAY_LISTEN", DEFAULT_LISTEN,
         'where to serve gRPC; port 0 picks a free one, printed as "gateway: HOST:PORT"; '
         "without authentication only a loopback address"),
    Flag("--max-request-bytes", "N", int, "MUSTER_GATEWAY_MAX_REQUEST_BYTES",
         str(DEFAULT_MAX_REQUEST_BYTES),
         "largest request accepted; larger ones fail with RESOURCE_EXHAUSTED"),
    HEARTBEAT_MAX_BYTES_FLAG,
    Flag("--max-calls", "N", int, "MUSTER_GATEWAY_MAX_CALLS", str(DEFAULT_MAX_CALLS),
         "calls in flight at once, each Watch one while it follows (watches at most half, "
         "one user's a quarter of those); more fail with RESOURCE_EXHAUSTED"),
    Flag("--finished-retention-seconds", "S", float,
         "MUSTER_GATEWAY_FINISHED_RETENTION_SECONDS", f"{FINISHED_RETENTION_S:g}",
         "how long after it finishes a workload is still listed and described (at most the "
         f"last {FINISHED_KEPT} finished); then NOT_FOUND, as Kueue's objectRetentionPolicies "
         "deletes a finished Workload; its events stay in the stream"),
    Flag("--name-claims", "kv|both|submitted", _claims_flag, "MUSTER_GATEWAY_NAME_CLAIMS", "kv",
         "where a Submit claims a workload's name: kv, in MUSTER_NAMES (as gateways from before "
         "2026-11-27); both, there and by its fenced submitted; submitted, by the latter alone, "
         "one write; each runs beside the next one only (docs/events.md, \"One-write claims\")"),
    Flag("--grpc-server", "threads|aio", _choice_flag(grpc_server),
         "MUSTER_GATEWAY_GRPC_SERVER", "threads",
         "threads: gRPC's threaded server, each call handed to the event loop; aio: grpc.aio's "
         "server on the loop itself (the same answers; docs/benchmarks.md, \"grpc.aio's server "
         "as an option\", says which costs less)"),
)  # fmt: skip
SECURITY_FLAGS = (
    Flag("--tls-cert", "FILE", str, "MUSTER_GATEWAY_TLS_CERT", None,
         "serve TLS with this PEM certificate (chain); reloaded when it changes"),
    Flag("--tls-key", "FILE", str, "MUSTER_GATEWAY_TLS_KEY", None,
         "the PEM private key of --tls-cert"),
    Flag("--client-ca", "FILE", str, "MUSTER_GATEWAY_CLIENT_CA", None,
         "require a client certificate signed by this CA (mutual TLS): its CN is the user, "
         "its O entries the groups"),
    Flag("--tokens-file", "FILE", str, "MUSTER_GATEWAY_TOKENS_FILE", None,
         "bearer tokens (by SHA-256) with their user and groups; reloaded when it changes"),
    Flag("--token", "SECRET", str, "MUSTER_GATEWAY_TOKEN", None,
         "legacy: one bearer token, whose holder is an admin (muster:legacy-token)"),
    Flag("--authentication", "|".join(AUTHENTICATION_MODES), str,
         "MUSTER_GATEWAY_AUTHENTICATION", "static",
         "kube: also accept Kubernetes bearer tokens, checked with TokenReview"),
    Flag("--authorization", "|".join(AUTHORIZATION_MODES), str,
         "MUSTER_GATEWAY_AUTHORIZATION", "policy",
         "policy: the --policy-file; kube: ask the API server (SubjectAccessReview)"),
    Flag("--policy-file", "FILE", str, "MUSTER_GATEWAY_POLICY_FILE", None,
         "who may submit, watch, ... where; reloaded when it changes (without: admins only)"),
    Flag("--allow-anonymous", "on|off", on_off, "MUSTER_GATEWAY_ALLOW_ANONYMOUS", "off",
         "without any authentication, serve anonymous admins on a non-loopback address too: "
         "only where the network limits who reaches it (a container port published on "
         "127.0.0.1)"),
    *(f for f in BACKEND_FLAGS
      if f.flag in ("--kube-host", "--kubeconfig", "--kube-context", "--kube-in-cluster")),
)  # fmt: skip
VISIBILITY_FLAGS = (
    Flag("--visibility-listen", "HOST:PORT", str, "MUSTER_GATEWAY_VISIBILITY_LISTEN", None,
         "serve Kueue's visibility API (visibility.kueue.x-k8s.io) over HTTPS here, for the "
         "API server's aggregation layer (an APIService); off without it"),
    Flag("--visibility-tls-cert", "FILE", str, "MUSTER_GATEWAY_VISIBILITY_TLS_CERT", None,
         "its PEM certificate (chain)"),
    Flag("--visibility-tls-key", "FILE", str, "MUSTER_GATEWAY_VISIBILITY_TLS_KEY", None,
         "the PEM private key of --visibility-tls-cert"),
    Flag("--visibility-client-ca", "FILE", str, "MUSTER_GATEWAY_VISIBILITY_CLIENT_CA", None,
         "the front proxy's CA (requestheader-client-ca); default: read from ConfigMap "
         "kube-system/extension-apiserver-authentication"),
    Flag("--visibility-allowed-names", "CN,...", str, "MUSTER_GATEWAY_VISIBILITY_ALLOWED_NAMES",
         None, "CNs the front proxy's certificate may have (default: the ConfigMap's, or any)"),
)  # fmt: skip
# Where Submit goes: "kube" writes what it receives into the API server (as the caller), as the
# per-cluster services' --cluster-backend says where their cluster is.
CLUSTER_FLAGS = tuple(
    f for f in BACKEND_FLAGS if f.flag in ("--cluster-backend", "--kueue-version")
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster service gateway",
        description="The gRPC API: Submit manifests, read queue status and pending workloads, "
        "watch events.",
    )
    add_common_flags(parser)
    add_flags(parser.add_argument_group("gateway options"), GATEWAY_FLAGS)
    add_flags(parser.add_argument_group("who may call, and what they may do"), SECURITY_FLAGS)
    add_flags(parser.add_argument_group("where Submit writes"), CLUSTER_FLAGS)
    add_flags(parser.add_argument_group("Kueue's visibility API"), VISIBILITY_FLAGS)
    return parser


def security_config(args: argparse.Namespace) -> SecurityConfig:
    """The SecurityConfig of the flags; ValueError naming the flag when they do not fit."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        raise ValueError("--client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    if args.authentication not in AUTHENTICATION_MODES:
        raise ValueError(f"--authentication must be static or kube, got {args.authentication!r}")
    if args.authorization not in AUTHORIZATION_MODES:
        raise ValueError(f"--authorization must be policy or kube, got {args.authorization!r}")
    host = args.kube_host or ""
    if host and not host.startswith(("http://", "https://")):
        raise ValueError(f"--kube-host must be an http:// or https:// URL, got {host!r}")
    tls = None
    if args.tls_cert:
        tls = TlsFiles(cert=args.tls_cert, key=args.tls_key, client_ca=args.client_ca or "")
    return SecurityConfig(
        token=args.token,
        tokens_file=args.tokens_file or "",
        tls=tls,
        authentication=cast(AuthenticationMode, args.authentication),
        authorization=cast(AuthorizationMode, args.authorization),
        policy_file=args.policy_file or "",
        allow_anonymous=args.allow_anonymous,
        kube=KubeConfig(
            host=host,
            kubeconfig=args.kubeconfig or "",
            context=args.kube_context or "",
            in_cluster=args.kube_in_cluster,
            kueue_version=args.kueue_version,
        ),
    )


def visibility_serving(args: argparse.Namespace) -> VisibilityServing | None:
    """The visibility API's settings, or None when it is off; ValueError naming the flag."""
    if not args.visibility_listen:
        return None
    if not (args.visibility_tls_cert and args.visibility_tls_key):
        raise ValueError("--visibility-listen needs --visibility-tls-cert and --visibility-tls-key")
    names = tuple(n.strip() for n in (args.visibility_allowed_names or "").split(",") if n.strip())
    return VisibilityServing(
        listen=args.visibility_listen,
        tls_cert=args.visibility_tls_cert,
        tls_key=args.visibility_tls_key,
        client_ca=args.visibility_client_ca or "",
        allowed_names=names,
    )


def cluster_backend(args: argparse.Namespace) -> Literal["sim", "kube"]:
    """--cluster-backend; ValueError naming the flag when it is neither sim nor kube."""
    if args.cluster_backend not in BACKENDS:
        raise ValueError(f"--cluster-backend must be sim or kube, got {args.cluster_backend!r}")
    if args.kueue_version not in KUEUE_VERSIONS:
        raise ValueError(
            f"--kueue-version must be one of {', '.join(KUEUE_VERSIONS)}, "
            f"got {args.kueue_version!r}"
        )
    return cast(Literal["sim", "kube"], args.cluster_backend)


def main(argv: list[str] | None = None) -> int:
    """Run the gateway until SIGTERM; returns the exit status (2 for bad flags)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        service = config_from_args(args, "gateway")
        config = GatewayConfig(
            listen=args.listen,
            security=security_config(args),
            max_request_bytes=args.max_request_bytes,
            max_calls=args.max_calls,
            finished_retention_s=args.finished_retention_seconds,
            heartbeat_max_bytes=args.heartbeat_max_bytes,
            name_claims=args.name_claims,
            grpc_server=grpc_server(args.grpc_server),
            cluster=service.cluster,
            max_event_bytes=service.bus.max_event_bytes,
            grace_s=service.grace_s,
            cluster_backend=cluster_backend(args),
            visibility=visibility_serving(args),
        )
    except ValueError as exc:
        parser.error(str(exc))  # exits 2

    register(args.token)  # never in a log line (muster.bus.redact)

    async def body(bus: Bus, health: Health) -> None:
        if isinstance(bus.nc, MusterClient):  # Submits reaching the loop together share writes
            bus.nc.flush_late = True
        await run_gateway(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
