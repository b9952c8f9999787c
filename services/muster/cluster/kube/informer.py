"""The merged watch behind `KubeBackend.watch`: one list-then-watch per `Source`, merged into
one `ClusterChange` stream.

Each source lists (paged), then watches from the list's resourceVersion with bookmarks; a cut
stream resumes from the last resourceVersion it saw, `410 Gone` relists (showing only
differences, see `changes`; a watch resumed for a consumer that `lists_again`, which never
showed what that consumer holds, ends with `ExpiredError` instead), other failures back off
exponentially (from the first delay again once a watch delivered something: cuts hours apart
are not one outage), and a resource that is not served (a CRD not installed) is retried every
`missing_retry_s`, with one warning. A source refused with 403 before it ever answered (the
ServiceAccount's ClusterRole lacks its rule) ends the watch with an error naming the rule
(`forbidden_at_start`).

Revisions. The API server's resourceVersion is etcd's one global revision, but separate watch
streams deliver it out of order between resources, so a change's own resourceVersion is no
safe resume point. Each change's `revision` is therefore built from the *floor*: the lowest
resourceVersion up to which every source has delivered everything (advanced by events,
bookmarks and lists). `revision = max(previous + 1, floor << SEQ_BITS)`, so
`revision >> SEQ_BITS` is the floor whenever fewer than 2**SEQ_BITS changes pass at one floor.
`watch(from_revision=R)` resumes every source from `R >> SEQ_BITS`: nothing is lost, and
changes between the floor and R may be shown again (as ADDED: a resumed watch knows nothing).
A floor of 0 (R < 2**SEQ_BITS: the consumer stopped during the initial list) lists again, but
for a consumer that `lists_again`, which gets ExpiredError at once and lists itself.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import msgspec

from muster.cluster.backend import ClusterChange
from muster.cluster.errors import ClusterError, ExpiredError, NotFoundError
from muster.cluster.kube.changes import ChangeCache, Pending, resource_version
from muster.cluster.kube.resources import NAMESPACES, Source, change_key
from muster.cluster.kube.retry import UnavailableError, cancelling_check
from muster.cluster.kube.settings import WatchSettings
from muster.cluster.kube.transport import Transport, decode_status

log = logging.getLogger(__name__)

SEQ_BITS = 20
FORBIDDEN = "Forbidden"
_EXPIRED = frozenset({"Expired", "Gone"})


def floor_of(revision: int) -> int:
    """The resourceVersion a watch resumed after `revision` starts every source from."""
    return revision >> SEQ_BITS


class _ExpiredError(Exception):
    """The resourceVersion to resume from is compacted away: list again."""


class _Event(msgspec.Struct, frozen=True):
    type: str
    object: dict[str, Any]


_event_decoder = msgspec.json.Decoder(_Event)


class _Item(msgspec.Struct, frozen=True, array_like=True):
    """What a source hands the consumer: its progress after this item, and maybe a change."""

    source: int
    progress: int  # 0: unchanged
    change: Pending | None = None


class _SourceLoop:
    """List-then-watch of one source, forever; feeds `queue` in resourceVersion order."""

    def __init__(
        self,
        index: int,
        source: Source,
        *,
        transport: Transport,
        cache: ChangeCache,
        queue: asyncio.Queue[_Item | BaseException],
        settings: WatchSettings,
        start_rv: int,
        lists_again: bool = False,
    ) -> None:
        self.index = index
        self.source = source
        self._transport = transport
        self._cache = cache
        self._queue = queue
        self._settings = settings
        self._failing = ""  # the failure last logged, until the watch works again
        self.progress = start_rv
        self._needs_list = start_rv == 0
        # A consumer's resume, and the consumer lists again itself: an expiry is its to list.
        self._resumed = start_rv > 0 and lists_again
        self._warned_missing = False
        self._seen_before_request = 0  # cache.max_rv when the last request was sent
        self._streamed = False  # the watch since the last failure delivered something
        self._answered = False  # a list or a watch of this source ever succeeded

    def _selectors(self) -> list[tuple[str, str]]:
        query = []
        if self.source.label_selector:
            query.append(("labelSelector", self.source.label_selector))
        if self.source.field_selector:
            query.append(("fieldSelector", self.source.field_selector))
        return query

    async def run(self) -> None:
        delays = self._settings.backoff.delays()
        while True:
            cancelling_check()  # its merged watch waits for it to end
            try:
                if self._needs_list:
                    await self._list()
                    self._needs_list = False
                await self._watch()
                delays = self._settings.backoff.delays()  # a clean end: the server's timeout
            except _ExpiredError:
                if await self._expired_resume():
                    return
                log.info(
                    "%s: resourceVersion %d expired; listing again", self.source.name, self.progress
                )
                self._needs_list = True
            except NotFoundError:
                await self._missing()
                await asyncio.sleep(self._settings.missing_retry_s)
                self._needs_list = True
            except ClusterError as err:
                if err.reason == FORBIDDEN and not self._answered:
                    await self._queue.put(forbidden_at_start(self.source, err))
                    return
                if isinstance(err, UnavailableError) and err.reason in _EXPIRED:
                    if await self._expired_resume():
                        return
                    self._needs_list = True
                    continue
                if self._streamed:  # it worked until cut: a new failure, not the same one
                    delays, self._streamed = self._settings.backoff.delays(), False
                delay_s = self._settings.backoff.wait_s(next(delays), err)
                # Once per failure, not per retry: a server away for an hour is one line.
                level = logging.DEBUG if str(err) == self._failing else logging.WARNING
                log.log(level, "%s: %s; again in %.1fs", self.source.name, err, delay_s)
                self._failing = str(err)
                await asyncio.sleep(delay_s)
                continue
            if self._failing:
                log.info("%s: answered again", self.source.name)
                self._failing = ""

    async def _expired_resume(self) -> bool:
        """Whether this watch resumed a consumer's (`from_revision` > 0) and so must not list
        again itself: it never showed what the consumer holds, so its list would show no
        deletion made in the gap. It ends the merged watch with ExpiredError instead; the
        consumer watches from 0 and drops what that list does not show."""
        if not self._resumed:
            return False
        message = f"resourceVersion {self.progress} expired; list again"
        await self._queue.put(ExpiredError(self.source.name, message))
        return True

    async def _emit(self, change: Pending | None, progress: int = 0) -> None:
        if change is not None or progress:
            await self._queue.put(_Item(self.index, progress, change))

    async def _advance(self, rv: int) -> None:
        if rv > self.progress:
            self.progress = rv
            await self._emit(None, rv)

    async def _list(self) -> None:
        """List every object (paged), show what differs from what was shown, then move the
        progress to the list's resourceVersion."""
        resource = self.source.resource
        self._seen_before_request = self._cache.max_rv
        items, list_rv = await self._transport.list_all(
            resource.collection_path(),
            obj=self.source.name,
            query=self._selectors(),
            page_size=self._settings.page_size,
        )
        present = set()
        for obj in items:
            obj.setdefault("apiVersion", resource.api_version)  # list items may omit them
            obj.setdefault("kind", resource.kind)
            pending = self._cache.upsert(self.index, obj)
            present.add(change_key(resource, obj))
            await self._emit(pending)
        for pending in self._cache.vanished(self.index, present):
            await self._emit(pending)
        await self._advance(list_rv)
        self._warned_missing = False
        self._answered = True

    async def _watch(self) -> None:
        """Watch from `progress` until the stream ends; raises on every other outcome."""
        timeout_s = int(self._settings.timeout_s * (1 + random.random()))
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", str(self.progress)),
            ("timeoutSeconds", timeout_s),
            *self._selectors(),
        ]
        path = self.source.resource.collection_path()
        self._seen_before_request = self._cache.max_rv
        async with self._transport.stream(
            path, query=query, obj=self.source.name, timeout_s=timeout_s + 30
        ) as lines:
            async for line in lines:
                await self._handle(line)

    async def _handle(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            event = _event_decoder.decode(line)
        except msgspec.DecodeError as err:  # half a line: the stream was cut
            raise ClusterError(
                self.source.name, "Unavailable", "watch cut mid-event", temporary=True
            ) from err
        self._streamed = self._answered = True
        if event.type == "BOOKMARK":
            await self._advance(resource_version(event.object))
            return
        if event.type == "ERROR":
            status = decode_status(msgspec.json.encode(event.object))
            if status.code == 410 or status.reason in _EXPIRED:
                raise _ExpiredError
            raise UnavailableError(
                self.source.name, status.reason or "Unavailable", status.message, retry_after_s=None
            )
        obj = event.object
        resource = self.source.resource
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        if event.type == "DELETED":
            pending = self._cache.remove(self.index, obj)
        else:
            pending = self._cache.upsert(self.index, obj)
        rv = resource_version(obj)
        if rv > self.progress:
            self.progress = rv
            await self._emit(pending, rv)
        else:
            await self._emit(pending)

    async def _missing(self) -> None:
        """The resource is not served: what this source showed is gone, and it holds nothing
        up to the highest resourceVersion seen before the request that found it missing
        (objects of a resource created later get later resourceVersions)."""
        if not self._warned_missing:
            log.warning(
                "%s is not served (CustomResourceDefinition not installed?); "
                "trying again every %gs",
                self.source.name,
                self._settings.missing_retry_s,
            )
            self._warned_missing = True
        for pending in self._cache.vanished(self.index, set()):
            await self._emit(pending)
        await self._advance(self._seen_before_request)


async def resource_version_now(transport: Transport) -> int:
    """The API server's current resourceVersion (a one-item list of Namespaces: a list is read
    at the newest revision); raises ClusterError when it does not answer."""
    response = await transport.request(
        "GET", NAMESPACES.collection_path(), obj="NamespaceList", query=[("limit", 1)]
    )
    if not response.ok:
        raise response.error("NamespaceList")
    try:
        return int(msgspec.json.decode(response.body, type=_ListHead).metadata.resourceVersion)
    except (msgspec.DecodeError, ValueError) as err:
        raise ClusterError(
            "NamespaceList", "Invalid", f"no resourceVersion in the answer: {err}"
        ) from err


async def current_resource_version(transport: Transport) -> int:
    """`resource_version_now`, or 0 when the server does not answer."""
    try:
        return await resource_version_now(transport)
    except ClusterError:
        return 0


class _ListMeta(msgspec.Struct, frozen=True):
    resourceVersion: str = "0"  # noqa: N815 - the wire name


class _ListHead(msgspec.Struct, frozen=True):
    metadata: _ListMeta = _ListMeta()


class _Revisions:
    """Consumer side: each source's progress as far as its items were consumed, and the
    revision of the next change (see the module docstring)."""

    def __init__(self, sources: int, *, floor: int, last: int) -> None:
        self.progress = [floor] * sources
        self.last = last
        self._warned = False

    def advance(self, source: int, rv: int) -> bool:
        """Record `source`'s progress; whether the floor moved."""
        if rv <= self.progress[source]:
            return False
        floor = min(self.progress)
        self.progress[source] = rv
        return min(self.progress) > floor

    def reached(self) -> int:
        """The revision up to which every change has been handed out (see `on_progress`)."""
        return min(self.progress) << SEQ_BITS

    def next(self) -> int:
        floor = min(self.progress)
        revision = max(self.last + 1, floor << SEQ_BITS)
        if floor_of(revision) > floor and not self._warned:
            log.warning(
                "over %d changes at resourceVersion floor %d (a source without bookmarks?): "
                "a watch resumed after them may start a little late",
                1 << SEQ_BITS,
                floor,
            )
            self._warned = True
        self.last = revision
        return revision


async def merged_watch(
    transport: Transport,
    sources: Sequence[Source],
    *,
    settings: WatchSettings,
    from_revision: int = 0,
    on_progress: Callable[[int], None] | None = None,
    lists_again: bool = False,
    on_listed: Callable[[], None] | None = None,
) -> AsyncGenerator[ClusterChange, None]:
    """Every source's changes as one stream (see the module docstring), until closed.

    `on_progress(revision)` is called whenever the floor moves: every change of every source
    up to it has been yielded (a source's items are queued in resourceVersion order, and its
    progress after them). `on_listed()` is called when it first moves past 0 in a watch that
    lists (floor 0): every source has listed, and its list's items were yielded.
    """
    floor = floor_of(from_revision)
    if floor == 0 and from_revision > 0 and lists_again:
        # Stopped inside its initial list: every source would list again, and its list could
        # not show what the consumer holds and lost meanwhile. The consumer lists instead.
        raise ExpiredError("", f"revision {from_revision} is inside the initial list; list again")
    listing = floor == 0
    queue: asyncio.Queue[_Item | BaseException] = asyncio.Queue(settings.queue_size)
    loops: list[_SourceLoop] = []
    cache = ChangeCache(sources, floor=lambda: min(loop.progress for loop in loops))
    loops.extend(
        _SourceLoop(
            i,
            source,
            transport=transport,
            cache=cache,
            queue=queue,
            settings=settings,
            start_rv=floor,
            lists_again=lists_again,
        )
        for i, source in enumerate(sources)
    )
    revisions = _Revisions(len(sources), floor=floor, last=from_revision)
    # What a source found missing holds nothing up to here (see `_SourceLoop._missing`).
    cache.max_rv = await current_resource_version(transport)
    tasks = [
        asyncio.create_task(_guarded(loop, queue), name=f"watch {loop.source.name}")
        for loop in loops
    ]
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            # The progress counts in this change's revision, but is reported only once the
            # consumer has handled the change.
            moved = bool(item.progress) and revisions.advance(item.source, item.progress)
            if item.change is not None:
                kind, type_, key, obj = item.change
                yield ClusterChange(
                    kind=kind, type=type_, key=key, obj=obj, revision=revisions.next()
                )
            if moved and on_progress is not None:
                on_progress(revisions.reached())
            if moved and listing:
                listing = False
                if on_listed is not None:
                    on_listed()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def forbidden_at_start(source: Source, err: ClusterError) -> ClusterError:
    """The error that ends a watch whose `source` was refused (403) before it ever answered:
    this service's ServiceAccount lacks a rule of its ClusterRole (one installed before an
    upgrade that reads more kinds, the LimitRanges for one). Watching without that kind would
    be silently wrong (workloads charged without their LimitRanges' defaults), so the service
    stops, naming the rule to add; a refusal after the first answer is retried instead."""
    resource = source.resource
    rule = (
        f'{{apiGroups: ["{resource.group}"], resources: ["{resource.plural}"], '
        'verbs: ["list", "watch"]}'
    )
    return ClusterError(
        source.name,
        FORBIDDEN,
        f"{err.message}; this service cannot run without it: add the rule {rule} to its "
        "ServiceAccount's ClusterRole (k8s/rbac/ has muster's), then start it again",
    )


async def _guarded(loop: _SourceLoop, queue: asyncio.Queue[_Item | BaseException]) -> None:
    """Run one source; a bug ends the merged watch with its exception."""
    try:
        await loop.run()
    except Exception as err:  # a bug: the consumer raises it
        log.exception("%s: watch failed", loop.source.name)
        await queue.put(err)
