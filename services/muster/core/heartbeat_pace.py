"""How often a reader decodes one cluster's heartbeat: at most once per gap, the latest kept.

A gang-permit puts its heartbeat every few seconds, up to ten times a second while its passes
run. One that puts it far more often (broken, or hostile: NATS lets each cluster's gang-permit
write its own keys only, not at a pace) cost a follower of the bucket (admission's registry)
a decode of every changed head and part, and a vetting of every node, per write: a 5 000-node
room a thousand times a second is seconds of CPU a second. A pace per cluster bounds it: a
head heard within `gap_s` of the cluster's last one taken is held, and so are its parts, each
key's latest value replacing the one before; they are taken together once the gap has passed
(the shell asks `due_in` when to come back). Nothing is lost but writes that a later one
replaced, which a reader of the latest room never needed; a healthy cluster's room is at most
`gap_s` older than written, far inside `--cluster-lost-seconds`. Pure: the caller passes the
time.
"""

from __future__ import annotations

from typing import Final

from muster.core.heartbeat_parts import cluster_of_part

# As often as a healthy gang-permit puts its heartbeat (ten a second while its passes run).
HEARTBEAT_GAP_S: Final = 0.1

Value = tuple[str, bytes | None]  # a key of the bucket and its value (None: deleted)


class HeartbeatPace:
    """Which of the bucket's values to take now; the others held until their cluster's turn."""

    def __init__(self, gap_s: float = HEARTBEAT_GAP_S) -> None:
        self.gap_s = gap_s
        self._taken_at: dict[str, float] = {}  # cluster -> when its last head was taken
        self._held: dict[str, dict[str, bytes | None]] = {}  # cluster -> key -> latest value

    def heard(self, key: str, value: bytes | None, *, now_s: float) -> list[Value]:
        """The values to take now, parts before their head, after `key` was put `value`: none
        for a part (it comes with its head) or a head within the gap; else the cluster's held
        values and this one."""
        part = cluster_of_part(key)
        cluster = key if part is None else part
        held = self._held.setdefault(cluster, {})
        held.pop(key, None)  # the latest last: a head after the parts it names
        held[key] = value
        if part is not None or now_s - self._taken_at.get(cluster, -self.gap_s) < self.gap_s:
            return []
        return self._take(cluster, now_s)

    def due_in(self, now_s: float) -> float | None:
        """Seconds until a held head may be taken (0: now); None when no head is held."""
        waits = [
            max(0.0, self._taken_at.get(cluster, -self.gap_s) + self.gap_s - now_s)
            for cluster, held in self._held.items()
            if cluster in held
        ]
        return min(waits, default=None)

    def due(self, now_s: float) -> list[Value]:
        """The held values of every cluster whose gap has passed and which holds a head."""
        return [
            value
            for cluster in sorted(self._held)
            if cluster in self._held[cluster]
            and now_s - self._taken_at.get(cluster, -self.gap_s) >= self.gap_s
            for value in self._take(cluster, now_s)
        ]

    def _take(self, cluster: str, now_s: float) -> list[Value]:
        self._taken_at[cluster] = now_s
        return list(self._held.pop(cluster).items())
