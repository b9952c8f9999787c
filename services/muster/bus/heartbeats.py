"""What every reader of the `MUSTER_CLUSTERS` heartbeats shares: the cap on one heartbeat's
bytes (`--heartbeat-max-bytes`, the same flag on admission and the gateway) and the pace at
which a follower of the bucket decodes each cluster's (`PacedHeartbeats`)."""

from __future__ import annotations

import argparse

from muster.bus.service import Flag
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES


def max_bytes(text: str) -> int:
    """`--heartbeat-max-bytes`'s value: a positive number of bytes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of bytes, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


HEARTBEAT_MAX_BYTES_FLAG = Flag(
    "--heartbeat-max-bytes",
    "N",
    max_bytes,
    "MUSTER_HEARTBEAT_MAX_BYTES",
    str(HEARTBEAT_MAX_BYTES),
    "a worker cluster's heartbeat larger than this, head and parts, is refused as a bad one "
    "(its last good room stands; the cluster views show it Refused)",
)
