"""EventRecorder: Kubernetes Events (`events.k8s.io/v1`) as client-go's event recorder writes
them, so `kubectl describe` and `kubectl get events` tell a workload's story.

`record(regarding, ...)` returns at once; a writer task sends the Events, paced by a token
bucket of its own. Repeats are counted, not written again: an Event with the same object,
reason, action, note and reporting controller as one written in the last `finish_s` (6
minutes, as client-go) becomes a series. The second occurrence patches `series` (count 2)
onto the first Event; later ones only count, and the count is written when the series has
been quiet for `finish_s` or every `refresh_s` (30 minutes) while it goes on. So a workload
that waits round after round for the same reason costs one Event and a few patches, not one
per round. (Differs from client-go: the note is part of what makes two Events the same, as
in client-go's older core/v1 recorder, so a changed reason for waiting is a new Event.)

An object given without a uid (a Kueue Workload whose uid muster has not seen) is read once
to find it, so that `kubectl describe` (which selects Events by uid) shows the Event.
Temporary failures are retried with back-off a few times; then, or on a refusal, the Event
is dropped and logged: Events are a best-effort record, as in Kubernetes. At most
`queue_size` Events wait to be written; more are dropped, and logged at the first drop and
every `_DROPS_LOGGED`th after (a spam of Events must not become a spam of log lines). The uids
learned are remembered for the last `_UIDS_REMEMBERED` objects (a watch learns every Job and
Workload it sees; one forgotten costs one read when an Event is about it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from muster.api.resource import Resource
from muster.bus.supervision import supervised
from muster.cluster.errors import ClusterError, NotFoundError
from muster.cluster.kube.ratelimit import TokenBucket
from muster.cluster.kube.references import Reference, reference_of
from muster.cluster.kube.retry import Backoff
from muster.cluster.kube.transport import MERGE_PATCH, Transport

log = logging.getLogger(__name__)

EVENTS = Resource(
    group="events.k8s.io", version="v1", plural="events", kind="Event", namespaced=True
)
NOTE_LIMIT = 1024  # bytes, as the API server allows
_DROPS_LOGGED = 1000  # drops between two log lines about them
_UIDS_REMEMBERED = 100_000  # objects whose uid is kept, the newest


class EventSettings(msgspec.Struct, frozen=True, kw_only=True):
    qps: float = 10.0  # Event writes per second; <= 0: unlimited
    burst: int = 50
    finish_s: float = 360.0  # a series with no new occurrence this long is written and closed
    refresh_s: float = 1800.0  # a series going on is written this often
    queue_size: int = 1000
    tries: int = 5
    backoff: Backoff = Backoff(initial_s=0.5, max_s=10.0)


def micro_time(seconds: float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    whole = int(seconds)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{int((seconds - whole) * 1e6):06d}Z"
    )


def _note(text: str) -> str:
    data = text.encode()
    return (
        text if len(data) <= NOTE_LIMIT else data[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."
    )


class _Series:
    """One Event written (or to be written) and how often it occurred since."""

    __slots__ = ("count", "event", "last_s", "queued", "written_count", "written_s")

    def __init__(self, event: dict[str, Any], now_s: float) -> None:
        self.event = event
        self.count = 1
        self.last_s = now_s
        self.written_count = 0  # the count last written (0: not written yet)
        self.written_s = now_s
        self.queued = False

    @property
    def unwritten(self) -> bool:
        return self.count != self.written_count


_Key = tuple[str, str, str, str, str, str]  # regarding, type, reason, action, note, controller


def _uid_key(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
    """An object's identity but its uid: (group, kind, namespace, name)."""
    return api_version.rpartition("/")[0], kind, namespace, name


