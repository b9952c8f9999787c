"""The HTTPS server behind Kueue's visibility APIService (`kube_visibility`): what the Kubernetes
aggregation layer proxies `kubectl get --raw /apis/visibility.kueue.x-k8s.io/...` to.

Authentication is delegated as an aggregated API server's is: a request that presents a client
certificate signed by the front-proxy CA (with an allowed CN) is the user its
`X-Remote-User` / `X-Remote-Group` headers name; a bearer token is asked about with a
TokenReview; anything else is 401. Authorization is Kueue's: a SubjectAccessReview for `get`
on `clusterqueues/pendingworkloads` (or `localqueues/pendingworkloads` in the namespace) in
group visibility.kueue.x-k8s.io. Without `--visibility-client-ca`, the front-proxy CA and its
settings are read from ConfigMap kube-system/extension-apiserver-authentication, where the API
server publishes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec
from aiohttp import web

from muster.cluster.errors import ClusterError
from muster.cluster.kube.reviews import ResourceAttributes, Reviews
from muster.gateway.kube_visibility import (
    GROUP,
    Answer,
    Query,
    discovery,
    forbidden,
    query_of,
    status,
    summary,
)
from muster.gateway.visibility import VisibilityStore

log = logging.getLogger(__name__)

AUTHENTICATION_CONFIG_MAP: Final = (
    "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
)
_HEALTH: Final = frozenset({"/healthz", "/livez", "/readyz"})


class FrontProxy(msgspec.Struct, frozen=True, kw_only=True):
    """Which requests come from the aggregation layer, and where it says who the user is."""

    client_ca: str  # PEM: the CA that signs the front proxy's client certificate
    allowed_names: tuple[str, ...] = ()  # CNs it may have; empty: any the CA signed
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)


class VisibilityServing(msgspec.Struct, frozen=True, kw_only=True):
    """`--visibility-listen` and the files it needs (docs/kubernetes.md, "Pending visibility")."""

    listen: str  # HOST:PORT; port 0 picks a free one
    tls_cert: str
    tls_key: str
    client_ca: str = ""  # a PEM file; "" reads the API server's ConfigMap
    allowed_names: tuple[str, ...] = ()


async def front_proxy_of(config: VisibilityServing, reviews: Reviews) -> FrontProxy:
    """The front proxy's settings: from the flags, or from the API server's ConfigMap."""
    if config.client_ca:
        ca = await asyncio.to_thread(Path(config.client_ca).read_text, encoding="utf-8")
        return FrontProxy(client_ca=ca, allowed_names=config.allowed_names)
    found = await reviews.transport.checked(
        "GET",
        AUTHENTICATION_CONFIG_MAP,
        obj="ConfigMap/kube-system/extension-apiserver-authentication",
    )
    data = (found or {}).get("data") or {}
    published = data.get("requestheader-client-ca-file")
    if not isinstance(published, str) or not published:
        raise ValueError(
            "ConfigMap kube-system/extension-apiserver-authentication has no "
            "requestheader-client-ca-file: give --visibility-client-ca"
        )
    return FrontProxy(
        client_ca=published,
        allowed_names=config.allowed_names or _names(data, "requestheader-allowed-names"),
        username_headers=_names(data, "requestheader-username-headers") or ("X-Remote-User",),
        group_headers=_names(data, "requestheader-group-headers") or ("X-Remote-Group",),
    )


def _names(data: dict[str, str], key: str) -> tuple[str, ...]:
    try:
        value = json.loads(data.get(key) or "[]")
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


class VisibilityServer:
    """Kueue's visibility API over HTTPS; `start`, then `stop`."""

    def __init__(
        self,
        store: VisibilityStore,
        reviews: Reviews,
        *,
        serving: VisibilityServing,
        front_proxy: FrontProxy,
    ) -> None:
        self._store = store
        self._reviews = reviews
        self._serving = serving
        self._proxy = front_proxy
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen; return the address ("HOST:PORT"). OSError when it cannot."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, _, port = self._serving.listen.rpartition(":")
        site = web.TCPSite(runner, host, int(port), ssl_context=self._tls())
        await site.start()
        self._runner = runner
        bound = runner.addresses[0][1]
        return f"{host}:{bound}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _tls(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._serving.tls_cert, self._serving.tls_key)
        context.verify_mode = ssl.CERT_OPTIONAL  # the front proxy's, or none (a bearer token)
        context.load_verify_locations(cadata=self._proxy.client_ca)
        return context

    async def _handle(self, request: web.Request) -> web.Response:
        if request.path in _HEALTH:
            return web.Response(text="ok")
        answer = await self._answer(request)
        return web.json_response(answer.body, status=answer.status)

    async def _answer(self, request: web.Request) -> Answer:
        who = await self._caller(request)
        if who is None:
            return status(401, "Unauthorized", "Unauthorized")
        if request.method != "GET":
            return status(405, "MethodNotAllowed", f"the server does not allow {request.method}")
        found = discovery(request.path)
        if found is not None:
            return found
        query = query_of(request.path, request.query)
        if query is None:
            return status(404, "NotFound", "the server could not find the requested resource")
        if isinstance(query, Answer):
            return query
        user, groups = who
        try:
            allowed = await self._reviews.may(user, groups, _attributes(query))
        except ClusterError as exc:
            log.warning("visibility: SubjectAccessReview failed: %s", exc)
            return status(503, "ServiceUnavailable", f"cannot check permissions now: {exc}")
        if not allowed:
            return forbidden(query, user)
        return await summary(self._store, query)

    async def _caller(self, request: web.Request) -> tuple[str, tuple[str, ...]] | None:
        """(user, groups) of the request, or None when it is not authenticated."""
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if peer:
            if self._proxy.allowed_names and _common_name(peer) not in self._proxy.allowed_names:
                return None
            user = next((request.headers.get(h) for h in self._proxy.username_headers
                         if request.headers.get(h)), None)  # fmt: skip
            if not user:
                return None
            groups = [g for h in self._proxy.group_headers for g in request.headers.getall(h, [])]
            return user, tuple(groups)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            reviewed = await self._reviews.user_of(token.strip())
        except ClusterError as exc:
            log.warning("visibility: TokenReview failed: %s", exc)
            return None
        return None if reviewed is None else (reviewed.username, reviewed.groups)


def _attributes(query: Query) -> ResourceAttributes:
    """What Kueue's visibility server asks RBAC about one query."""
    return ResourceAttributes(
        verb="get",
        group=GROUP,
        resource=query.plural,
        subresource="pendingworkloads",
        namespace=query.namespace,
        name=query.name,
    )


def _common_name(peer: dict[str, Sequence[Sequence[tuple[str, str]]]]) -> str:
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""
