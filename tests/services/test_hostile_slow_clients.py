"""Slow clients (slowloris) on the metrics endpoint and the dashboard: a client sending a header
byte at a time holds its connection only until the bound to read a request, a normal scrape
or page is answered meanwhile, and connections past the bound on open ones are closed unread.

The real servers on loopback, with the bounds made short or long for the case; the clients are
raw sockets, as an attacker's are.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter
from scrape_helpers import scrape

from muster.dashboard.server import serve
from muster.metrics.server import serve_metrics

pytestmark = pytest.mark.timeout(60)

SHORT_S = 1.0  # the bound to read a request, where the slow ones must be closed
LONG_S = 60.0  # where they must still be open: only the cap closes a connection
WAIT_S = 20.0  # far past SHORT_S: a connection still open then is held for ever
HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


class Slow:
    """A client that sends a request's head and then one byte every DRIP_S, never ending it."""

    DRIP_S = 0.2

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.sock.sendall(HEAD)
        self._stop = threading.Event()
        self._drip = threading.Thread(target=self._dripping, daemon=True)
        self._drip.start()

    def _dripping(self) -> None:
        while not self._stop.wait(self.DRIP_S):
            try:
                self.sock.send(b"x")
            except OSError:
                return  # closed by the server

    def closed_within(self, seconds: float) -> bool:
        """Whether the server closes it within `seconds` (it answers nothing first)."""
        self.sock.settimeout(seconds)
        try:
            return self.sock.recv(1024) == b""
        except TimeoutError:
            return False
        except OSError:
            return True  # reset

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._drip.join(timeout=5)


@contextlib.contextmanager
def slow_clients(port: int, count: int) -> Iterator[list[Slow]]:
    clients: list[Slow] = []
    try:
        clients.extend(Slow(port) for _ in range(count))
        yield clients
    finally:
        for client in clients:
            client.close()


@contextlib.contextmanager
def metrics_server(*, read_s: float, most: int) -> Iterator[int]:
    registry = CollectorRegistry()
    Counter("muster_test_scrapes", "a counter to find in the scrape", registry=registry).inc()
    port, stop = serve_metrics(
        registry, host="127.0.0.1", port=0, read_s=read_s, max_connections=most
    )
    try:
        yield port
    finally:
        stop()


def test_slow_clients_on_metrics_are_closed_and_a_scrape_is_answered_meanwhile() -> None:
    with metrics_server(read_s=SHORT_S, most=8) as port, slow_clients(port, 3) as slow:
        samples = scrape(f"127.0.0.1:{port}")
        assert samples[("muster_test_scrapes_total", frozenset())] == 1.0
        assert [s.closed_within(WAIT_S) for s in slow] == [True, True, True]


def test_metrics_connections_past_the_bound_are_closed_unread() -> None:
    with metrics_server(read_s=LONG_S, most=3) as port, slow_clients(port, 5) as slow:
        held, extra = slow[:3], slow[3:]
        assert [s.closed_within(WAIT_S) for s in extra] == [True, True]
        assert [s.closed_within(0.5) for s in held] == [False, False, False]
    with metrics_server(read_s=LONG_S, most=3) as port:  # and answered once they are gone
        assert scrape(f"127.0.0.1:{port}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def dashboard(*, read_s: float, most: int) -> Any:
    port = free_port()
    task = asyncio.create_task(
        serve(
            host="127.0.0.1",
            port=port,
            gateway="127.0.0.1:1",  # no gateway: /healthz does not ask one
            credentials=None,
            read_s=read_s,
            max_connections=most,
        )
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(200):
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as reply:
                        if reply.status == 200:
                            break
                await asyncio.sleep(0.05)  # the server binds its port: nothing to await
        yield port
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def healthz(port: int) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/healthz") as reply,
    ):
        return f"{reply.status} {await reply.text()}"


async def test_slow_clients_on_the_dashboard_are_closed_and_a_page_is_answered_meanwhile() -> None:
    async with dashboard(read_s=SHORT_S, most=8) as port:
        with slow_clients(port, 3) as slow:
            assert await healthz(port) == "200 ok\n"
            closed = [asyncio.to_thread(s.closed_within, WAIT_S) for s in slow]
            assert await asyncio.gather(*closed) == [True, True, True]


async def test_dashboard_connections_past_the_bound_are_closed_unread() -> None:
    async with dashboard(read_s=LONG_S, most=3) as port:
        with slow_clients(port, 5) as slow:
            held, extra = slow[:3], slow[3:]
            closed = [asyncio.to_thread(s.closed_within, WAIT_S) for s in extra]
            assert await asyncio.gather(*closed) == [True, True]
            still = [asyncio.to_thread(s.closed_within, 0.5) for s in held]
            assert await asyncio.gather(*still) == [False, False, False]
        assert await healthz(port) == "200 ok\n"  # answered once they are gone