class EventRecorder:
    """Writes Kubernetes Events for one reporting controller (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        *,
        controller: str,
        instance: str = "",
        settings: EventSettings | None = None,
        lookup: Mapping[str, Resource] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._transport = transport
        self._controller = controller
        self._instance = (instance or f"{controller}-{socket.gethostname()}")[:128]
        self.settings = settings or EventSettings()
        self._bucket = TokenBucket(self.settings.qps, self.settings.burst)
        self._lookup = dict(lookup or {})  # kind → where to read an object's uid
        self._clock = clock
        self._series: dict[_Key, _Series] = {}
        self._queue: deque[_Series] = deque()  # to write, each at most once
        self._uids: dict[tuple[str, str, str, str], str] = {}  # `_uid_key` → uid
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # Events created or patched
        self.dropped = 0

    def record(
        self,
        regarding: Reference | Mapping[str, Any],
        *,
        type_: str,
        reason: str,
        note: str,
        action: str,
        controller: str = "",
    ) -> None:
        """Record one occurrence; returns at once. `regarding` is a Reference or the object;
        `controller` the reportingController when not the recorder's own."""
        ref = regarding if isinstance(regarding, Reference) else reference_of(regarding)
        self._remember(ref)
        now = self._clock()
        controller = controller or self._controller
        regarding_key = f"{ref.api_version}/{ref.kind}/{ref.namespace}/{ref.name}"
        key = (regarding_key, type_, reason, action, note, controller)
        series = self._series.get(key)
        if series is not None and now - series.last_s < self.settings.finish_s:
            series.count += 1
            series.last_s = now
            if series.count == 2:  # a series starts: written at once (client-go)
                self._enqueue(series)
            return
        if series is not None and series.unwritten:  # the old series ends with its count
            self._enqueue(series)
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"namespace": ref.namespace or "default"},
            "eventTime": micro_time(now),
            "type": type_,
            "reason": reason,
            "action": action,
            "note": _note(note),
            "reportingController": controller,
            "reportingInstance": self._instance,
            "regarding": ref.as_json(),
        }
        self._series[key] = _Series(event, now)
        self._enqueue(self._series[key])

    def learn(self, obj: Mapping[str, Any]) -> None:
        """Remember the uid of an object a watch shows (no read is needed for its Events)."""
        self._remember(reference_of(obj))

    def _remember(self, ref: Reference) -> None:
        if ref.uid:
            self._know_uid(_uid_key(ref.api_version, ref.kind, ref.namespace, ref.name), ref.uid)

    def _know_uid(self, key: tuple[str, str, str, str], uid: str) -> None:
        self._uids.pop(key, None)  # the newest last, so the oldest is forgotten first
        self._uids[key] = uid
        if len(self._uids) > _UIDS_REMEMBERED:
            del self._uids[next(iter(self._uids))]

    @property
    def uids_known(self) -> int:
        """How many objects' uids are remembered (at most `_UIDS_REMEMBERED`)."""
        return len(self._uids)

    def _enqueue(self, series: _Series) -> None:
        if series.queued:
            return
        if len(self._queue) >= self.settings.queue_size:
            if self.dropped % _DROPS_LOGGED == 0:
                waiting = len(self._queue)
                log.warning("dropping Events: %d already wait to be written, %d dropped before",
                            waiting, self.dropped)  # fmt: skip
            self.dropped += 1
            return
        series.queued = True
        self._queue.append(series)
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            self._task = supervised(self._work(), name="event-recorder")

    def tick(self) -> None:
        """Close series quiet for `finish_s` (their last count written first) and write those
        going on for `refresh_s` (client-go's finishSeries and refresh); the writer calls it
        every `finish_s / 6`."""
        now = self._clock()
        for key, series in list(self._series.items()):
            quiet = now - series.last_s >= self.settings.finish_s
            if series.unwritten and (quiet or now - series.written_s >= self.settings.refresh_s):
                self._enqueue(series)
            elif quiet and not series.queued:
                del self._series[key]

    async def flush(self, *, timeout_s: float = 10.0) -> None:
        """Wait until every queued Event is written (or dropped); TimeoutError past it."""
        async with asyncio.timeout(timeout_s):
            await self._idle.wait()

    async def finish(self, *, flush_s: float) -> None:
        """At shutdown: give what is still queued `flush_s` to be written, then stop."""
        with contextlib.suppress(TimeoutError):
            await self.flush(timeout_s=flush_s)
        await self.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # --- the writer -------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            while not self._queue:
                self._idle.set()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.finish_s / 6):
                        await self._wake.wait()
                self.tick()
            series = self._queue.popleft()
            await self._bucket.acquire()
            series.queued = False  # an occurrence from now on queues it again
            await self._write(series)

    async def _write(self, series: _Series) -> None:
        for attempt in range(1, self.settings.tries + 1):
            try:
                await self._send(series)
                self.written += 1
                return
            except ClusterError as err:
                if not err.temporary or attempt == self.settings.tries:
                    self.dropped += 1
                    log.warning("dropping Event %s: %s", series.event.get("reason"), err)
                    return
                await asyncio.sleep(self.settings.backoff.delay_s(attempt))

    async def _send(self, series: _Series) -> None:
        event = series.event
        namespace = event["metadata"]["namespace"]
        count, now = series.count, self._clock()
        if "name" in event["metadata"] and count > 1:
            body = {"series": {"count": count, "lastObservedTime": micro_time(series.last_s)}}
            path = EVENTS.object_path(event["metadata"]["name"], namespace)
            try:
                await self._transport.checked(
                    "PATCH", path, obj=self._who(event), body=body, content_type=MERGE_PATCH,
                    paced=False,
                )  # fmt: skip
                series.written_count, series.written_s = count, now
                return
            except NotFoundError:  # expired meanwhile (events have a TTL): write it anew
                event["metadata"].pop("name", None)
        await self._uid(event["regarding"])
        name = f"{event['regarding']['name']}.{time.time_ns():x}"
        created = dict(event, metadata={"name": name, "namespace": namespace})
        if count > 1:
            created["series"] = {"count": count, "lastObservedTime": micro_time(series.last_s)}
        await self._transport.checked(
            "POST", EVENTS.collection_path(namespace), obj=self._who(created), body=created,
            paced=False,
        )  # fmt: skip
        event["metadata"]["name"] = name
        series.written_count, series.written_s = count, now

    async def _uid(self, regarding: dict[str, str]) -> None:
        """Fill in the regarding object's uid: known, or read once."""
        if regarding.get("uid"):
            return
        name, namespace = regarding["name"], regarding["namespace"]
        key = _uid_key(regarding["apiVersion"], regarding["kind"], namespace, name)
        uid = self._uids.get(key)
        resource = self._lookup.get(regarding["kind"])
        if uid is None and resource is not None:
            with contextlib.suppress(NotFoundError):
                obj = await self._transport.checked(
                    "GET",
                    resource.object_path(name, namespace),
                    obj=resource.describe(name, namespace),
                )
                uid = str((obj.get("metadata") or {}).get("uid", ""))
            self._know_uid(key, uid or "")
        if uid:
            regarding["uid"] = uid

    @staticmethod
    def _who(event: Mapping[str, Any]) -> str:
        return f"Event/{event['metadata']['namespace']}/{event['metadata'].get('name', '')}"
