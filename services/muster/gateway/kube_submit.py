"""Gateway.Submit on Kubernetes (`--cluster-backend kube`): what a Submit carries is written into
the API server as the caller, never published as NATS-only workloads.

Each object is written with the caller's identity (Kubernetes impersonation, as the binder
writes `cmd.apply`), so RBAC, Pod Security Admission, quotas and webhooks judge the caller and
the watcher picks the object up exactly as if kubectl had created it. Jobs, JobSets, Kueue
Workloads, Pods and gangs are created (one that exists is left as it is, with a warning);
configuration (queues, flavors, cohorts, ...) is created or replaced, as `kubectl apply`
would. Writes ask for the Submit's field validation (`fieldValidation=Strict` by default), so
the API server refuses an unknown field in its own words too.

A `generateName` is named by the gateway from the Submit's idempotency key (`plan_submit`),
so a retried Submit finds what the first attempt created instead of creating it twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from muster.api import Validation
from muster.cluster.backend import Identity
from muster.cluster.errors import ClusterError, NotFoundError
from muster.gateway.permissions import Caller
from muster.gateway.submit import PlannedEvent

if TYPE_CHECKING:  # the Kubernetes client is loaded on Kubernetes only
    from muster.cluster.kube.backend import KubeBackend

# Kubernetes' group that no authorizer can refuse: never written as, whoever asks.
CLUSTER_ADMINS: Final = "system:masters"
_FIELD_VALIDATION: Final[dict[str, str]] = {"strict": "Strict", "warn": "Warn", "ignore": "Ignore"}
# Written with create: an existing one is not replaced (a Pod's spec is immutable, a Job's
# template too, and a Submit retried must not undo what ran: a JobSet replaced as written
# would be suspended again).
_CREATED_KINDS: Final = frozenset({"Job", "JobSet", "Workload", "Pod"})

Outcome = Literal["created", "applied", "exists"]
RefusalCode = Literal["PERMISSION_DENIED", "INVALID_ARGUMENT", "UNAVAILABLE", "NOT_FOUND"]


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """One object of a Submit as the API server now holds it."""

    kind: str
    key: str  # "<namespace>/<name>" or "<name>"
    outcome: Outcome


class SubmitRefusedError(Exception):
    """The API server refused an object (`code`: the gRPC status to answer); str() names the
    object and says what was written before it."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def refusal_code(err: ClusterError, *, not_found: RefusalCode = "INVALID_ARGUMENT") -> RefusalCode:
    """The gRPC status for the API server's refusal `err` (`not_found` for a 404)."""
    if err.temporary:
        return "UNAVAILABLE"
    if err.reason == "Forbidden":
        return "PERMISSION_DENIED"
    return not_found if isinstance(err, NotFoundError) else "INVALID_ARGUMENT"


def identity_of(caller: Caller) -> Identity:
    """Whom the writes are made as; SubmitRefusedError for a cluster admin (muster never
    writes with cluster-admin rights, as the binder refuses them too)."""
    if CLUSTER_ADMINS in caller.groups:
        raise SubmitRefusedError(
            "PERMISSION_DENIED",
            f'user "{caller.user}" is in {CLUSTER_ADMINS}: muster never writes into the cluster '
            "with cluster-admin rights; submit as a user with only the rights the objects need",
        )
    return Identity(user=caller.user, groups=caller.groups)


async def write_objects(
    backend: KubeBackend,
    planned: Sequence[PlannedEvent],
    *,
    caller: Caller,
    validation: Validation,
) -> list[Written]:
    """Write every planned object, in order, as `caller`; what each became.

    Stops at the first refusal (SubmitRefusedError: PERMISSION_DENIED for 403, UNAVAILABLE
    for a temporary failure, INVALID_ARGUMENT otherwise); the objects before it stay written,
    as with `kubectl apply -f`, and the message names them.
    """
    as_user = identity_of(caller)
    field_validation = _FIELD_VALIDATION[validation]
    written: list[Written] = []
    for p in planned:
        kind = str(p.document.get("kind", p.kind))
        try:
            if kind in _CREATED_KINDS:
                created = await backend.create(
                    p.document, as_user=as_user, field_validation=field_validation
                )
                outcome: Outcome = "created" if created or _generated(p) else "exists"
            else:
                await backend.apply(p.document, as_user=as_user, field_validation=field_validation)
                outcome = "applied"
        except ClusterError as err:
            raise _refused(err, written, p.document) from err
        written.append(Written(kind=kind, key=_key(p), outcome=outcome))
    return written


def _generated(p: PlannedEvent) -> bool:
    """Whether the object's name was made from its `generateName` (by this Submit's key: one
    that exists is what an earlier attempt of the same Submit created)."""
    meta = p.document.get("metadata") or {}
    return bool(meta.get("generateName"))


def _key(p: PlannedEvent) -> str:
    meta = p.document.get("metadata") or {}
    name = str(meta.get("name", ""))
    if "/" not in p.key:  # cluster-scoped
        return name
    return f"{meta.get('namespace') or 'default'}/{name}"


def _refused(
    err: ClusterError, written: Sequence[Written], document: Mapping[str, Any]
) -> SubmitRefusedError:
    before = (
        f" (written before it: {', '.join(f'{w.kind}/{w.key}' for w in written)})"
        if written
        else " (nothing was written)"
    )
    code = refusal_code(err)
    retry = "; retry the Submit" if code == "UNAVAILABLE" else ""
    what = str(err)
    if isinstance(err, NotFoundError):  # a write's 404: no such API here, or no namespace
        namespace = (document.get("metadata") or {}).get("namespace")
        where = f", or namespace {namespace} does not exist" if namespace else ""
        what = (
            f"{err.obj}: not found: the API server serves no {document.get('kind')} in"
            f" {document.get('apiVersion')}{where}"
        )
    return SubmitRefusedError(code, f"{what}{before}{retry}")
