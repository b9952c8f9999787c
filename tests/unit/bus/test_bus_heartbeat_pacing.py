"""`PacedHeartbeats`, the shell every follower of the heartbeats shares: the first value of a
cluster passes at once, the rest of its gap are held (the latest of each key kept, parts
before their head) and pass together at the cluster's turn; clusters are paced apart."""

from __future__ import annotations

import asyncio

from muster.bus.heartbeats import PacedHeartbeats

GAP_S = 0.05


async def test_a_clusters_puts_within_its_gap_pass_once_at_its_turn_the_latest_kept() -> None:
    taken: list[tuple[str, bytes | None]] = []
    turn = asyncio.Event()

    def take(key: str, value: bytes | None) -> None:
        taken.append((key, value))
        if len(taken) == 4:
            turn.set()

    paced = PacedHeartbeats(take, gap_s=GAP_S)
    try:
        paced.heard("east", b"h0")
        paced.heard("west", b"w0")  # another cluster: its own pace
        for n in range(1, 50):
            paced.heard("east.part.0", b"p%d" % n)
            paced.heard("east", b"h%d" % n)
        assert taken == [("east", b"h0"), ("west", b"w0")]
        await asyncio.wait_for(turn.wait(), timeout=30)
        assert taken[2:] == [("east.part.0", b"p49"), ("east", b"h49")]
        paced.heard("east", None)  # deleted: within the gap again, held
        assert len(taken) == 4
    finally:
        paced.close()
