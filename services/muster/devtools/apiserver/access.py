"""Who may do what on the stand-in, when a test asks for it (`ApiServer(access=Access(...))`):
bearer-token authentication, impersonation (Impersonate-User / Impersonate-Group), an
RBAC-like authorizer, and the TokenReview and SubjectAccessReview APIs built on them.

Without `access` every request is allowed, as before. With it, as on a real API server:
- a request without a known bearer token gets 401 (health and version stay open);
- impersonating needs `impersonate` on `users` (and on `groups` for each group) in API group
  "", else 403; the request is then judged as the impersonated user, who is also in
  `system:authenticated`;
- each resource request needs a grant for its verb, resource (`pods`, `jobs.batch`,
  `pods/binding`, `workloads.kueue.x-k8s.io`, or `*`) and namespace, else 403 with the API
  server's message ("pods is forbidden: User "bob" cannot create resource "pods" in API group
  "" in the namespace "kube-system"").

A `Grant` with no namespaces is a ClusterRoleBinding (everywhere, cluster-scoped objects too);
with namespaces, RoleBindings in each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from muster.devtools.apiserver.errors import ApiError, bad_request
from muster.devtools.apiserver.http import HttpRequest
from muster.devtools.apiserver.objects import JsonObj

AUTHENTICATED: Final = "system:authenticated"
TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
OPEN_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz", "/version"})


class User(msgspec.Struct, frozen=True):
    name: str
    groups: tuple[str, ...] = ()


class Attributes(msgspec.Struct, frozen=True, kw_only=True):
    """What a request (or a SubjectAccessReview) asks to do, in RBAC's terms."""

    verb: str
    group: str = ""
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """Verbs on resources granted to users and groups, in namespaces (none: everywhere)."""

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    verbs: frozenset[str]
    resources: frozenset[str]  # "<plural>[.<group>][/<subresource>]" or "*"
    namespaces: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()  # resourceNames; empty: any

    def allows(self, user: User, verb: str, resource: str, namespace: str, name: str) -> bool:
        if user.name not in self.users and self.groups.isdisjoint(user.groups):
            return False
        if not ({verb, "*"} & self.verbs and {resource, "*"} & self.resources):
            return False
        if self.names and name not in self.names:
            return False
        return not self.namespaces or namespace in self.namespaces


def resource_name(group: str, resource: str, subresource: str = "") -> str:
    """RBAC's way of writing a resource: "pods", "jobs.batch", "pods/binding"."""
    name = f"{resource}.{group}" if group else resource
    return f"{name}/{subresource}" if subresource else name


class Access:
    """Tokens (token → user) and grants; see the module doc."""

    def __init__(self, *, tokens: Mapping[str, User], grants: Iterable[Grant]) -> None:
        self.tokens = dict(tokens)
        self.grants = tuple(grants)

    def user_of(self, token: str) -> User | None:
        user = self.tokens.get(token)
        if user is None:
            return None
        return User(user.name, (*user.groups, AUTHENTICATED))

    def allows(self, user: User, asked: Attributes) -> bool:
        wanted = resource_name(asked.group, asked.resource, asked.subresource)
        return any(
            g.allows(user, asked.verb, wanted, asked.namespace, asked.name) for g in self.grants
        )

    def check(self, user: User, asked: Attributes) -> None:
        """Raise the API server's 403 unless `user` may."""
        if self.allows(user, asked):
            return
        what = f"{asked.resource}/{asked.subresource}" if asked.subresource else asked.resource
        subject = f'{what} "{asked.name}"' if asked.name else what
        where = (
            f'in the namespace "{asked.namespace}"' if asked.namespace else "at the cluster scope"
        )
        message = (
            f'{subject} is forbidden: User "{user.name}" cannot {asked.verb} resource "{what}" '
            f'in API group "{asked.group}" {where}'
        )
        raise ApiError(
            403, "Forbidden", message, details={"kind": asked.resource, "name": asked.name}
        )

    def requester(self, request: HttpRequest) -> User:
        """Who the request is judged as: its token's user, or whom it impersonates."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        user = self.user_of(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        as_user = request.header_values("impersonate-user")
        as_groups = request.header_values("impersonate-group")
        if not as_user:
            if as_groups:
                raise bad_request("requested Impersonate-Group without Impersonate-User")
            return user
        self.check(user, Attributes(verb="impersonate", resource="users", name=as_user[0]))
        for g in as_groups:
            self.check(user, Attributes(verb="impersonate", resource="groups", name=g))
        return User(as_user[0], (*as_groups, AUTHENTICATED))

    # --- the review APIs ----------------------------------------------------------------------

    def token_review(self, requester: User, body: Any) -> JsonObj:
        asked = Attributes(verb="create", group="authentication.k8s.io", resource="tokenreviews")
        self.check(requester, asked)
        token = str(((body or {}).get("spec") or {}).get("token") or "")
        user = self.user_of(token)
        status: JsonObj = {"authenticated": user is not None}
        if user is not None:
            status["user"] = {"username": user.name, "groups": list(user.groups)}
        return _review("authentication.k8s.io/v1", "TokenReview", body, status)

    def access_review(self, requester: User, body: Any) -> JsonObj:
        asked = Attributes(
            verb="create", group="authorization.k8s.io", resource="subjectaccessreviews"
        )
        self.check(requester, asked)
        spec = (body or {}).get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        subject = User(str(spec.get("user") or ""), tuple(spec.get("groups") or ()))
        fields = ("verb", "group", "resource", "subresource", "namespace", "name")
        allowed = self.allows(subject, Attributes(**{f: str(attrs.get(f) or "") for f in fields}))
        status: JsonObj = {"allowed": allowed}
        if not allowed:
            status["reason"] = "no grant of the stand-in's access policy allows it"
        return _review("authorization.k8s.io/v1", "SubjectAccessReview", body, status)


def _review(api_version: str, kind: str, body: Any, status: JsonObj) -> JsonObj:
    spec = (body or {}).get("spec") or {}
    return {"apiVersion": api_version, "kind": kind, "metadata": {}, "spec": spec, "status": status}
