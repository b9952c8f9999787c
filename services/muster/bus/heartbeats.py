"""What every reader of the `MUSTER_CLUSTERS` heartbeats shares: the cap on one heartbeat's
bytes (`--heartbeat-max-bytes`, the same flag on admission and the gateway) and the pace at
which a follower of the bucket decodes each cluster's (`PacedHeartbeats`)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from muster.bus.service import Flag
from muster.core.heartbeat_pace import HEARTBEAT_GAP_S, HeartbeatPace
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


class PacedHeartbeats:
    """A follower's heartbeats passed on to `take(key, value)`, each cluster's at most once
    each `gap_s`, the latest kept (`muster.core.heartbeat_pace`); a cluster's held values are
    passed on at its turn by a timer of the running loop. Admission's registry and the
    watcher's MultiKueueCluster status follow the bucket through it: a worker putting its
    heartbeat a thousand times a second costs each of them ten decodes a second, not a
    thousand. `close` cancels the timer."""

    def __init__(
        self, take: Callable[[str, bytes | None], None], *, gap_s: float = HEARTBEAT_GAP_S
    ) -> None:
        self._take = take
        self._pace = HeartbeatPace(gap_s=gap_s)
        self._loop = asyncio.get_running_loop()
        self._waiting: asyncio.TimerHandle | None = None  # for the next held head's turn

    def heard(self, key: str, value: bytes | None) -> None:
        """`key` was put `value` (None: deleted)."""
        for taken in self._pace.heard(key, value, now_s=self._loop.time()):
            self._take(*taken)
        self._come_back()

    def close(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None

    def _come_back(self) -> None:
        if self._waiting is None and (wait_s := self._pace.due_in(self._loop.time())) is not None:
            self._waiting = self._loop.call_later(wait_s, self._held_due)

    def _held_due(self) -> None:
        self._waiting = None
        for taken in self._pace.due(self._loop.time()):
            self._take(*taken)
        self._come_back()
