"""HTTP to the API server through the official asyncio client (`kubernetes.aio`), and the one
place where its failures become `ClusterError`s.

Requests go through `ApiClient.param_serialize`/`call_api` (the client's auth, TLS, connection
pool) with preloading off: bodies come back as bytes, decoded by msgspec; non-2xx answers are
mapped by status, never raised as `ApiException`. Writes wait for the write token bucket.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import aiohttp
import msgspec
from kubernetes.aio.client import ApiClient
from kubernetes.aio.client.exceptions import ApiException, OpenApiException
from multidict import CIMultiDict

from muster.cluster.backend import Identity
from muster.cluster.errors import (
    ClusterError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
)
from muster.cluster.kube.ratelimit import TokenBucket
from muster.cluster.kube.retry import UnavailableError

T = TypeVar("T")
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_TEMPORARY_STATUS = frozenset({408, 409, 410, 425, 429, 500, 502, 503, 504})
_REASONS = {401: "Unauthorized", 403: "Forbidden", 410: "Expired", 429: "TooManyRequests"}


class Response(msgspec.Struct, frozen=True, kw_only=True):
    status: int
    body: bytes
    retry_after_s: float | None = None  # the Retry-After header, when the server sent one

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return msgspec.json.decode(self.body) if self.body else None

    def error(self, obj: str) -> ClusterError:
        return status_error(obj, self.status, self.body, retry_after_s=self.retry_after_s)


class _ListMeta(msgspec.Struct, frozen=True):
    resourceVersion: str = ""  # noqa: N815 - wire names
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct, frozen=True):
    metadata: _ListMeta = _ListMeta()
    items: list[dict[str, Any]] | None = None


_list_decoder = msgspec.json.Decoder(_List)


class _Cause(msgspec.Struct, frozen=True):
    field: str = ""
    message: str = ""


class _Details(msgspec.Struct, frozen=True):
    causes: list[_Cause] = msgspec.field(default_factory=list)
    retryAfterSeconds: int | None = None  # noqa: N815 - the wire name


class _Status(msgspec.Struct, frozen=True):
    """The Status object an error answer carries (every field optional: proxies answer HTML)."""

    reason: str = ""
    message: str = ""
    code: int = 0
    details: _Details = msgspec.field(default_factory=_Details)


def decode_status(body: bytes) -> _Status:
    try:
        return msgspec.json.decode(body, type=_Status)
    except msgspec.DecodeError:
        return _Status(message=body[:200].decode(errors="replace"))


def status_error(
    obj: str, status: int, body: bytes, *, retry_after_s: float | None = None
) -> ClusterError:
    """The ClusterError for an error answer: temporary for 409 Conflict, 410, 429 and 5xx."""
    decoded = decode_status(body)
    message = decoded.message or f"HTTP {status}"
    if status == 404:
        return NotFoundError(obj)
    if status == 422:
        problems = [
            f"{c.field}: {c.message}" if c.field else c.message for c in decoded.details.causes
        ]
        return InvalidObjectError(obj, problems or [message])
    if status == 409 and decoded.reason != "AlreadyExists":
        return ConflictError(obj, message)
    reason = decoded.reason or _REASONS.get(status, "Unavailable" if status >= 500 else "Failed")
    if status in _TEMPORARY_STATUS:
        if retry_after_s is None and decoded.details.retryAfterSeconds is not None:
            retry_after_s = float(decoded.details.retryAfterSeconds)
        return UnavailableError(obj, reason, message, retry_after_s=retry_after_s)
    return ClusterError(obj, reason, message)


@contextlib.contextmanager
def client_errors(obj: str) -> Iterator[None]:
    """Raise connection failures and client exceptions inside as ClusterErrors."""
    try:
        yield
    except ApiException as err:  # only from the client's own retry helpers; mapped by status
        raise status_error(obj, int(err.status or 0), (err.body or "").encode()) from err
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        raise ClusterError(obj, "Unavailable", f"API server: {err!r}", temporary=True) from err
    except OpenApiException as err:
        raise ClusterError(obj, "Failed", str(err)) from err


class Transport:
    """Requests and watch streams over one `ApiClient` (closed by `close` when owned).

    The client may come later, and be replaced (`use`): a worker cluster's comes from its
    MultiKueueCluster's kubeconfig, read again as it changes (`worker`). Without one, every
    request fails at once with why (`missing`), as a connection that is refused would.
    """

    def __init__(
        self,
        api: ApiClient | None,
        *,
        writes: TokenBucket,
        owns_client: bool = True,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.api = api
        self.missing = ClusterError("", "Unconfigured", "no client yet", temporary=True)
        self.writes = writes
        self._owns_client = owns_client
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self.requests = 0  # answered requests, for benchmarks and tests
        self.watch_lines = 0  # watch event lines received (bookmarks included)

    async def use(self, api: ApiClient | None, *, why: ClusterError | None = None) -> None:
        """Send from now on through `api` (None: fail every request with `why`); the client
        used before is closed, so its watches end and resume on the new one."""
        old, self.api = self.api, api
        if why is not None:
            self.missing = why
        if old is not None and old is not api and self._owns_client:
            with contextlib.suppress(Exception):  # closing is best effort
                await old.close()  # type: ignore[no-untyped-call]  # the client has no hints here

    async def close(self) -> None:
        await self.use(None)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]],
        body: Any,
        content_type: str,
        limits: aiohttp.ClientTimeout,
        as_user: Identity | None = None,
    ) -> Any:
        api = self.api
        if api is None:
            why = self.missing  # a new error each time: one raised again keeps its traceback
            raise ClusterError(why.obj, why.reason, why.message, temporary=why.temporary)
        method, url, headers, data, post = await api.param_serialize(
            method,
            path,
            query_params=list(query) or None,
            header_params={"Content-Type": content_type, "Accept": JSON},
            body=body,
            auth_settings=["BearerToken"],
        )
        sent: Mapping[str, str] = headers
        if as_user is not None:
            sent = impersonating(headers, as_user)
        response = await api.call_api(
            method, url, sent, data, post, _preload_content=False, _request_timeout=limits
        )
        self.requests += 1
        return response.response

    async def request(
        self,
        method: str,
        path: str,
        *,
        obj: str = "",
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = JSON,
        paced: bool = True,
        as_user: Identity | None = None,
    ) -> Response:
        """One request; the answer whatever its status. Raises ClusterError only when there
        is no answer (connection refused or reset, timeout). A write waits for the write
        bucket unless not `paced` (a caller with a bucket of its own). With `as_user`, the
        request is made as that user (`impersonating`)."""
        if paced and method in _WRITES:
            await self.writes.acquire()
        with client_errors(obj):
            raw = await self._send(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                limits=self._timeout,
                as_user=as_user,
            )
            try:
                data = await raw.read()
            finally:
                raw.release()
        return Response(status=raw.status, body=data, retry_after_s=_retry_after(raw.headers))

    async def checked(
        self,
        method: str,
        path: str,
        *,
        obj: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = JSON,
        paced: bool = True,
        as_user: Identity | None = None,
    ) -> Any:
        """One request whose error answers raise (`status_error`); returns the decoded body."""
        response = await self.request(
            method,
            path,
            obj=obj,
            query=query,
            body=body,
            content_type=content_type,
            paced=paced,
            as_user=as_user,
        )
        if not response.ok:
            raise response.error(obj)
        return response.json()

    async def _lines(self, content: aiohttp.StreamReader, obj: str) -> AsyncIterator[bytes]:
        with client_errors(obj):
            async for line in content:
                self.watch_lines += 1
                yield line

    async def list_all(
        self,
        path: str,
        *,
        obj: str,
        query: Sequence[tuple[str, Any]] = (),
        page_size: int = 500,
    ) -> tuple[list[dict[str, Any]], int]:
        """Every object of collection `path` (in pages of `page_size`), and the list's
        resourceVersion. A snapshot that expires between pages is listed again from the start.
        An answer that is not a list, or a continue token given twice in one list (a list
        that would never end, growing until memory runs out), is a temporary ClusterError:
        the caller lists again later.
        """
        items: list[dict[str, Any]] = []
        token, list_rv = "", 0
        given: set[str] = set()  # the continue tokens of this list so far
        while True:
            paged = [("limit", page_size), *query, *([("continue", token)] if token else [])]
            response = await self.request("GET", path, obj=obj, query=paged)
            if response.status == 410 and token:
                items.clear()
                token = ""
                given.clear()
                continue
            if not response.ok:
                raise response.error(obj)
            try:
                page = _list_decoder.decode(response.body)
                if not token:
                    list_rv = int(page.metadata.resourceVersion or 0)
            except (msgspec.DecodeError, ValueError) as err:
                raise ClusterError(
                    obj, "Invalid", f"the API server's list is not one: {err}", temporary=True
                ) from err
            items.extend(page.items or ())
            token = page.metadata.continue_
            if not token:
                return items, list_rv
            if token in given:
                raise ClusterError(
                    obj, "Invalid",
                    f"the API server gave continue token {token[:64]!r} twice in one list "
                    f"(after {len(items)} items): a list that never ends",
                    temporary=True,
                )  # fmt: skip
            given.add(token)

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, *, query: Sequence[tuple[str, Any]], obj: str, timeout_s: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A watch: yields an iterator over the stream's lines. An error answer raises its
        ClusterError before any line; a cut stream raises a temporary one while iterating."""
        limits = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self._timeout.total)
        with client_errors(obj):
            raw = await self._send(
                "GET", path, query=query, body=None, content_type=JSON, limits=limits
            )
        try:
            if not 200 <= raw.status < 300:
                with client_errors(obj):
                    data = await raw.read()
                raise status_error(obj, raw.status, data, retry_after_s=_retry_after(raw.headers))
            yield self._lines(raw.content, obj)
        finally:
            raw.close()  # a watch connection is not reused: it may be mid-stream


def impersonating(headers: Mapping[str, str], as_user: Identity) -> CIMultiDict[str]:
    """`headers` plus Kubernetes impersonation: Impersonate-User, and one Impersonate-Group
    line per group (a repeated header, which a dict cannot hold). The API server then judges
    the request as that user, provided muster's own account may `impersonate` them."""
    out = CIMultiDict(headers)
    out["Impersonate-User"] = as_user.user
    for group in as_user.groups:
        out.add("Impersonate-Group", group)
    return out


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
