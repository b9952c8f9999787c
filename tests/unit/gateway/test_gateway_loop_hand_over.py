"""A call's hand-over between its gRPC thread and the gateway's loop (`loop_server._Call`): the
thread gets the handler's value, its error, its abort as the call's status, and CANCELLED when
the call ends first, whose handler is then cancelled on the loop. A handler slower than
`SLOW_S` still answers, after its thread gave its place on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from muster.gateway import loop_server


class AbortedError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class FakeContext:
    """What `_Call` uses of gRPC's context: its end callback and abort."""

    def __init__(self) -> None:
        self.ended: Callable[[], None] | None = None

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self.ended = callback
        return True

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AbortedError(code, details)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def run_call(
    loop: asyncio.AbstractEventLoop,
    handler: Any,
    context: FakeContext | None = None,
    on_slow: Callable[[], object] = lambda: None,
) -> tuple[Any, list[str]]:
    """`handler` run as a call's thread runs it; (its outcome, what the thread was told)."""
    told: list[str] = []

    def slow() -> None:
        told.append("slow")
        on_slow()

    call = loop_server._Call(loop_server.LoopInbox(loop), context or FakeContext(), slow)
    try:
        return call.run(handler), told
    except Exception as exc:  # the outcome under test
        return exc, told


def test_the_thread_gets_the_handlers_value_and_its_own_errors(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def answer() -> str:
        return "submitted"

    async def fails() -> str:
        raise TimeoutError("the handler's own timeout")

    assert run_call(loop, answer()) == ("submitted", [])
    error, told = run_call(loop, fails())
    assert isinstance(error, TimeoutError)
    assert str(error) == "the handler's own timeout"
    assert told == []


def test_an_abort_on_the_loop_is_the_calls_status(loop: asyncio.AbstractEventLoop) -> None:
    context = FakeContext()

    async def refuses() -> None:
        await loop_server.CallContext(context).abort(
            grpc.StatusCode.PERMISSION_DENIED, "Workload/ns/w: permission submit denied"
        )

    error, _ = run_call(loop, refuses(), context)
    assert isinstance(error, AbortedError)
    assert (error.code, str(error)) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "Workload/ns/w: permission submit denied",
    )


def test_a_slow_handler_still_answers_after_its_thread_gave_its_place_on(
    loop: asyncio.AbstractEventLoop,
) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "submitted"

    # The handler ends only once its thread, past SLOW_S, has given its place on.
    assert run_call(loop, slow(), on_slow=lambda: loop.call_soon_threadsafe(release.set)) == (
        "submitted",
        ["slow"],
    )


def test_a_call_that_ends_first_is_cancelled_and_so_is_its_handler(
    loop: asyncio.AbstractEventLoop,
) -> None:
    context = FakeContext()
    started = threading.Event()
    handler_cancelled = threading.Event()

    async def follows() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise

    def end_when_started() -> None:
        assert started.wait(10)
        assert context.ended is not None
        context.ended()  # the client went away

    ender = threading.Thread(target=end_when_started)
    ender.start()
    error, _ = run_call(loop, follows(), context)
    ender.join()
    assert isinstance(error, AbortedError)
    assert (error.code, str(error)) == (grpc.StatusCode.CANCELLED, "the call ended")
    assert handler_cancelled.wait(10)


def test_calls_that_arrive_before_the_loop_runs_them_wake_it_once() -> None:
    loop = asyncio.new_event_loop()
    wakes: list[object] = []
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(callback: Callable[..., object], *args: object) -> asyncio.Handle:
        wakes.append(callback)
        return call_soon_threadsafe(callback, *args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign, assignment]  # counted
    inbox = loop_server.LoopInbox(loop)

    async def answer(n: int) -> int:
        return n

    def started(n: int) -> loop_server._Answer[int]:
        """A call's thread handing its handler over, on a thread of its own."""
        answers: list[loop_server._Answer[int]] = []
        thread = threading.Thread(
            target=lambda: answers.append(
                loop_server._Call(inbox, FakeContext(), lambda: None).start(answer(n))
            )
        )
        thread.start()
        thread.join()
        return answers[0]

    batch = [started(n) for n in range(5)]  # before the loop runs: it is busy elsewhere
    assert len(wakes) == 1
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    try:
        assert all(a.wait(10) for a in batch)
        assert [a.outcome() for a in batch] == [0, 1, 2, 3, 4]
        later = started(5)  # the batch has run: this call wakes the loop again
        assert later.wait(10)
        assert later.outcome() == 5
        assert len(wakes) == 2
    finally:
        call_soon_threadsafe(loop.stop)
        running.join()
        loop.close()
