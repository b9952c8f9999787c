"""The `/metrics` endpoint of one service: prometheus-client's WSGI app, on its own threads.

A scrape reads the registry under prometheus-client's locks while the service's event loop
keeps running; it never waits for the loop.

The server bounds what a client holds (a platform team exposes the port to Prometheus): a
request must be read within `read_s` of its connection (a client sending a header byte a second
held a thread for ever), each send or receive is given `read_s` too, and at most
`max_connections` are open at once; one past that is closed unread, and the others are
answered meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

READ_S: Final = 10.0  # a scrape's request is one small packet
MAX_CONNECTIONS: Final = 64  # Prometheus opens one per scrape


class _Handler(WSGIRequestHandler):
    """One request per connection, closed when it is not read in time; logs nothing (a
    scrape every few seconds would fill the service's log)."""

    server: _BoundedServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_s)  # each send and receive
        self._late = threading.Timer(self.server.read_s, self._too_slow)
        self._late.daemon = True
        self._late.start()

    def parse_request(self) -> bool:
        read = super().parse_request()  # the request line and headers are in
        self._late.cancel()
        return read

    def finish(self) -> None:
        self._late.cancel()
        super().finish()

    def _too_slow(self) -> None:
        with contextlib.suppress(OSError):  # already closed
            self.connection.shutdown(socket.SHUT_RDWR)  # wakes its thread, which then ends

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingWSGIServer):
    """A thread per connection, `max_connections` at most."""

    def __init__(self, address: tuple[str, int], handler: Any, *, read_s: float, most: int):
        self.read_s = read_s
        self.most = most
        self._open = 0
        self._lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = self._open >= self.most
            if not full:
                self._open += 1
        if full:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open -= 1


def serve_metrics(
    registry: CollectorRegistry,
    *,
    host: str,
    port: int,
    read_s: float = READ_S,
    max_connections: int = MAX_CONNECTIONS,
) -> tuple[int, Callable[[], None]]:
    """Serve `registry` on http://host:port/metrics; (the bound port, a function that stops it).

    Port 0 picks a free one. Raises OSError when the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(_BoundedServer):
        address_family = family

    server = Server((host, port), _Handler, read_s=read_s, most=max_connections)
    server.set_app(make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return int(server.server_port), stop
