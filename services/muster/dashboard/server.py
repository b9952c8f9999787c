"""The dashboard's web server: static pages, and JSON and server-sent events from the gateway.

A gateway client, not a reader of NATS: every answer is the gateway's (Visibility and
Events.Watch), asked with the bearer token the browser sends, so the dashboard sees what that
user may see, through the same authentication and `watch` permission as `muster queues` and
`muster events`. It only reads: it calls no RPC that changes anything.

Routes: `/` and `/static/*` (the page: plain HTML, JS and CSS, no build step), `/healthz`,
`/api/queues`, `/api/workloads`, `/api/workload?namespace=&name=`,
`/api/clusters?summary=1` (each cluster's state and totals) and
`/api/clusters?cluster=&limit=&continue=` (a page of nodes) (JSON, the protobuf answers with
their proto field names in camelCase), `/api/events?from=N`
(server-sent events: one `muster` event per envelope, with its sequence as the id, its
readable detail, and a comment every KEEPALIVE_S so a dead client is noticed).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.dashboard.listener import MAX_CONNECTIONS, READ_S, listen
from muster.gateway.eventtext import detail

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "static"
KEEPALIVE_S: Final = 15.0
CALL_TIMEOUT_S: Final = 15.0
# An Authorization value gRPC metadata can carry: printable ASCII, spaces between words.
_HEADER_SAFE: Final = re.compile(r"[!-~]+(?: [!-~]+)*")
NODES_PAGE: Final = 100  # nodes per cluster the nodes page shows at once
MAX_NODES_PAGE: Final = 1_000
MAX_SEQUENCE: Final = 2**63 - 1  # far past any stream; Watch's from_sequence is a uint64
_HTTP_STATUS: Final = {
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNAVAILABLE: 503,
}
GATEWAY_KEY: Final = web.AppKey("gateway", grpc.aio.Channel)


def _metadata(request: web.Request) -> list[tuple[str, str]]:
    """The browser's bearer token, passed on to the gateway (never logged, never stored).
    ValueError when gRPC could not carry it (non-ASCII, control characters): it raised
    out of the call, a 500."""
    auth = request.headers.get("Authorization", "")
    if auth and not _HEADER_SAFE.fullmatch(auth):
        raise ValueError("Authorization: must be 'Bearer TOKEN', the token printable ASCII")
    return [("authorization", auth)] if auth else []


def _json(message: Message) -> web.Response:
    body = json_format.MessageToJson(message, always_print_fields_with_no_presence=True)
    return web.Response(text=body, content_type="application/json")


def _error(exc: grpc.aio.AioRpcError) -> web.Response:
    status = _HTTP_STATUS.get(exc.code(), 502)
    body = {"code": exc.code().name, "error": exc.details() or ""}
    return web.json_response(body, status=status)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _visibility(method: str, request_of: Callable[[web.Request], Message]) -> Handler:
    """A route answering one Visibility call's reply as JSON (its errors as HTTP statuses)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        stub = services_pb2_grpc.VisibilityStub(request.app[GATEWAY_KEY])
        call = getattr(stub, method)
        try:
            metadata = _metadata(request)
            asked = request_of(request)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        try:
            reply = await call(asked, metadata=metadata, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            return _error(exc)
        return _json(reply)

    return handler


def _list_request(request: web.Request) -> Message:
    q = request.query
    return services_pb2.ListWorkloadsRequest(
        namespace=q.get("namespace", ""),
        cluster_queue=q.get("cluster_queue", ""),
        local_queue=q.get("local_queue", ""),
        statuses=q.getall("status", []),
        name=q.get("name", ""),
    )


def _clusters_request(request: web.Request) -> Message:
    """Clusters as the page asks: `summary=1` for totals without nodes, else one page of at
    most `limit` nodes (NODES_PAGE by default, MAX_NODES_PAGE at most: the answer's JSON
    stays small whatever the cluster's size) after `continue`. ValueError naming the field."""
    q = request.query
    if q.get("summary", "") == "1":
        return services_pb2.ClustersRequest(cluster=q.get("cluster", ""), without_nodes=True)
    text = q.get("limit", str(NODES_PAGE))
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_NODES_PAGE))
    if not digits or not 1 <= int(text) <= MAX_NODES_PAGE:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"limit: must be a whole number from 1 to {MAX_NODES_PAGE}, got {shown!r}")
    return services_pb2.ClustersRequest(
        cluster=q.get("cluster", ""), limit=int(text), continue_token=q.get("continue", "")
    )


def _describe_request(request: web.Request) -> Message:
    q = request.query
    return services_pb2.DescribeWorkloadRequest(
        namespace=q.get("namespace", ""), name=q.get("name", "")
    )


