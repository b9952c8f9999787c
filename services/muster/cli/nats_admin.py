"""`muster nats-config` and `muster nats-setup`: NATS with one user per muster service.

`nats-config` writes the nats-server `authorization` block that gives each service its own user
and only the subjects it uses (muster.bus.permissions), to include from a server's config; with
`--matrix`, the permission table of docs/events.md instead. `nats-setup` connects as the admin
user and creates the streams, buckets and object store the services then bind to; then it
writes the claims of names live from before `MUSTER_NAMES` (`gateway.claims_backfill`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from muster.bus import connect
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES as MAX_EVENT_BYTES
from muster.bus.errors import BusError, SetupError
from muster.bus.natsconf import AUTH_MODES, HEADER, authorization, matrix
from muster.bus.permissions import Deployment, users
from muster.bus.service import COMMON_FLAGS, add_flags, bus_config_from_args
from muster.bus.setup import DEFAULT_LEASE_TTL_S, setup_nats

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_CONNECTION_FLAGS = {
    "--nats", "--nats-creds", "--nats-user", "--nats-password", "--nats-token", "--nats-tls-ca",
    "--nats-tls-cert", "--nats-tls-key", "--nats-connect-timeout", "--stream-replicas",
}  # fmt: skip


def _add_deployment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        dest="clusters",
        metavar="ID",
        action="append",
        help="a cluster id with its own watcher, binder and gang-permit (repeat; default local)",
    )
    parser.add_argument(
        "--simulated",
        metavar="ID",
        action="append",
        default=[],
        help="a cluster whose nodes and pods are simulated (MUSTER_SIM_<id>; repeat)",
    )
    parser.add_argument(
        "--admission-shards", type=int, default=1, metavar="N", help="admission shards (1)"
    )


def _deployment(args: argparse.Namespace) -> Deployment:
    clusters = tuple(args.clusters or ["local"])
    simulated = tuple(args.simulated)
    return Deployment(
        clusters=tuple(dict.fromkeys((*clusters, *simulated))),
        simulated=simulated,
        admission_shards=args.admission_shards,
    )


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    config = commands.add_parser(
        "nats-config",
        help="write the NATS users and permissions of every muster service",
        description="Write nats-server's `authorization` block: one user per muster service (per "
        "cluster for watcher, binder, gang-permit), allowed only the subjects it uses, and the "
        "admin user for `muster nats-setup`. Include it from the server's configuration.",
    )
    _add_deployment(config)
    config.add_argument(
        "--auth",
        choices=[a for a in AUTH_MODES if a != "password"],
        default="tls",
        help="tls: users are TLS client certificates (subject CN=muster-<user>; the server "
        "needs tls.verify_and_map); env: passwords the server reads from "
        "NATS_PASSWORD_<USER> (default tls)",
    )
    config.add_argument("--matrix", action="store_true", help="print the docs' table instead")
    config.add_argument("-o", "--out", metavar="FILE", help="write here instead of stdout")
    config.set_defaults(handler=handle_config)

    setup = commands.add_parser(
        "nats-setup",
        help="create muster's streams, buckets and object store (as the NATS admin user)",
        description="Connect as the NATS admin user and create or update every stream, key-value "
        "bucket and object store muster's services use; with per-service users they may not "
        "create them themselves. Safe to run again (on upgrade).",
    )
    _add_deployment(setup)
    add_flags(setup, [f for f in COMMON_FLAGS if f.flag in _CONNECTION_FLAGS])
    setup.add_argument(
        "--lease-ttl-seconds",
        type=float,
        default=DEFAULT_LEASE_TTL_S,
        metavar="S",
        help=f"TTL of admission's shard leases (its --lease-ttl-seconds; {DEFAULT_LEASE_TTL_S:g})",
    )
    setup.set_defaults(handler=handle_setup)


def handle_config(args: argparse.Namespace) -> int:
    try:
        deployment = _deployment(args)
    except ValueError as exc:
        print(f"muster nats-config: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = (
        matrix() + "\n"
        if args.matrix
        else HEADER + authorization(users(deployment), auth=args.auth)
    )
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def handle_setup(args: argparse.Namespace) -> int:
    try:
        deployment = _deployment(args)
        args.cluster = "local"
        # It reads MUSTER_EVENTS (the claims' backfill): every event a service may read.
        args.max_event_bytes = MAX_EVENT_BYTES
        bus_config = bus_config_from_args(args, "nats-setup")
    except ValueError as exc:
        print(f"muster nats-setup: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        done = asyncio.run(_setup(bus_config, deployment, args.lease_ttl_seconds))
    except (ConnectionError, SetupError, BusError) as exc:
        print(f"muster nats-setup: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for line in done:
        print(f"ok  {line}")
    return EXIT_OK


async def _setup(config: Any, deployment: Deployment, lease_ttl_s: float) -> list[str]:
    from muster.bus.buckets import NAMES_BUCKET  # the gateway's modules: only here
    from muster.gateway.claims_backfill import backfill_claims

    bus = await connect(config)
    try:
        done = await setup_nats(
            bus.js,
            deployment=deployment,
            replicas=config.stream_replicas,
            lease_ttl_s=lease_ttl_s,
        )
        # Once per upgrade in effect: a name claimed already is left as it is.
        claims = await backfill_claims(bus)
        done.append(
            f"claims of names live from before {NAMES_BUCKET}: {claims.written} written, "
            f"{claims.held} held already (MUSTER_EVENTS read to #{claims.sequence})"
        )
        return done
    finally:
        await bus.close()
