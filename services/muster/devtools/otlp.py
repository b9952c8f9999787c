"""A minimal OTLP/HTTP trace receiver on loopback, for tests and `muster bench e2e`.

Services export spans to it as to an OpenTelemetry collector (`OTEL_EXPORTER_OTLP_ENDPOINT`,
protocol `http/protobuf`): each `POST /v1/traces` is answered with an empty success. With
`keep`, the spans are decoded and kept (`spans()`); without, only counted (a sink whose own
cost stays small while a benchmark measures the services').
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

TRACES_PATH = "/v1/traces"


class OtlpReceiver:
    """Listens on 127.0.0.1 (a free port) once started; `endpoint` is what services are told."""

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.requests = 0
        self.bytes = 0
        self._spans: list[tuple[str, Span]] = []  # (service.name, span)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received(self.path, body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: one line per export otherwise

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def received(self, path: str, body: bytes) -> None:
        with self._lock:
            self.requests += 1
            self.bytes += len(body)
        if not self.keep or path != TRACES_PATH:
            return
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource_spans.scope_spans:
                found += [(service, span) for span in scope.spans]
        with self._lock:
            self._spans += found

    def spans(self) -> list[tuple[str, Span]]:
        """Every span received so far, with the name of the service that sent it."""
        with self._lock:
            return list(self._spans)
