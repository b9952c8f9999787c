"""How many Events.Watch calls the gateway lets run at once, in all and per user.

A following Watch holds one of the server's `max_calls` until its client leaves. Without a
cap of their own, one client opening `max_calls` watches (a script, or a dashboard tab per
SSE reconnect) left every other caller RESOURCE_EXHAUSTED, Submit included. Watches may
therefore take half of the calls, and one user a quarter of that; the API server likewise
keeps long-running requests (watches) apart from its max-requests-inflight.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

WATCH_SHARE: Final = 2  # watches take at most 1/WATCH_SHARE of the calls in flight
USER_SHARE: Final = 4  # one user takes at most 1/USER_SHARE of the watches


class WatchLimitError(Exception):
    """A Watch refused: too many already run (in all, or for this user)."""


class WatchSlots:
    """Counts the Watches in progress; `take` one before following, `give` it back after."""

    def __init__(self, max_calls: int) -> None:
        self.total = max(1, max_calls // WATCH_SHARE)
        self.per_user = max(1, self.total // USER_SHARE)
        self._by_user: Counter[str] = Counter()

    def take(self, user: str) -> None:
        """Count one more Watch of `user`, or WatchLimitError saying which limit it passes."""
        if self._by_user[user] >= self.per_user:
            raise WatchLimitError(
                f"Events.Watch: user {user!r} already has {self._by_user[user]} watches open,"
                f" at most {self.per_user} at once; end one (or watch several namespaces in one)"
            )
        if self._by_user.total() >= self.total:
            raise WatchLimitError(
                f"Events.Watch: the gateway serves {self.total} watches, its most at once"
                " (half its --max-calls); try again later"
            )
        self._by_user[user] += 1

    def give(self, user: str) -> None:
        self._by_user[user] -= 1
        if self._by_user[user] <= 0:
            del self._by_user[user]
