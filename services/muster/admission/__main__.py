"""`muster service admission` (or `python -m muster.admission`): flags → AdmissionConfig → run.

The common service flags plus `--shard I --shards N`, `--lease-ttl-seconds`,
`--cluster-lost-seconds` (MultiKueue: docs/multicluster.md), `--routing-policy`
(docs/routing.md), `--snapshot-seconds` (admission/snapshot.py) and `--kueue-config FILE`
(Kueue's `Configuration`: fair sharing, waitForPodsReady, feature gates; in Kubernetes, mount
it from a ConfigMap as Kueue's controller does).
"""

from __future__ import annotations

import argparse
import sys

from muster.admission.service import AdmissionConfig, run_admission
from muster.api import kueue_config_from_file
from muster.bus.connection import Bus
from muster.bus.heartbeats import HEARTBEAT_MAX_BYTES_FLAG
from muster.bus.service import Flag, Health, ServiceConfig, parse_service, run_service
from muster.cluster.choose import on_off
from muster.core.routing import POLICIES, Policy

NAME = "admission"
DESCRIPTION = (
    "Kueue's admission for a shard of cohort trees: consumes workload and configuration "
    "events, publishes admissions, pending reasons and preemptions."
)


def routing_policy(text: str) -> Policy:
    """`--routing-policy`'s value: a policy's name (docs/routing.md)."""
    if text not in POLICIES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(POLICIES)}, got {text!r}")
    return Policy(text)


FLAGS = (
    Flag("--shard", "I", int, "MUSTER_ADMISSION_SHARD", "0",
         "this replica's shard index, 0..N-1"),
    Flag("--shards", "N", int, "MUSTER_ADMISSION_SHARDS", "1",
         "how many shards the cohort trees are split into"),
    Flag("--lease-ttl-seconds", "S", float, "MUSTER_ADMISSION_LEASE_TTL_SECONDS", "5",
         "how long a dead replica's shard lease outlives it; renewed every second"),
    Flag("--kueue-config", "FILE", str, "MUSTER_KUEUE_CONFIG", None,
         "Kueue Configuration (config.kueue.x-k8s.io) to decide with"),
    Flag("--cluster-lost-seconds", "S", float, "MUSTER_CLUSTER_LOST_SECONDS", "10",
         "MultiKueue: a worker cluster whose heartbeat is older is lost; its workloads requeue"),
    HEARTBEAT_MAX_BYTES_FLAG,
    Flag("--routing-policy", "|".join(POLICIES), routing_policy, "MUSTER_ROUTING_POLICY", "static",
         "how workloads with muster.dev/alternatives are routed where their ClusterQueue names "
         "no muster.dev/routing-policy"),
    Flag("--snapshot-seconds", "S", float, "MUSTER_SNAPSHOT_SECONDS", "300",
         "how often the state is stored in MUSTER_SNAPSHOTS, so that a restart does not depend "
         "on the stream's retention; 0: never, and none is read"),
    Flag("--round-gap-seconds", "S", float, "MUSTER_ADMISSION_ROUND_GAP_SECONDS", "0",
         "a round starts no sooner than this after the one before, unless --round-fill events "
         "wait: fewer, larger rounds under a stream of events; 0: none waits"),
    Flag("--round-fill", "N", int, "MUSTER_ADMISSION_ROUND_FILL", "8",
         "events that start a round before --round-gap-seconds (or the stretch) has passed"),
    Flag("--round-stretch", "on|off", on_off, "MUSTER_ADMISSION_ROUND_STRETCH", "on",
         "one of N shards: a round starts no sooner than N times as long as the one before "
         "took, at most --round-stretch-most-seconds more, unless --round-fill events wait: "
         "rounds as full as a lone replica's"),
    Flag("--round-stretch-most-seconds", "S", float,
         "MUSTER_ADMISSION_ROUND_STRETCH_MOST_SECONDS", "0.1",
         "what the stretch may add to a round's latency, at most (0 < S <= 1)"),
)  # fmt: skip


def admission_config(args: argparse.Namespace, service: ServiceConfig) -> AdmissionConfig:
    kueue = None
    if args.kueue_config:
        kueue, errors = kueue_config_from_file(args.kueue_config)
        if kueue is None:
            raise ValueError("; ".join(str(e) for e in errors))
    return AdmissionConfig(
        shard=args.shard,
        shards=args.shards,
        cluster=service.cluster,
        lease_ttl_s=args.lease_ttl_seconds,
        lease_renew_s=min(1.0, args.lease_ttl_seconds / 3),
        kueue=kueue,
        cluster_lost_s=args.cluster_lost_seconds,
        heartbeat_max_bytes=args.heartbeat_max_bytes,
        routing_policy=args.routing_policy,
        snapshot_s=args.snapshot_seconds,
        round_gap_s=args.round_gap_seconds,
        round_fill=args.round_fill,
        round_stretch=args.round_stretch,
        round_stretch_most_s=args.round_stretch_most_seconds,
    )


def configs(argv: list[str]) -> tuple[ServiceConfig, AdmissionConfig]:
    """The service and admission configs the flags ask for; exits 2 on a bad flag."""
    return parse_service(
        argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=admission_config
    )


def main(argv: list[str] | None = None) -> int:
    """Run one admission replica until SIGTERM; the exit status (2 for bad flags)."""
    service, config = configs(sys.argv[1:] if argv is None else argv)

    async def body(bus: Bus, health: Health) -> None:
        await run_admission(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
