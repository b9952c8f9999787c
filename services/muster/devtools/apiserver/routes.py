"""URL → verb → `Api` call: the REST layout of /api/v1 and /apis/<group>/<version>, discovery,
health and version endpoints. `dispatch` answers a `Reply` or opens a `WatchStream`."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from muster.devtools.apiserver.binding import bind
from muster.devtools.apiserver.deletion import Api, delete_options
from muster.devtools.apiserver.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    resource_not_served,
)
from muster.devtools.apiserver.http import HttpRequest
from muster.devtools.apiserver.objects import JsonObj, decode
from muster.devtools.apiserver.openapi import OPENAPI_V2_PROTOBUF, v3_group_version, v3_root
from muster.devtools.apiserver.resources import Registry, ResourceType, stamp_version
from muster.devtools.apiserver.selectors import selectors
from muster.devtools.apiserver.tables import as_table, table_version
from muster.devtools.apiserver.verbs import ListQuery
from muster.devtools.apiserver.watch import WatchQuery, WatchStream, open_watch

SERVER_VERSION: JsonObj = {
    "major": "1",
    "minor": "35",
    "gitVersion": "v1.35.0-muster-standin",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


class Reply(msgspec.Struct, frozen=True):
    code: int
    body: JsonObj | bytes
    content_type: str = "application/json"


class Route(msgspec.Struct, frozen=True, kw_only=True):
    """A resource request: which resource, where, and which verb."""

    rt: ResourceType
    version: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    verb: str = ""


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


def resolve(request: HttpRequest, api: Api) -> Route | Reply:
    """The route of a resource request, or the answer of a non-resource one."""
    parts = [p for p in request.path.split("/") if p]
    registry = api.registry
    if request.method == "GET":
        simple = _non_resource(parts, api, request)
        if simple is not None:
            return simple
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise resource_not_served(request.path)
    namespace = ""
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (group == "" and rest[2] in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise resource_not_served(request.path)
    rt = registry.lookup(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if (
        rt is None
        or (namespace and not rt.namespaced)
        or (rt.namespaced and name and not namespace)
        or (subresource and subresource not in rt.subresources())
    ):
        raise resource_not_served(request.path)
    return Route(
        rt=rt,
        version=version,
        namespace=namespace,
        name=name,
        subresource=subresource,
        verb=_verb(request, name, subresource),
    )


def _non_resource(parts: list[str], api: Api, request: HttpRequest) -> Reply | None:
    registry = api.registry
    doc: JsonObj | None = None
    if parts in (["healthz"], ["livez"], ["readyz"]):
        return Reply(200, b"ok", "text/plain; charset=utf-8")
    if parts == ["version"]:
        doc = SERVER_VERSION
    elif parts == ["api"]:
        doc = registry.api_versions(request.headers.get("host", "127.0.0.1"))
    elif parts == ["apis"]:
        doc = registry.api_group_list()
    elif len(parts) == 2 and parts[0] == "apis":
        doc = registry.api_group(parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        doc = registry.resource_list(parts[1], parts[2])
    elif parts == ["api", "v1"]:
        doc = registry.resource_list("", "v1")
    elif parts[:1] == ["openapi"]:
        return _openapi(parts[1:], registry, request)
    else:
        return None
    if doc is None:
        raise resource_not_served(request.path)
    return Reply(200, doc)


def _openapi(parts: list[str], registry: Registry, request: HttpRequest) -> Reply:
    """/openapi/v2 (protobuf as kubectl asks, else JSON: no definitions either way),
    /openapi/v3 and its group versions (`openapi`)."""
    doc: JsonObj | None = None
    if parts == ["v2"]:
        if "protobuf" in request.headers.get("accept", ""):
            return Reply(200, b"", OPENAPI_V2_PROTOBUF)  # an empty Document
        doc = {"swagger": "2.0", "info": {"title": "Kubernetes"}, "paths": {}}
    elif parts == ["v3"]:
        doc = v3_root(registry)
    elif parts[:1] == ["v3"] and parts[1:3] == ["api", "v1"] and len(parts) == 3:
        doc = v3_group_version(registry, "", "v1")
    elif parts[:1] == ["v3"] and parts[1:2] == ["apis"] and len(parts) == 4:
        doc = v3_group_version(registry, parts[2], parts[3])
    if doc is None:
        raise resource_not_served(request.path)
    return Reply(200, doc)


def _verb(request: HttpRequest, name: str, subresource: str) -> str:
    method = request.method
    if method == "GET":
        return "get" if name else ("watch" if _flag(request.query, "watch") else "list")
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return method.lower()


def request_body(request: HttpRequest) -> object:
    if not request.body:
        return None
    try:
        return decode(request.body)
    except msgspec.DecodeError as err:
        raise bad_request(f"the request body is not JSON: {err}") from err


def _int(query: dict[str, str], name: str) -> int:
    text = query.get(name, "")
    try:
        return int(text) if text else 0
    except ValueError as err:
        raise bad_request(f"{name} must be an integer, got {text!r}") from err


def _list_query(route: Route, query: dict[str, str]) -> ListQuery:
    labels, fields = selectors(
        query.get("labelSelector"), query.get("fieldSelector"), route.rt.selectable_fields()
    )
    return ListQuery(
        labels=labels,
        fields=fields,
        limit=_int(query, "limit"),
        continue_token=query.get("continue", ""),
        resource_version=query.get("resourceVersion"),
        resource_version_match=query.get("resourceVersionMatch") or None,
    )


def _watch_query(route: Route, query: dict[str, str]) -> WatchQuery:
    labels, fields = selectors(
        query.get("labelSelector"), query.get("fieldSelector"), route.rt.selectable_fields()
    )
    timeout = query.get("timeoutSeconds")
    return WatchQuery(
        labels=labels,
        fields=fields,
        resource_version=query.get("resourceVersion"),
        resource_version_match=query.get("resourceVersionMatch") or None,
        allow_bookmarks=_flag(query, "allowWatchBookmarks"),
        send_initial_events=_flag(query, "sendInitialEvents"),
        timeout_s=float(_int(query, "timeoutSeconds")) if timeout else None,
    )


def dispatch(
    route: Route, request: HttpRequest, api: Api, *, max_pending: int
) -> Reply | WatchStream:
    """Run the verb; ApiError propagates to become a Status answer."""
    rt, version, ns, name, sub = (
        route.rt,
        route.version,
        route.namespace,
        route.name,
        route.subresource,
    )
    query = request.query
    dry_run = query.get("dryRun") == "All"
    field_validation = query.get("fieldValidation") or ""

    def served(obj: JsonObj) -> JsonObj:
        return stamp_version(obj, rt, version)

    handlers: dict[str, Callable[[], Reply | WatchStream]] = {
        "get": lambda: Reply(200, served(api.get(rt, ns, name))),
        "list": lambda: Reply(200, api.list_objects(rt, version, ns, _list_query(route, query))),
        "watch": lambda: open_watch(
            api.store, rt, version, ns, _watch_query(route, query), max_pending=max_pending
        ),
        "update": lambda: Reply(
            200,
            served(
                api.update(
                    rt,
                    version,
                    ns,
                    name,
                    request_body(request),
                    subresource=sub,
                    dry_run=dry_run,
                    field_validation=field_validation,
                )
            ),
        ),
        "patch": lambda: Reply(
            200,
            served(
                api.patch(
                    rt,
                    version,
                    ns,
                    name,
                    request.content_type,
                    request_body(request),
                    subresource=sub,
                    dry_run=dry_run,
                    field_validation=field_validation,
                )
            ),
        ),
        "deletecollection": lambda: Reply(
            200,
            api.delete_collection(
                rt,
                version,
                ns,
                _list_query(route, query),
                delete_options(request_body(request), query),
            ),
        ),
    }
    if route.verb == "create":
        if sub == "binding":
            return Reply(201, bind(api, ns, name, request_body(request)))
        if name or (rt.namespaced and not ns):
            raise method_not_allowed()
        return Reply(
            201,
            served(
                api.create(
                    rt,
                    version,
                    ns,
                    request_body(request),
                    dry_run=dry_run,
                    field_validation=field_validation,
                )
            ),
        )
    if route.verb == "delete":
        if sub:
            raise method_not_allowed()
        code, obj = api.delete(rt, version, ns, name, delete_options(request_body(request), query))
        return Reply(code, obj)
    if (
        sub == "binding"
        or route.verb not in handlers
        or (sub and route.verb not in ("get", "update", "patch"))
    ):
        raise method_not_allowed()
    reply = handlers[route.verb]()
    table = table_version(request.headers.get("accept", ""))
    if table and isinstance(reply, WatchStream):
        reply.render = _table_events(route, api, table, query)
    elif table and route.verb in ("get", "list") and isinstance(reply, Reply):
        return Reply(reply.code, _table(route, reply.body, api, table, query))
    return reply


def _table_events(
    route: Route, api: Api, table: str, query: dict[str, str]
) -> Callable[[JsonObj], JsonObj]:
    """Each watch event's object as a Table of one row; only the first carries the columns,
    as a real server sends them (kubectl prints the header once)."""
    sent = False

    def render(obj: JsonObj) -> JsonObj:
        nonlocal sent
        found = _table(route, obj, api, table, query)
        if sent:
            found["columnDefinitions"] = []
        sent = True
        return found

    return render


def _table(
    route: Route, body: JsonObj | bytes, api: Api, table: str, query: dict[str, str]
) -> JsonObj:
    """A get's or a list's answer as the Table `kubectl get` asks for (`tables`)."""
    assert isinstance(body, dict)  # the handlers of get and list answer JSON objects
    include = query.get("includeObject") or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request(f"includeObject: must be None, Metadata or Object, got {include!r}")
    rt = route.rt
    crd: JsonObj | None = None
    crds = api.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    if rt.custom and crds is not None:
        crd = api.store.get(crds, ("", f"{rt.plural}.{rt.group}"))
    return as_table(
        rt,
        body,
        table=table,
        now_s=api.clock(),
        include=include,
        crd=crd,
        version=route.version,
    )


def error_reply(error: ApiError) -> Reply:
    return Reply(error.code, error.status())
