"""`ApiServer`: the stand-in on a loopback port (an async context manager), and
`ThreadedApiServer`, the same server on its own thread for the synchronous `kubernetes` client.

    async with ApiServer() as server:            # server.url → "http://127.0.0.1:PORT"
        server.faults.fail_next(2, status=500)
        server.compact()                         # the next watch resume gets 410

    with ThreadedApiServer(ApiServer(bookmark_interval_s=0.1)) as server:
        ...                                      # same controls, callable from the test thread
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Self, TypeVar

from muster.devtools.apiserver.access import (
    ACCESS_REVIEWS,
    OPEN_PATHS,
    TOKEN_REVIEWS,
    Access,
    Attributes,
    User,
)
from muster.devtools.apiserver.deletion import Api
from muster.devtools.apiserver.errors import ApiError, injected
from muster.devtools.apiserver.faults import Faults, Request, RequestLog
from muster.devtools.apiserver.http import (
    LAST_CHUNK,
    MAX_HEADER_BYTES,
    BadHttpError,
    HttpRequest,
    chunk,
    full_response,
    read_request,
    stream_head,
)
from muster.devtools.apiserver.jobcontroller import JobController
from muster.devtools.apiserver.jobsetcontroller import JobSetController
from muster.devtools.apiserver.objects import encode
from muster.devtools.apiserver.resources import Registry, ResourceType, default_resources
from muster.devtools.apiserver.routes import (
    Reply,
    Route,
    dispatch,
    error_reply,
    request_body,
    resolve,
)
from muster.devtools.apiserver.store import Store
from muster.devtools.apiserver.strategy_base import V1_36, FeatureGates
from muster.devtools.apiserver.watch import WatchStream

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SYSTEM_PRIORITY_CLASSES = (
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
)


class ApiServer:
    """An HTTP/1.1 Kubernetes API server stand-in on `host:port` (port 0: a free one).

    All state lives on the event loop that `start()` ran on; call the control methods
    (`compact`, `drop_watches`, ...) from that loop, or use `ThreadedApiServer`. `faults` and
    `requests` may be used from any thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        resources: Iterable[ResourceType] | None = None,
        history_limit: int = 10_000,
        bookmark_interval_s: float = 5.0,
        default_watch_timeout_s: float = 1800.0,
        max_watch_pending: int = 100_000,
        garbage_collection: bool = True,
        job_controller: bool = False,
        workload_with_job: bool = True,
        clock: Callable[[], float] = time.time,
        access: Access | None = None,
        gates: FeatureGates = V1_36,
    ) -> None:
        self.host = host
        self.access = access  # None: every request is allowed (access.py)
        self.port = port
        self.bookmark_interval_s = bookmark_interval_s
        self.default_watch_timeout_s = default_watch_timeout_s
        self.max_watch_pending = max_watch_pending
        self.registry = Registry(default_resources() if resources is None else resources)
        self.store = Store(history_limit=history_limit)
        self.api = Api(
            self.registry,
            self.store,
            clock=clock,
            defer=self._defer,
            garbage_collection=garbage_collection,
            gates=gates,
        )
        # Off by default: most tests play the Job controller themselves (kube_services_helpers).
        self.jobs: JobController | None = None
        self.jobsets: JobSetController | None = None
        if job_controller:  # and JobSets' (their child Jobs are Jobs)
            self.jobs = JobController(self.api, self.registry, workload_with_job=workload_with_job)
            self.jobs.start()
            self.jobsets = JobSetController(self.api, self.registry)
            self.jobsets.start()
        self.faults = Faults()
        self.requests = RequestLog()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._watches: set[WatchStream] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._seed()
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=MAX_HEADER_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for stream in list(self._watches):
            stream.abort()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _seed(self) -> None:
        """What a fresh cluster has: the system namespaces and priority classes."""
        namespaces = self.registry.by_key(("", "namespaces"))
        if namespaces is not None:
            for name in DEFAULT_NAMESPACES:
                if self.store.get(namespaces, ("", name)) is None:
                    self.api.create(namespaces, "v1", "", {"metadata": {"name": name}})
        pcs = self.registry.by_key(("scheduling.k8s.io", "priorityclasses"))
        if pcs is not None:
            for name, value in SYSTEM_PRIORITY_CLASSES:
                if self.store.get(pcs, ("", name)) is None:
                    self.api.create(pcs, "v1", "", {"metadata": {"name": name}, "value": value})

    # --- controls (on the server's loop) ---------------------------------------------------

    def compact(self, upto: int | None = None) -> None:
        """Forget history up to `upto` (default: now): older watch resumes and continue
        tokens get 410 Expired."""
        self.store.compact(upto)

    def drop_watches(self) -> int:
        """Cut every open watch connection mid-stream (no closing chunk); how many were open."""
        streams = list(self._watches)
        for stream in streams:
            stream.abort()
        return len(streams)

    def end_watches(self) -> int:
        """End every open watch cleanly, as a server-side timeout does."""
        streams = list(self._watches)
        for stream in streams:
            stream.end()
        return len(streams)

    def send_bookmarks(self) -> None:
        """A BOOKMARK now on every watch that allows them."""
        for stream in list(self._watches):
            stream.bookmark()

    def open_watches(self) -> int:
        return len(self._watches)

    def register(self, rt: ResourceType) -> None:
        """Serve one more resource type, as applying its CRD would."""
        self.registry.add(rt)

    def _defer(self, fn: Callable[[], None]) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._run_deferred, fn)

    @staticmethod
    def _run_deferred(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a controller bug must not kill the loop; the test sees the log
            log.exception("deferred controller work failed")

    # --- connections -----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                try:
                    request = await read_request(reader)
                except BadHttpError as err:
                    writer.write(
                        full_response(
                            400, str(err).encode(), content_type="text/plain", keep_alive=False
                        )
                    )
                    await writer.drain()
                    break
                if request is None or not await self._answer(request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must close."""
        verb = "get"
        extra: list[tuple[str, str]] = []
        user: User | None = None
        try:
            if self.access is not None and request.path.rstrip("/") not in OPEN_PATHS:
                user = self.access.requester(request)
            review = self._review(request, user)
            resolved = review if review is not None else resolve(request, self.api)
            verb = resolved.verb if isinstance(resolved, Route) else "get"
            if user is not None and isinstance(resolved, Route):
                self._authorize(user, resolved)
            latency = self.faults.latency_s(verb, request.path)
            if latency > 0:
                await asyncio.sleep(latency)
            fault = self.faults.take(verb, request.path)
            if fault is not None and fault.kind == "reset":
                self._log(verb, request, 0)
                writer.transport.abort()
                return False
            if fault is not None and fault.kind == "fail":
                error = injected(fault.status, retry_after_s=fault.retry_after_s)
                if fault.retry_after_s is not None:
                    extra.append(("Retry-After", str(fault.retry_after_s)))
                reply = error_reply(error)
            elif isinstance(resolved, Route):
                result = dispatch(resolved, request, self.api, max_pending=self.max_watch_pending)
                if isinstance(result, WatchStream):
                    if fault is not None and fault.kind == "drop_watch":
                        result.drop_after_events, result.drop_partial = (
                            fault.after_events,
                            fault.partial,
                        )
                    self._log(verb, request, 200, user)
                    return await self._stream(result, reader, writer)
                reply = result
            else:
                reply = resolved
        except ApiError as err:
            reply = error_reply(err)
        except Exception as err:  # a stand-in bug: answer 500 like a server would, and log it
            log.exception("request failed: %s %s", request.method, request.path)
            reply = error_reply(ApiError(500, "InternalError", f"stand-in error: {err!r}"))
        body = reply.body if isinstance(reply.body, bytes) else encode(reply.body)
        self._log(verb, request, reply.code, user)
        writer.write(
            full_response(
                reply.code,
                body,
                content_type=reply.content_type,
                extra=extra,
                keep_alive=request.keep_alive,
            )
        )
        await writer.drain()
        return request.keep_alive

    def _log(self, verb: str, request: HttpRequest, code: int, user: User | None = None) -> None:
        name = user.name if user is not None else ""
        self.requests.record(Request(verb, request.path, request.raw_query, code, name))

    def _review(self, request: HttpRequest, user: User | None) -> Reply | None:
        """The answer of a TokenReview or SubjectAccessReview (served with `access` only)."""
        if self.access is None or user is None or request.method != "POST":
            return None
        if request.path == TOKEN_REVIEWS:
            return Reply(201, self.access.token_review(user, request_body(request)))
        if request.path == ACCESS_REVIEWS:
            return Reply(201, self.access.access_review(user, request_body(request)))
        return None

    def _authorize(self, user: User, route: Route) -> None:
        assert self.access is not None
        asked = Attributes(
            verb=route.verb,
            group=route.rt.group,
            resource=route.rt.plural,
            subresource=route.subresource,
            namespace=route.namespace,
            name=route.name,
        )
        self.access.check(user, asked)

    async def _stream(
        self, stream: WatchStream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve a watch; True when it ended cleanly and the connection can be reused."""
        self._watches.add(stream)
        # Notice a client that goes away while nothing is being sent.
        gone = asyncio.create_task(self._abort_on_eof(reader, stream))
        try:
            writer.write(stream_head())
            async for lines in stream.batches(
                bookmark_interval_s=self.bookmark_interval_s,
                default_timeout_s=self.default_watch_timeout_s,
            ):
                writer.write(chunk(b"".join(lines)))
                await writer.drain()
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone
            if stream.aborted:
                return False  # the handler closes the connection without the closing chunk
            writer.write(LAST_CHUNK)
            await writer.drain()
            return True
        finally:
            gone.cancel()
            self.store.unsubscribe(stream.rt, stream)
            self._watches.discard(stream)

    @staticmethod
    async def _abort_on_eof(reader: asyncio.StreamReader, stream: WatchStream) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read(1)  # a client never sends during a watch: data or EOF means it left
        stream.abort()


class ThreadedApiServer:
    """An `ApiServer` running on its own thread and event loop, for synchronous clients.

    Control methods run on the server's loop and wait for it; `faults` and `requests` are
    thread-safe and used directly.
    """

    def __init__(self, server: ApiServer | None = None) -> None:
        self._server = server if server is not None else ApiServer()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def server(self) -> ApiServer:
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def requests(self) -> RequestLog:
        return self.server.requests

    def start(self, *, timeout_s: float = 10.0) -> Self:
        self._thread = threading.Thread(target=self._run, name="apiserver-standin", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("the API-server stand-in did not start")
        if self._error is not None:
            raise RuntimeError("the API-server stand-in failed to start") from self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self._server:
            self._ready.set()
            await self._stop.wait()

    def stop(self, *, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def call(self, fn: Callable[[], T], *, timeout_s: float = 10.0) -> T:
        """Run `fn` on the server's loop and return its result (or raise its exception)."""
        if self._loop is None:
            raise RuntimeError("the server is not running")

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout_s)

    def compact(self, upto: int | None = None) -> None:
        self.call(lambda: self.server.compact(upto))

    def drop_watches(self) -> int:
        return self.call(self.server.drop_watches)

    def end_watches(self) -> int:
        return self.call(self.server.end_watches)

    def send_bookmarks(self) -> None:
        self.call(self.server.send_bookmarks)

    def open_watches(self) -> int:
        return self.call(self.server.open_watches)

    def register(self, rt: ResourceType) -> None:
        self.call(lambda: self.server.register(rt))

    def resource_version(self) -> int:
        return self.call(lambda: self.server.store.rv)
