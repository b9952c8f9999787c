"""Which command first stopped each pod this binder stopped by uid (placement evictions), so
that each pod counts as stopped once. Pure.

On Kubernetes a pod stops gracefully: until its grace period ends it is still there, and a
second delete of it answers 200 as the first did. Counted by that answer alone, every copy or
re-send of a placement eviction arriving while its pods terminate said it stopped them again.
A uid names one pod for ever, so a pod stopped once is `gone` to any later command; the command
that stopped it, retried after a failure elsewhere, still counts it until it is answered.
Kept for the latest
`kept` pods (copies come within gang-permit's back-off, 5 min at most), and not across a
restart: a copy answered by a restarted binder may count a terminating pod once more (the
answer's `gone` is what it reports; docs/events.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

STOPPED_KEPT: Final = 100_000  # pods; about 14 MB when full


class StoppedPods:
    def __init__(self, *, kept: int = STOPPED_KEPT) -> None:
        self.kept = kept
        self._by_uid: dict[str, str] = {}  # pod uid -> the command that stopped it, oldest first

    def first_stop(self, uid: str, command: str) -> bool:
        """`command` deleted pod `uid` and the cluster answered it: whether that stopped it
        (no other command did before)."""
        by = self._by_uid.setdefault(uid, command)
        if by == command and len(self._by_uid) > self.kept:
            del self._by_uid[next(iter(self._by_uid))]
        return by == command

    def answered(self, uids: Iterable[str]) -> None:
        """The command that named `uids` is answered: a copy of it stops none of them again."""
        for uid in uids:
            if uid in self._by_uid:
                self._by_uid[uid] = ""  # no command's id
