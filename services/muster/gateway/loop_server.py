"""The gateway's gRPC server: gRPC's threaded server, each call's handler run on the event loop.

The servicers are async and stay so: the bus, the book and the authorizers live on the
gateway's loop. A call arrives on one of gRPC's threads, which runs the servicer's method on
the loop and waits for it. Why not grpc.aio's server (`--grpc-server aio`, `aio_server`),
which runs them there directly: its calls cost more in a burst (docs/benchmarks.md, "A
Submit's hand-over" and "grpc.aio's server as an option"). It wakes the loop once per step of
every call (four per Submit), so calls rarely share a loop iteration and each call's NATS
publish leaves in a write of its own; calls handed
over from threads reach the loop together and their publishes share writes, gRPC's threads
answer calls together, and the nats-server and the client do less per call too.

Every call but the health service's is authenticated before its request is read (`auth`):
each handler is registered as request-streaming with no deserializer, so gRPC leaves the
request's bytes unread until the caller is known; a request that does not decode answers
INVALID_ARGUMENT (gRPC's own decoding would answer UNKNOWN).

Short calls take turns on `HOT_THREADS` threads: with a thread per call in flight, 64 calls
at once woke 64 threads, and on a busy machine that cost the gateway more than grpc.aio did in
a quarter of the runs. A streaming call (a Watch) holds its thread while it follows, so it
hands its place among the hot threads to a new one and its own ends with it: watchers never
hold up Submits. So does a short call still running after `SLOW_S` (a Submit waiting for a
slow NATS): slow calls never hold up quick ones, health checks included. At most `max_calls`
calls are in flight (health checks not counted); one past them is refused with
RESOURCE_EXHAUSTED and a message naming the limit, before anything of it is read or done, so a
client may retry it after a backoff. gRPC's own limit, whose message says neither, stays as a
backstop at twice that. A call that ends early (the client cancelled, or the server stopped)
cancels its handler.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import inspect
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Final, Generic, NoReturn, TypeVar

import grpc
import grpc.aio

from muster.gateway.auth import (
    CALLER,
    Authentication,
    authenticate,
    peer_identity,
    unauthenticated,
)
from muster.gateway.permissions import Caller

T = TypeVar("T")
HEALTH_PREFIX: Final = "/grpc.health.v1.Health/"
_WINDOW: Final = 64  # a stream's responses read ahead of what its call's thread has sent
HOT_THREADS: Final = 8  # threads short calls take turns on (docs/benchmarks.md, "submit")
SLOW_S: Final = 0.1  # a call still running after this hands its hot thread's place on
# gRPC refuses calls past this many times `max_calls` itself ("Concurrent RPC limit exceeded!"):
# a backstop for refusals queued behind busy threads; ours comes first and says what to do.
GRPC_LIMIT_FACTOR: Final = 2


def refused_message(max_calls: int) -> str:
    """What a call refused for the gateway's limit on calls in flight is told."""
    return (
        f"the gateway is serving its limit of {max_calls} calls at once (--max-calls, "
        "MUSTER_GATEWAY_MAX_CALLS); nothing of this call was done: retry it after a backoff, "
        "or raise the limit"
    )


