"""OpenTelemetry for muster: tracer setup and W3C trace context in NATS headers and gRPC metadata.

`setup_tracing` installs an SDK tracer provider only when spans go somewhere (an exporter is
configured). Otherwise spans are not made at all: `continue_trace` then only carries the W3C
`traceparent`/`tracestate` it was given (a context variable, nearly free), so every event still
carries its workload's trace id from submit to finish. The bus injects the trace context into
every published message and continues it around each handler; the gateway uses
`context_from_metadata` and `metadata_from_context` for gRPC.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from muster.contracts.v1.events_pb2 import Envelope

log = logging.getLogger(__name__)

TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()

# (module, class) of the OTLP span exporters by protocol, as OTEL_EXPORTER_OTLP_PROTOCOL names
# it. They are the `otlp` extra (the service image has it): without it, no spans are exported.
_OTLP_EXPORTERS = {
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
}
DEFAULT_OTLP_PROTOCOL = "http/protobuf"  # the OpenTelemetry specification's default


def setup_tracing(service_name: str, *, record: bool = False) -> None:
    """Install the process's tracer provider once, when spans go somewhere; later calls change
    nothing.

    Spans are exported only where asked: to stdout with MUSTER_TRACE_CONSOLE=1, over OTLP when
    an OTEL_EXPORTER_OTLP_* endpoint is set and an OTLP exporter package is installed. With
    neither (and not `record`, for tests that look at spans), no provider is installed and
    muster makes no spans: they would cost tens of microseconds per event for nothing.
    """
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    processors: list[SpanProcessor] = []
    if os.environ.get("MUSTER_TRACE_CONSOLE") == "1":
        processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    otlp = _otlp_exporter()
    if otlp is not None:
        processors.append(BatchSpanProcessor(otlp))
    if not processors and not record:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)


# Asked several times per event. OpenTelemetry's `get_tracer_provider` reads the environment on
# every call while none is installed (about 1 us); a provider named there is loaded at the
# first call, so only then is that needed: otherwise what `set_tracer_provider` sets is read.
_PROVIDER_NAMED = OTEL_PYTHON_TRACER_PROVIDER in os.environ


def recording() -> bool:
    """Whether spans are made (a tracer provider is installed, by `setup_tracing` or a host)."""
    if _PROVIDER_NAMED:
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return trace._TRACER_PROVIDER is not None  # set once, never unset


def _otlp_exporter() -> SpanExporter | None:
    """The OTLP exporter the standard variables ask for (endpoint set), else None."""
    if not any(k.startswith("OTEL_EXPORTER_OTLP") and k.endswith("ENDPOINT") for k in os.environ):
        return None
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or DEFAULT_OTLP_PROTOCOL
    )
    if protocol not in _OTLP_EXPORTERS:
        log.warning("OTLP protocol %r is not supported (grpc, http/protobuf): no spans", protocol)
        return None
    module_name, class_name = _OTLP_EXPORTERS[protocol]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_*ENDPOINT is set but %s is not installed", module_name)
        return None
    exporter: SpanExporter = getattr(module, class_name)()
    return exporter


_tracer: tuple[trace.TracerProvider, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """The tracer muster's own spans come from (made once per tracer provider: the SDK builds a
    new Tracer, resource and all, on every `get_tracer` call, and this runs once per event)."""
    global _tracer
    provider = trace.get_tracer_provider()
    if _tracer is None or _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer("muster"))
    return _tracer[1]


# The trace context `continue_trace` carries while no spans are made: W3C headers as received.
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_carried: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "muster_trace_headers", default=_NO_HEADERS
)


def trace_headers(ctx: otel_context.Context | None = None) -> dict[str, str]:
    """`traceparent` (and `tracestate`) of `ctx` (default: the current context); {} if none.

    Without `ctx`, the current span's, else what `continue_trace` carries. While no spans are
    made there is no current span to inject (muster starts spans only when `recording`), so
    the propagator, about 4 us per event, is not run.
    """
    if ctx is None and not recording():
        return dict(_carried.get())
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    if ctx is None and "traceparent" not in carrier:
        return dict(_carried.get())
    return carrier


def continue_trace(
    headers: Mapping[str, str],
    name: str,
    *,
    kind: trace.SpanKind,
    attributes: Callable[[], Mapping[str, str | int]] | None = None,
    new_trace: bool = False,
) -> contextlib.AbstractContextManager[trace.Span | None]:
    """Run the body (`with continue_trace(...) as span`) in the trace `headers` (W3C,
    lower-case names) continue.

    When spans are made: inside a new span `name` (with `attributes()`), yielded. Otherwise no
    span (None is yielded): the headers themselves become the current trace context, so events
    published in the body carry them. `new_trace`: start a trace when `headers` carry none.
    """
    if recording():
        return tracer().start_as_current_span(
            name,
            context=context_from_headers(headers),
            kind=kind,
            attributes=None if attributes is None else attributes(),
        )
    carried = {k: headers[k] for k in TRACE_HEADERS if k in headers}
    if "traceparent" not in carried and new_trace:
        carried = {"traceparent": new_traceparent()}
    return _Carrying(carried)


class _Carrying:
    """`continue_trace` while no spans are made: the body's trace context is `carried`. A
    class, not a generator: every consumed event enters one (a generator's context manager is
    a few times the calls)."""

    __slots__ = ("_carried", "_reset")

    def __init__(self, carried: Mapping[str, str]) -> None:
        self._carried = carried

    def __enter__(self) -> None:
        self._reset = _carried.set(self._carried)

    def __exit__(self, *_: object) -> None:
        _carried.reset(self._reset)


def new_traceparent() -> str:
    """A sampled W3C `traceparent` with fresh ids, drawn as OpenTelemetry's SDK draws them
    (`random.getrandbits`: ids must be unique, not secret). Not `os.urandom`: a system call
    that lets the gateway's gRPC threads take the GIL from the event loop at every Submit."""
    trace_id = random.getrandbits(128) or 1  # all zeros is invalid
    span_id = random.getrandbits(64) or 1
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def context_from_headers(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by NATS headers (an empty context when they carry none)."""
    carrier = {k.lower(): v for k, v in (headers or {}).items() if k.lower() in TRACE_HEADERS}
    return _PROPAGATOR.extract(carrier, context=otel_context.Context())


def trace_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str]:
    """The W3C trace headers among gRPC invocation metadata, for `continue_trace`."""
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        name = key.lower()
        if name in TRACE_HEADERS:
            carrier[name] = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return carrier


def context_from_metadata(
    metadata: Iterable[tuple[str, str | bytes]] | None,
) -> otel_context.Context:
    """The trace context carried by gRPC invocation metadata (`context.invocation_metadata()`)."""
    return _PROPAGATOR.extract(trace_metadata(metadata), context=otel_context.Context())


def metadata_from_context(ctx: otel_context.Context | None = None) -> list[tuple[str, str]]:
    """gRPC metadata carrying `ctx` (default: the current context), to pass with a call."""
    return sorted(trace_headers(ctx).items())


# --- spans of a workload's steps ------------------------------------------------------------
# Every helper below makes nothing (returns None) unless spans are recorded, so a service
# without an exporter pays one check per step.


@contextlib.contextmanager
def step(
    name: str,
    *,
    headers: Mapping[str, str] | None = None,
    attributes: Callable[[], Mapping[str, str | int]] | None = None,
) -> Iterator[trace.Span | None]:
    """A span `name` around the body: a child of the current span, or of the trace `headers`
    carry when given; None (no span) unless spans are recorded."""
    if not recording():
        yield None
        return
    context = None if headers is None else context_from_headers(headers)
    with tracer().start_as_current_span(
        name, context=context, attributes=None if attributes is None else attributes()
    ) as span:
        yield span


def start_span(
    name: str,
    headers: Mapping[str, str] | None,
    *,
    start_ns: int | None = None,
    links: Iterable[Mapping[str, str]] = (),
    attributes: Mapping[str, str | int] | None = None,
) -> trace.Span | None:
    """A span the caller ends, in the trace `headers` carry (a new trace without them),
    linked to the traces of `links` (each W3C headers); None unless spans are recorded."""
    if not recording():
        return None
    linked = []
    for carried in links:
        span_context = trace.get_current_span(context_from_headers(carried)).get_span_context()
        if span_context.is_valid:
            linked.append(trace.Link(span_context))
    return tracer().start_span(
        name,
        context=context_from_headers(headers),
        start_time=start_ns,
        links=linked,
        attributes=attributes,
    )


def headers_of(span: trace.Span) -> dict[str, str]:
    """The W3C headers that make `span` the parent of what is published with them."""
    return trace_headers(trace.set_span_in_context(span))


def headers_of_envelope(traceparent: str, tracestate: str) -> dict[str, str]:
    """An envelope's trace fields as W3C headers ({} when it carries none)."""
    if not traceparent:
        return {}
    if not tracestate:
        return {"traceparent": traceparent}
    return {"traceparent": traceparent, "tracestate": tracestate}


def trace_decisions(
    envs: Iterable[Envelope],
    *,
    service: str,
    trace_of: Callable[[Envelope], Mapping[str, str] | None] | None = None,
    start_ns: int | None = None,
) -> list[trace.Span]:
    """Put each decision in `envs` in its workload's trace: `trace_of(env)` (default: the trace
    it carries already). With spans recorded, each gets a span `<service>.<payload field>`
    there, which it then carries; the caller ends them once they are published."""
    spans: list[trace.Span] = []
    for env in envs:
        headers = (
            trace_of(env)
            if trace_of is not None
            else headers_of_envelope(env.traceparent, env.tracestate)
        )
        if not headers:
            continue  # no trace known: it keeps what it has
        span = start_span(
            f"{service}.{env.WhichOneof('payload')}",
            headers,
            start_ns=start_ns,
            attributes={"muster.workload": env.workload, "messaging.message.id": env.event_id},
        )
        if span is not None:
            spans.append(span)
            headers = headers_of(span)
        env.traceparent = headers.get("traceparent", "")
        env.tracestate = headers.get("tracestate", "")
    return spans