def event_json(env: events_pb2.Envelope) -> dict[str, Any]:
    """What the page needs of one event: no payload, its readable line instead."""
    field = env.WhichOneof("payload")
    out: dict[str, Any] = {
        "sequence": env.sequence,
        "time": env.time_unix_nano // 1_000_000,  # ms, as JavaScript's Date
        "type": env.type,
        "workload": env.workload,
        "cluster": env.cluster,
        "detail": detail(env),
    }
    if field in ("admitted", "quota_reserved"):
        out["clusterQueue"] = getattr(env, field).admission.cluster_queue
    elif field == "pending":
        out["clusterQueue"] = env.pending.cluster_queue
    return out


async def _events(request: web.Request) -> web.StreamResponse:
    """Events.Watch as server-sent events, from `from` (default 1: everything stored)."""
    try:
        start = _sequence(request.query.get("from", "1"), "from")
        last_id = request.headers.get("Last-Event-ID", "")
        if last_id:
            start = _sequence(last_id, "Last-Event-ID") + 1
        metadata = _metadata(request)
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    stub = services_pb2_grpc.EventsStub(request.app[GATEWAY_KEY])
    call = stub.Watch(services_pb2.WatchRequest(from_sequence=start), metadata=metadata)
    try:
        await _relay(call, response)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.CANCELLED:
            body = json.dumps({"code": exc.code().name, "error": exc.details() or ""})
            await response.write(f"event: failure\ndata: {body}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the page went away
    finally:
        call.cancel()
    return response


def _sequence(text: str, what: str) -> int:
    """`text` as a stream sequence, else ValueError naming `what`. Checked before the stream
    starts: `int()` takes "²" and numbers past uint64, which then failed mid-answer."""
    digits = text.isascii() and text.isdigit()
    if not digits or len(text) > len(str(MAX_SEQUENCE)) or int(text) > MAX_SEQUENCE:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"{what}: must be a whole number from 0 to {MAX_SEQUENCE}, got {shown!r}")
    return int(text)


async def _relay(call: Any, response: web.StreamResponse) -> None:
    """Write each envelope of `call` as an event; a comment when nothing came for a while."""
    stream = aiter(call)
    while True:
        try:
            async with asyncio.timeout(KEEPALIVE_S):
                env = await anext(stream)
        except TimeoutError:
            await response.write(b": keepalive\n\n")
            continue
        except StopAsyncIteration:
            return
        data = json.dumps(event_json(env), separators=(",", ":"))
        await response.write(f"id: {env.sequence}\nevent: muster\ndata: {data}\n\n".encode())


async def _index(_: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html")


async def _healthz(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok\n")


def _loopback_name(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@web.middleware
async def _loopback_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Served on loopback, answer only requests addressed to a loopback name. A web page
    of another site can point its own name at 127.0.0.1 (DNS rebinding) and read what it
    is answered: with a gateway that asks no token (`muster up`), every queue and workload."""
    if not _loopback_name(request.url.host):
        body = {
            "error": f"Host: {request.host[:80]!r}: not a loopback name (the dashboard "
            "listens on loopback; reach it as localhost or 127.0.0.1)"
        }
        return web.json_response(body, status=421)
    return await handler(request)


def build_app(channel: grpc.aio.Channel, *, loopback: bool = True) -> web.Application:
    """The dashboard's routes; `loopback`: it listens on a loopback address, so it answers
    only requests addressed to a loopback name (`_loopback_only`)."""
    app = web.Application(middlewares=[_loopback_only] if loopback else [])
    app[GATEWAY_KEY] = channel
    app.router.add_get("/", _index)
    app.router.add_get("/healthz", _healthz)
    queues = _visibility("QueueStatus", lambda _: services_pb2.QueueStatusRequest())
    app.router.add_get("/api/queues", queues)
    app.router.add_get("/api/workloads", _visibility("ListWorkloads", _list_request))
    app.router.add_get("/api/workload", _visibility("DescribeWorkload", _describe_request))
    app.router.add_get("/api/clusters", _visibility("Clusters", _clusters_request))
    app.router.add_get("/api/events", _events)
    app.router.add_static("/static", STATIC)
    return app


async def serve(
    *,
    host: str,
    port: int,
    gateway: str,
    credentials: grpc.ChannelCredentials | None,
    read_s: float = READ_S,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve until cancelled; prints "dashboard: http://HOST:PORT" once listening. A request
    not read within `read_s` is closed, and so is a connection past `max_connections`
    (`muster.dashboard.listener`)."""
    if credentials is None:
        channel = grpc.aio.insecure_channel(gateway)
    else:
        channel = grpc.aio.secure_channel(gateway, credentials)
    app = build_app(channel, loopback=_loopback_name(host))
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=read_s)
    await runner.setup()
    try:
        listening = await listen(runner, host, port, max_connections=max_connections)
        try:
            bound = listening.sockets[0].getsockname()[1] if listening.sockets else port
            print(f"dashboard: http://{host}:{bound}", flush=True)
            log.info("dashboard on http://%s:%s, gateway %s", host, bound, gateway)
            await asyncio.Event().wait()
        finally:
            listening.close()
    finally:
        await runner.cleanup()
        await channel.close()