class CallContext:
    """What the servicers use of a call's context, as grpc.aio's ServicerContext offers it."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self._context = context
        # A streaming call's: how a handler that writes its responses (health's Watch) sends.
        self.writer: Callable[[Any], Coroutine[Any, Any, None]] | None = None

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._context.auth_context()  # type: ignore[no-any-return]  # untyped

    def peer(self) -> str:
        return self._context.peer()  # type: ignore[no-any-return]  # untyped

    async def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise AbortedError(code, details)

    async def write(self, message: Any) -> None:
        if self.writer is None:
            raise RuntimeError("write() is for server-streaming calls")
        await self.writer(message)


class AbortedError(Exception):
    """A handler (or the server's checks) ended its call with a status, for the server to
    tell gRPC."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class LoopInbox:
    """Work gRPC's threads hand to the loop, run there in batches: one wake-up of the loop
    for every call that arrives before the loop runs the batch.

    `call_soon_threadsafe` per call wrote to the loop's eventfd for each call that came after
    the loop had read it last, though the loop had not yet run the calls that came before;
    here a call that finds a batch waiting joins it without waking anyone (docs/benchmarks.md,
    "Fewer hand-offs per Submit"). Each item runs once, in the order handed over.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._waiting = False  # a batch is scheduled on the loop and has not started yet

    def put(self, item: Callable[[], None]) -> None:
        """From any thread: run `item` on the loop (RuntimeError when the loop is closed)."""
        with self._lock:
            self._items.append(item)
            if self._waiting:
                return
            self._waiting = True
        try:
            self.loop.call_soon_threadsafe(self._run_batch)
        except RuntimeError:  # the loop is closed: nothing it was handed will run
            with self._lock:
                self._waiting = False
                self._items.clear()
            raise

    def _run_batch(self) -> None:
        with self._lock:
            self._waiting = False
            items = list(self._items)
            self._items.clear()
        for item in items:
            try:
                item()
            except Exception as exc:  # a bug in one must not strand the rest of its batch
                message = "gateway: a call's hand-over to the loop failed"
                self.loop.call_exception_handler({"message": message, "exception": exc})


class _Call:
    """One call's way to the loop: runs coroutines there, and cancels them if the call ends."""

    def __init__(
        self,
        inbox: LoopInbox,
        context: grpc.ServicerContext,
        on_slow: Callable[[], None],
    ) -> None:
        self.inbox = inbox
        self.loop = inbox.loop
        self._on_slow = on_slow
        self.grpc_context = context
        self.context = CallContext(context)
        self.caller: Caller | None = None  # once authenticated (health calls are not)
        self._running: _Answer[Any] | None = None
        self._task: asyncio.Task[Any] | None = None  # the loop's side of `_running`
        self._lock = threading.Lock()
        self._ended = False
        self._on_end: list[Callable[[], None]] = []
        if not context.add_callback(self._end):  # the call ended before it reached us
            self._ended = True

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro`'s result, run on the loop; its abort becomes the call's status."""
        answer = self.start(coro)
        if not answer.wait(SLOW_S):
            self._on_slow()
            answer.wait(None)
        try:
            return answer.outcome()
        except AbortedError as exc:
            self.abort(exc.code, exc.details)
        except concurrent.futures.CancelledError:
            self.abort(grpc.StatusCode.CANCELLED, "the call ended")

    def start(self, coro: Coroutine[Any, Any, T]) -> _Answer[T]:
        """`coro` started on the loop, cancelled if the call ends before it does.

        What `asyncio.run_coroutine_threadsafe` does, with one callback per side instead of
        its chained futures' four: about 10 us less per call (docs/benchmarks.md, "submit").
        """
        answer: _Answer[T] = _Answer()
        with self._lock:
            self._running = answer
            ended = self._ended
        if ended:
            answer.cancel()
            coro.close()
        else:
            self.inbox.put(functools.partial(self._begin, coro, answer))
        return answer

    def _begin(self, coro: Coroutine[Any, Any, T], answer: _Answer[T]) -> None:
        """On the loop: run `coro` as a task that settles `answer` (unless the call ended)."""
        if answer.cancelled:
            coro.close()
            return
        task = self.loop.create_task(coro)
        self._task = task
        task.add_done_callback(answer.settle)

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        self.grpc_context.abort(code, details)
        raise AssertionError("unreachable: ServicerContext.abort raises")

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on gRPC's thread) when the call ends, however it ends."""
        with self._lock:
            ended = self._ended
            self._on_end.append(callback)
        if ended:
            callback()

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            running = self._running
            callbacks = list(self._on_end)
        if running is not None and running.cancel():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs there
                self.inbox.put(self._cancel_task)
        for callback in callbacks:
            callback()

    def _cancel_task(self) -> None:
        if self._task is not None:
            self._task.cancel()


class _Answer(Generic[T]):
    """A call's outcome, handed from the loop to the call's thread, settled once: by its task,
    or cancelled when the call ends.

    A lock the thread waits on and the settling side releases: one wake-up. A
    `concurrent.futures.Future` wakes its waiter through a Condition, whose own lock the woken
    thread must then take while the loop's thread may still hold it, and allocates a lock per
    wait (docs/benchmarks.md, "A Submit's hand-over").
    """

    __slots__ = ("_error", "_once", "_ready", "_value", "cancelled")

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()  # released once settled
        self._once = threading.Lock()  # taken by whoever settles first; never released
        self._value: T | None = None
        self._error: BaseException | None = None
        self.cancelled = False

    def wait(self, timeout: float | None) -> bool:
        """On the call's thread (once, or once more after a timeout): whether it is settled."""
        return self._ready.acquire(timeout=-1 if timeout is None else timeout)

    def outcome(self) -> T:
        """Once settled: the value, or the error raised (CancelledError when cancelled)."""
        if self.cancelled:
            raise concurrent.futures.CancelledError
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # T, set by `settle`

    def cancel(self) -> bool:
        """Settle it as cancelled, unless it is settled already; whether this did."""
        if not self._once.acquire(blocking=False):
            return False
        self.cancelled = True
        self._ready.release()
        return True

    def settle(self, task: asyncio.Task[T]) -> None:
        """On the loop, `task` done: its outcome, unless the call ended first."""
        if task.cancelled():
            self.cancel()
            return
        error = task.exception()  # retrieved even when nobody waits: not logged as lost
        if not self._once.acquire(blocking=False):
            return
        if error is not None:
            self._error = error
        else:
            self._value = task.result()
        self._ready.release()


class WrappingServer:
    """A gRPC server (threaded or grpc.aio) whose every handler is wrapped, with its method's
    name, by `wrap` as it is added: what both of the gateway's servers share."""

    def __init__(
        self,
        server: grpc.Server | grpc.aio.Server,
        wrap: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler],
    ) -> None:
        self._grpc = server
        self._wrap = wrap

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._grpc.add_generic_rpc_handlers([BridgedGeneric(h, self._wrap) for h in handlers])

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        wrapped = {name: self._wrap(h, f"/{service}/{name}") for name, h in handlers.items()}
        self._grpc.add_registered_method_handlers(service, wrapped)

    def add_insecure_port(self, address: str) -> int:
        return int(self._grpc.add_insecure_port(address))

    def add_secure_port(self, address: str, credentials: grpc.ServerCredentials) -> int:
        return int(self._grpc.add_secure_port(address, credentials))


class LoopServer(WrappingServer):
    """A `grpc.Server` whose servicers (async, as for grpc.aio) run on `loop`; the servicers
    are added as to any server, with the generated `add_*Servicer_to_server`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        authentication: Authentication,
        *,
        max_calls: int,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._inbox = LoopInbox(loop)
        self._authentication = authentication
        self._threads = _Threads(HOT_THREADS)
        self._max_calls = max_calls
        self._server = grpc.server(
            self._threads, options=options, maximum_concurrent_rpcs=GRPC_LIMIT_FACTOR * max_calls
        )
        super().__init__(self._server, self._bridge)

    async def start(self) -> None:
        self._server.start()

    async def stop(self, grace: float) -> None:
        """Refuse new calls, let those in flight finish within `grace` seconds, end the rest."""
        stopped = self._server.stop(grace)
        await asyncio.to_thread(stopped.wait)
        self._threads.shutdown()

    def _bridge(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        return bridged(
            handler, method, self._inbox, self._authentication, self._threads, self._max_calls
        )


class BridgedGeneric(grpc.GenericRpcHandler):  # type: ignore[misc]  # untyped base
    """A generic handler whose methods are wrapped (bridged to the loop, or checked)."""

    def __init__(
        self,
        inner: grpc.GenericRpcHandler,
        bridge: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler],
    ) -> None:
        self._inner = inner
        self._bridge = bridge

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(details)
        return None if handler is None else self._bridge(handler, details.method)


class _Threads(concurrent.futures.Executor):
    """The threads gRPC runs calls on: `hot` of them take the calls in turn, and a call that
    will last (`lasting`) gets a new thread to take its place among them."""

    def __init__(self, hot: int) -> None:
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._mine = threading.local()  # a thread's own: whether its call is lasting
        self._count = 0
        self._lock = threading.Lock()
        # Calls gRPC handed over and not yet ended, queued ones included: gRPC's own count.
        self.in_flight = 0
        for _ in range(hot):
            self._spawn()

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self.in_flight += 1
        self._work.put(_Work(future, lambda: fn(*args, **kwargs), self._ended))
        return future

    def _ended(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def lasting(self) -> None:
        """On a call's thread: the call will last; its thread ends with it, another takes its
        place now (once per call)."""
        if getattr(self._mine, "lasting", False):
            return
        self._mine.lasting = True
        self._spawn()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            count = self._count
        for _ in range(count):  # each thread takes one and ends; the lasting ones end anyway
            self._work.put(None)

    def _spawn(self) -> None:
        with self._lock:
            self._count += 1
        # A daemon: a thread still waiting on a loop that is gone must not hold up the exit.
        threading.Thread(target=self._serve, name="grpc-call", daemon=True).start()

    def _serve(self) -> None:
        self._mine.lasting = False
        while not self._mine.lasting and (work := self._work.get()) is not None:
            work.run()
        with self._lock:
            self._count -= 1


class _Work:
    """One call for a thread: `run` it into its future."""

    def __init__(
        self,
        future: concurrent.futures.Future[Any],
        run: Callable[[], Any],
        ended: Callable[[], None],
    ) -> None:
        self._future = future
        self._run = run
        self._ended = ended

    def run(self) -> None:
        try:
            if not self._future.set_running_or_notify_cancel():
                return
            try:
                result = self._run()
            except BaseException as exc:  # the future carries it to gRPC, as an executor's does
                self._future.set_exception(exc)
            else:
                self._future.set_result(result)
        finally:
            self._ended()


def bridged(
    handler: grpc.RpcMethodHandler,
    method: str,
    inbox: LoopInbox,
    authentication: Authentication,
    threads: _Threads,
    max_calls: int,
) -> grpc.RpcMethodHandler:
    """`handler` (async, as grpc.aio calls it) as a threaded request-streaming handler that
    refuses it past `max_calls` in flight and authenticates it (neither for health's calls),
    reads its one request and runs it on the loop `inbox` hands calls to."""
    decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
    serialize = handler.response_serializer
    checked = not method.startswith(HEALTH_PREFIX)

    def admitted(requests: Iterator[bytes], context: grpc.ServicerContext) -> tuple[_Call, Any]:
        call = _Call(inbox, context, threads.lasting)
        if checked:
            if threads.in_flight > max_calls:  # this call counted: past the limit
                call.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused_message(max_calls))
            call.caller = _authenticated(call, authentication, method)
        return call, _one_request(requests, call, decode, method)

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        def unary_call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            call, request = admitted(requests, context)
            return call.run(_as(call.caller, unary(request, call.context)))

        return grpc.stream_unary_rpc_method_handler(unary_call, response_serializer=serialize)
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        def stream_call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            threads.lasting()
            call, request = admitted(requests, context)
            yield from _Stream(call, lambda: streaming(request, call.context))

        return grpc.stream_stream_rpc_method_handler(stream_call, response_serializer=serialize)
    raise TypeError(f"{method}: request streaming RPCs are not served by the gateway")


class _Ended:
    """The end of a stream's responses: `error` None when they all came."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Stream:
    """A server-streaming handler's responses (yielded, or written with `context.write`),
    produced on the loop by one task and handed to the call's thread through a queue: the
    thread gives back room for more once per batch, not a hop per response. At most `_WINDOW`
    wait unsent, so a slow client holds them back."""

    def __init__(self, call: _Call, produce: Callable[[], Any]) -> None:
        self._call = call
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._room = asyncio.Semaphore(_WINDOW)
        call.context.writer = self._put
        # Unblocks the call's thread even when the loop is gone and the pump never ends.
        call.on_end(lambda: self._queue.put(_Ended(asyncio.CancelledError())))
        call.start(self._pump(produce))

    def __iter__(self) -> Iterator[Any]:
        taken = 0
        while not isinstance(item := self._queue.get(), _Ended):
            yield item
            taken += 1
            if taken >= _WINDOW // 4 or self._queue.empty():
                self._call.inbox.put(functools.partial(_release, self._room, taken))
                taken = 0
        error = item.error
        if isinstance(error, AbortedError):
            self._call.abort(error.code, error.details)
        if isinstance(error, asyncio.CancelledError):
            self._call.abort(grpc.StatusCode.CANCELLED, "the call ended")
        if error is not None:
            raise error

    async def _put(self, item: Any) -> None:
        await self._room.acquire()
        self._queue.put(item)

    async def _pump(self, produce: Callable[[], Any]) -> None:
        if self._call.caller is not None:  # this task's context: every step of the handler's
            CALLER.set(self._call.caller)
        error: BaseException | None = None
        try:
            produced = produce()
            if inspect.isasyncgen(produced):
                # Closed at once when the call ends: its cleanup (a Watch's reader) must not
                # wait for the garbage collector.
                async with contextlib.aclosing(produced) as responses:
                    async for item in responses:
                        await self._put(item)
            else:  # a coroutine that writes its responses
                await produced
        except BaseException as exc:  # the call's thread reports it, cancellation included
            error = exc
            raise
        finally:
            self._queue.put(_Ended(error))


def _release(room: asyncio.Semaphore, n: int) -> None:
    for _ in range(n):
        room.release()


def _authenticated(call: _Call, authentication: Authentication, method: str) -> Caller:
    """Who is calling: on the call's thread when nobody need be asked (one hop to the loop
    fewer per call), else on the loop."""
    if not authentication.at_once:
        return call.run(authenticate(authentication, call.context, method))
    context = call.context
    caller = authentication.caller_at_once(
        context.invocation_metadata(), peer_identity(authentication, context)
    )
    if caller is None:
        call.abort(grpc.StatusCode.UNAUTHENTICATED, unauthenticated(method, context))
    return caller


async def _as(caller: Caller | None, coro: Coroutine[Any, Any, T]) -> T:
    """`coro`, run with `caller` as `current_caller()`."""
    if caller is not None:
        CALLER.set(caller)
    return await coro


def _one_request(
    requests: Iterator[bytes], call: _Call, decode: Callable[[bytes], Any], method: str
) -> Any:
    """Read and decode the call's one request message; INVALID_ARGUMENT when it will not."""
    try:
        return decoded(next(requests, None), decode, method)
    except AbortedError as exc:
        call.abort(exc.code, exc.details)


def decoded(raw: bytes | None, decode: Callable[[bytes], Any], method: str) -> Any:
    """The call's one request message, decoded; AbortedError (INVALID_ARGUMENT) when there is
    none or it will not decode."""
    if raw is None:
        raise AbortedError(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: no request message")
    try:
        return decode(raw)
    except Exception as exc:  # protobuf's DecodeError, or invalid UTF-8 in a string field
        name = method.rsplit("/", 1)[-1]
        raise AbortedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the {name} request is not a valid message ({len(raw)} bytes): {exc}",
        ) from None
