"""Fault injection and a request log, driven by a test while the server runs (thread-safe).

    server.faults.fail_next(3, status=429, retry_after_s=1, verb="patch", path="/status$")
    server.faults.reset_next(verb="list")           # close the connection without answering
    server.faults.drop_next_watch(after_events=2)   # cut the next watch after two events
    server.faults.set_latency(0.05)                 # before every answer

`verb` is the Kubernetes verb (get, list, watch, create, update, patch, delete,
deletecollection); `path` a regular expression searched in the URL path.
"""

from __future__ import annotations

import re
import threading
from collections import deque

import msgspec


class _Rule:
    __slots__ = (
        "after_events",
        "kind",
        "partial",
        "path",
        "remaining",
        "retry_after_s",
        "status",
        "verb",
    )

    def __init__(
        self,
        kind: str,
        remaining: int,
        *,
        verb: str | None,
        path: str | None,
        status: int = 0,
        retry_after_s: int | None = None,
        after_events: int = 0,
        partial: bool = False,
    ) -> None:
        if remaining < 1:
            raise ValueError("count must be at least 1")
        self.kind = kind
        self.remaining = remaining
        self.verb = verb
        self.path = re.compile(path) if path is not None else None
        self.status = status
        self.retry_after_s = retry_after_s
        self.after_events = after_events
        self.partial = partial

    def matches(self, verb: str, path: str) -> bool:
        return (self.verb is None or self.verb == verb) and (
            self.path is None or bool(self.path.search(path))
        )


class Injected(msgspec.Struct, frozen=True):
    """What the server must do instead of answering normally."""

    kind: str  # "fail" (answer `status`), "reset" (close the connection), "drop_watch"
    status: int = 0
    retry_after_s: int | None = None
    after_events: int = 0
    partial: bool = False


class Faults:
    """Rules consumed in the order they were added; each applies to its next `count` matches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._latency: list[tuple[float, str | None, re.Pattern[str] | None]] = []
        self.injected = 0  # faults applied so far

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 500,
        retry_after_s: int | None = None,
        verb: str | None = None,
        path: str | None = None,
    ) -> None:
        """Answer the next `count` matching requests with `status` (429 carries Retry-After
        when `retry_after_s` is given, as the real server's priority-and-fairness does)."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error code, got {status}")
        self._add(
            _Rule("fail", count, verb=verb, path=path, status=status, retry_after_s=retry_after_s)
        )

    def reset_next(
        self, count: int = 1, *, verb: str | None = None, path: str | None = None
    ) -> None:
        """Close the connection of the next `count` matching requests without an answer."""
        self._add(_Rule("reset", count, verb=verb, path=path))

    def drop_next_watch(
        self,
        count: int = 1,
        *,
        after_events: int = 0,
        partial: bool = False,
        path: str | None = None,
    ) -> None:
        """Cut the next `count` matching watches after `after_events` events (not counting
        bookmarks), without the closing chunk; with `partial`, after half of the next line."""
        if after_events < 0:
            raise ValueError("after_events must be >= 0")
        self._add(
            _Rule(
                "drop_watch",
                count,
                verb="watch",
                path=path,
                after_events=after_events,
                partial=partial,
            )
        )

    def set_latency(
        self, seconds: float, *, verb: str | None = None, path: str | None = None
    ) -> None:
        """Delay matching answers by `seconds` (0 removes the delays set so far)."""
        with self._lock:
            if seconds <= 0:
                self._latency.clear()
            else:
                self._latency.append(
                    (seconds, verb, re.compile(path) if path is not None else None)
                )

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._latency.clear()

    def pending(self) -> int:
        """How many injections are still to come."""
        with self._lock:
            return sum(r.remaining for r in self._rules)

    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def take(self, verb: str, path: str) -> Injected | None:
        """The fault to apply to this request, if any (consumes it)."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(verb, path):
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._rules.remove(rule)
                    self.injected += 1
                    return Injected(
                        rule.kind, rule.status, rule.retry_after_s, rule.after_events, rule.partial
                    )
        return None

    def latency_s(self, verb: str, path: str) -> float:
        with self._lock:
            return sum(
                s
                for s, v, p in self._latency
                if (v is None or v == verb) and (p is None or p.search(path))
            )


class Request(msgspec.Struct, frozen=True):
    """One answered request, for assertions (`code` 0: the connection was reset)."""

    verb: str
    path: str
    query: str
    code: int
    user: str = ""  # who it was judged as, when the server checks access ("" otherwise)


class RequestLog:
    """The last `limit` requests the server answered."""

    def __init__(self, limit: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._entries: deque[Request] = deque(maxlen=limit)

    def record(self, request: Request) -> None:
        with self._lock:
            self._entries.append(request)

    def entries(self) -> list[Request]:
        with self._lock:
            return list(self._entries)

    def count(
        self, *, verb: str | None = None, path: str | None = None, code: int | None = None
    ) -> int:
        pattern = re.compile(path) if path is not None else None
        return sum(
            1
            for r in self.entries()
            if (verb is None or r.verb == verb)
            and (pattern is None or pattern.search(r.path))
            and (code is None or r.code == code)
        )
