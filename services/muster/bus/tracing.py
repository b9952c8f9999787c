"""OpenTelemetry for muster: tracer setup and W3C trace context in NATS headers and gRPC metadata.

`setup_tracing` installs an SDK tracer provider, so spans carry real trace ids even when nothing
exports them. The bus injects `traceparent`/`tracestate` into every published message and
continues them around each handler; the gateway uses `context_from_metadata` and
`metadata_from_context` for gRPC.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()

# (module, class) of the OTLP exporters, tried in order when OTEL_EXPORTER_OTLP_* is set. They
# are optional: muster does not depend on them, a deployment that wants them installs one.
_OTLP_EXPORTERS = (
    ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
)


def setup_tracing(service_name: str) -> None:
    """Install the process's tracer provider once; later calls change nothing.

    Spans are exported only where asked: to stdout with MUSTER_TRACE_CONSOLE=1, over OTLP when
    an OTEL_EXPORTER_OTLP_* endpoint is set and an OTLP exporter package is installed.
    """
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if os.environ.get("MUSTER_TRACE_CONSOLE") == "1":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    otlp = _otlp_exporter()
    if otlp is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp))
    trace.set_tracer_provider(provider)


def _otlp_exporter() -> SpanExporter | None:
    if not any(k.startswith("OTEL_EXPORTER_OTLP") and k.endswith("ENDPOINT") for k in os.environ):
        return None
    for module_name, class_name in _OTLP_EXPORTERS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        exporter: SpanExporter = getattr(module, class_name)()
        return exporter
    log.warning("OTEL_EXPORTER_OTLP_*ENDPOINT is set but no OTLP exporter package is installed")
    return None


_tracer: tuple[trace.TracerProvider, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """The tracer muster's own spans come from (made once per tracer provider: the SDK builds a
    new Tracer, resource and all, on every `get_tracer` call, and this runs once per event)."""
    global _tracer
    provider = trace.get_tracer_provider()
    if _tracer is None or _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer("muster"))
    return _tracer[1]


def trace_headers(ctx: otel_context.Context | None = None) -> dict[str, str]:
    """`traceparent` (and `tracestate`) of `ctx` (default: the current context); {} if none."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return carrier


def context_from_headers(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by NATS headers (an empty context when they carry none)."""
    carrier = {k.lower(): v for k, v in (headers or {}).items() if k.lower() in TRACE_HEADERS}
    return _PROPAGATOR.extract(carrier, context=otel_context.Context())


def context_from_metadata(
    metadata: Iterable[tuple[str, str | bytes]] | None,
) -> otel_context.Context:
    """The trace context carried by gRPC invocation metadata (`context.invocation_metadata()`)."""
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        name = key.lower()
        if name in TRACE_HEADERS:
            carrier[name] = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return _PROPAGATOR.extract(carrier, context=otel_context.Context())


def metadata_from_context(ctx: otel_context.Context | None = None) -> list[tuple[str, str]]:
    """gRPC metadata carrying `ctx` (default: the current context), to pass with a call."""
    return sorted(trace_headers(ctx).items())
