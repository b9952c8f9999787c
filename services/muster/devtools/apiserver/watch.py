"""Watch streams: what one `?watch=true` request receives, in resourceVersion order.

- no resourceVersion, or "0": ADDED for every current object, then changes;
- resourceVersion N: the kept changes after N, then live ones; N older than the history gives
  one ERROR event with a 410 Expired Status (inside a 200 stream, as the real server does);
- `sendInitialEvents=true`: current objects, then a BOOKMARK annotated
  `k8s.io/initial-events-end: "true"`;
- selectors apply to both sides of a change: an object that stops matching arrives as DELETED,
  one that starts matching as ADDED;
- BOOKMARK events (only `kind`, `apiVersion`, `metadata.resourceVersion`) every
  `bookmark_interval_s` when `allowWatchBookmarks=true`, and before a timeout ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

import msgspec

from muster.devtools.apiserver.errors import ApiError, invalid, required, unsupported
from muster.devtools.apiserver.objects import JsonObj, encode, namespace_of, resource_version_of
from muster.devtools.apiserver.resources import ResourceType, stamp_version
from muster.devtools.apiserver.selectors import FieldSelector, LabelSelector
from muster.devtools.apiserver.store import ADDED, DELETED, MODIFIED, Change, Store

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchQuery(msgspec.Struct, frozen=True, kw_only=True):
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()
    resource_version: str | None = None
    resource_version_match: str | None = None
    allow_bookmarks: bool = False
    send_initial_events: bool = False
    timeout_s: float | None = None


class WatchStream:
    """The pending events of one watch (a `ChangeSink`), drained by the HTTP layer."""

    def __init__(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        query: WatchQuery,
        *,
        current_rv: Callable[[], int],
        max_pending: int,
    ) -> None:
        self.rt = rt
        self.version = version
        self.namespace = namespace
        self.query = query
        self._current_rv = current_rv
        self._max_pending = max_pending
        self._pending: deque[bytes | tuple[str, Change]] = deque()
        self._wake = asyncio.Event()
        self.ended = False  # finish after what is pending
        self.aborted = False  # cut now, without the closing chunk
        self.events_sent = 0
        self.since = 0  # changes up to this resourceVersion are not sent
        self.drop_after_events: int | None = None
        self.drop_partial = False
        # Each event's object as sent, when not the object itself (`kubectl get -w`: a Table)
        self.render: Callable[[JsonObj], JsonObj] | None = None

    # --- producer side (runs inside store writes) ------------------------------------------

    def offer(self, change: Change) -> None:
        if change.rv <= self.since:
            return
        event_type = self._translate(change)
        if event_type is not None:
            self._push((event_type, change))

    def _matches(self, obj: JsonObj) -> bool:
        if self.namespace and namespace_of(obj) != self.namespace:
            return False
        return self.query.labels.matches(obj) and self.query.fields.matches(obj)

    def _translate(self, change: Change) -> str | None:
        was = change.old is not None and self._matches(change.old)
        if change.type == DELETED:
            return DELETED if was else None
        now = self._matches(change.obj)
        if change.type == ADDED or not was:
            return ADDED if now else None
        return MODIFIED if now else DELETED

    def _push(self, item: bytes | tuple[str, Change]) -> None:
        if self.ended:
            return
        self._pending.append(item)
        if len(self._pending) > self._max_pending:
            # A watcher this far behind is cut off, as the real server does; it re-watches.
            self._pending.clear()
            self.aborted = True
        self._wake.set()

    def bookmark(self, *, initial_events_end: bool = False) -> None:
        if not self.query.allow_bookmarks:
            return
        metadata: JsonObj = {"resourceVersion": str(self._current_rv())}
        if initial_events_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(self.version),
            "metadata": metadata,
        }
        self._push(encode({"type": "BOOKMARK", "object": obj}) + b"\n")

    def fail(self, error: ApiError) -> None:
        """Send one ERROR event with `error`'s Status, then end."""
        self._push(encode({"type": "ERROR", "object": error.status()}) + b"\n")
        self.end()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    def abort(self) -> None:
        self.aborted = True
        self._wake.set()

    # --- consumer side (the HTTP handler) --------------------------------------------------

    def _drain(self) -> list[bytes]:
        lines: list[bytes] = []
        limit = self.drop_after_events
        while self._pending and not self.aborted:
            item = self._pending.popleft()
            if isinstance(item, bytes):
                lines.append(item)
                continue
            event_type, change = item
            line = change.line(event_type, self.version)
            if self.render is not None:
                served = stamp_version(change.obj, self.rt, self.version)
                line = encode({"type": event_type, "object": self.render(served)}) + b"\n"
            if limit is not None and self.events_sent >= limit:  # partial: half of the next one
                lines.append(line[: len(line) // 2])
                self.aborted = True
                break
            lines.append(line)
            self.events_sent += 1
            if limit is not None and not self.drop_partial and self.events_sent >= limit:
                self.aborted = True
        return lines

    async def batches(
        self, *, bookmark_interval_s: float, default_timeout_s: float
    ) -> AsyncIterator[list[bytes]]:
        """Lines to write, batched; returns when the stream ends, times out or is aborted."""
        loop = asyncio.get_running_loop()
        timeout_s = self.query.timeout_s if self.query.timeout_s is not None else default_timeout_s
        deadline = loop.time() + timeout_s
        next_bookmark = loop.time() + bookmark_interval_s
        if self.drop_after_events == 0 and not self.drop_partial:
            self.aborted = True
        while True:
            lines = self._drain()
            if lines:
                yield lines
            if self.aborted or (self.ended and not self._pending):
                return
            if lines:
                continue
            now = loop.time()
            if now >= deadline:
                self.bookmark()
                self.end()
                continue
            if now >= next_bookmark:
                self.bookmark()
                next_bookmark = now + bookmark_interval_s
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(deadline, next_bookmark) - now)


def open_watch(
    store: Store,
    rt: ResourceType,
    version: str,
    namespace: str,
    query: WatchQuery,
    *,
    max_pending: int,
) -> WatchStream:
    """A stream with its initial events queued and subscribed to later changes, atomically
    (no change can fall between the two: this runs without yielding to the event loop)."""
    if query.send_initial_events:
        if query.resource_version_match != "NotOlderThan":
            raise invalid(
                "",
                "ListOptions",
                "",
                [
                    unsupported(
                        "resourceVersionMatch", query.resource_version_match or "", ["NotOlderThan"]
                    )
                ],
            )
        if not query.allow_bookmarks:
            raise invalid(
                "",
                "ListOptions",
                "",
                [required("allowWatchBookmarks", "sendInitialEvents needs bookmarks")],
            )
    stream = WatchStream(
        rt, version, namespace, query, current_rv=lambda: store.rv, max_pending=max_pending
    )
    rv_text = query.resource_version
    if query.send_initial_events or not rv_text or rv_text == "0":
        for key in sorted(store.objects(rt)):
            obj = store.objects(rt)[key]
            stream.offer(Change(resource_version_of(obj), rt, ADDED, obj, None))
        if query.send_initial_events:
            stream.bookmark(initial_events_end=True)
    else:
        try:
            since = int(rv_text)
        except ValueError:
            since = -1
        if since < 0:
            raise invalid(
                "",
                "ListOptions",
                "",
                [unsupported("resourceVersion", rv_text, ["a resourceVersion"])],
            )
        try:
            store.check_not_compacted(since)
        except ApiError as err:
            stream.fail(err)
            return stream
        stream.since = since  # from a future version, too: nothing up to it is sent
        for change in store.changes_after(rt, since):
            stream.offer(change)
    store.subscribe(rt, stream)
    return stream
