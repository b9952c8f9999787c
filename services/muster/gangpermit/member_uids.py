"""Each gang's pod uids folded into one number as pods join and leave it, so that an event id
can name the gang's pods without reading them all. Pure.

A "k of N pods pending" `gang_waiting` is published about once per pass while a big gang's
pods are made (about 400 at 100 000 pods); deriving each id from every uid, sorted and hashed,
cost O(N log N) each. The fold is a sum of the uids' hashes modulo 2^128: order-free, so a
gang-permit restarted on the same pods, met in any order, derives the same ids.
"""

from __future__ import annotations

import hashlib
from typing import Final

from muster.core.placement.model import GangKey, PodKey

MODULUS: Final = 1 << 128


def uid_hash(uid: str) -> int:
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:16], "big")


class MemberUids:
    """Per gang: how many of its pods are counted and the sum of their uids' hashes."""

    def __init__(self) -> None:
        self._sums: dict[GangKey, tuple[int, int]] = {}  # gang -> (pods, sum)
        self._counted: dict[PodKey, tuple[GangKey, int]] = {}  # pod -> its gang, its hash

    def set(self, pod: PodKey, gang: GangKey | None, uid: str) -> None:
        """`pod` is now of `gang` with `uid` (None or "": counted in no gang)."""
        now = (gang, uid_hash(uid)) if gang is not None and uid else None
        old = self._counted.get(pod)
        if old == now:
            return
        if old is not None:
            del self._counted[pod]
            self._add(old[0], -1, -old[1])
        if now is not None:
            self._counted[pod] = now
            self._add(now[0], 1, now[1])

    def digest(self, gang: GangKey) -> str:
        """The gang's pods, as counted: "<pods>:<sum>" ("0:0" when none)."""
        pods, total = self._sums.get(gang, (0, 0))
        return f"{pods}:{total:032x}"

    def _add(self, gang: GangKey, pods: int, value: int) -> None:
        count, total = self._sums.get(gang, (0, 0))
        count += pods
        if count:
            self._sums[gang] = (count, (total + value) % MODULUS)
        else:
            self._sums.pop(gang, None)
