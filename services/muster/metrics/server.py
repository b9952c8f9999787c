"""The `/metrics` endpoint of one service: prometheus-client's HTTP server, on its own thread.

A scrape reads the registry under prometheus-client's locks while the service's event loop
keeps running; it never waits for the loop.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, start_http_server


def serve_metrics(
    registry: CollectorRegistry, *, host: str, port: int
) -> tuple[int, Callable[[], None]]:
    """Serve `registry` on http://host:port/metrics; (the bound port, a function that stops it).

    Port 0 picks a free one. Raises OSError when the address cannot be bound.
    """
    server, thread = start_http_server(port, addr=host, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return int(server.server_port), stop
