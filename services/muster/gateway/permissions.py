"""Who may do what at the gateway: the caller, the permissions, the policy, and the decisions.

Pure: nothing here does I/O. The gateway's servicers ask an `Authorizer` (a policy file,
`permissions_file`, or the Kubernetes API server, `permissions_kube`) about the `Action`s this
module derives from a request: one per object of a Submit, one per namespace an event is in.

Permissions follow Armada's per-call ones (submit_any_jobs, cancel_any_jobs, watch_all_events,
create_queue), scoped to namespaces as Kueue's RBAC is. A rule grants permissions to users and
groups in namespaces ("team-a"), in one LocalQueue ("team-a/gpu") or everywhere ("*"):

| permission   | scope               | allows                                                     |
|--------------|---------------------|------------------------------------------------------------|
| submit       | namespace or LQ     | Jobs, Workloads (by their LocalQueue), Pods, pod groups     |
| cancel       | namespace or LQ     | stopping, resuming and deleting a workload (Gateway.Stop)  |
| watch        | namespace or LQ     | Events.Watch, LocalQueue status and pending workloads      |
| create_queue | namespace           | LocalQueues                                                |
| admin        | cluster             | cluster-scoped objects, choosing a cluster id, everything  |

`watch` in "*" also shows what is not in a namespace: ClusterQueue status, pending workloads
per ClusterQueue, cluster-scoped configuration events (Armada's watch_all_events).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from muster.contracts.v1 import events_pb2
from muster.gateway.submit import PlannedEvent

# Members are admins whatever the policy says, as system:masters is in Kubernetes. The legacy
# `--token` and the anonymous loopback caller are in it.
ADMIN_GROUP: Final = "muster:admins"
ALL_NAMESPACES: Final = "*"
CLUSTER_KIND: Final = "Cluster"  # the kind of the action "submit to another cluster id"


class Permission(enum.StrEnum):
    SUBMIT = "submit"
    CANCEL = "cancel"
    WATCH = "watch"
    CREATE_QUEUE = "create_queue"
    ADMIN = "admin"


NAMESPACED: Final = frozenset(Permission) - {Permission.ADMIN}


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller. `via` says how: certificate, token, kube-token, legacy-token,
    anonymous."""

    user: str
    groups: tuple[str, ...] = ()
    via: str = ""

    @property
    def is_admin(self) -> bool:
        return ADMIN_GROUP in self.groups

    def submitter(self) -> events_pb2.Submitter:
        """The identity put on the events this caller causes."""
        return events_pb2.Submitter(user=self.user, groups=list(self.groups))


class Action(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a caller wants to do. `namespace` is "" for cluster-scoped actions (admin) and
    "*" for every namespace; `local_queue` narrows a namespaced one to one LocalQueue.

    `kind` and `name` say on what (the object, or "Cluster" and a cluster id): the Kubernetes
    authorizer maps them to a resource, and denials name them.
    """

    permission: Permission
    namespace: str = ""
    local_queue: str = ""
    kind: str = ""
    name: str = ""
    resource_kind: str = ""  # what the object really is, when it differs from `kind` ("Job")

    def describe(self) -> str:
        """ "Pod/kube-system/evil", "ClusterQueue/team-a", "cluster east", "namespace ml"."""
        if self.kind == CLUSTER_KIND:
            return f"cluster {self.name}"
        if self.kind:
            return f"{self.kind}/{self.name}"
        if self.local_queue:
            return f"LocalQueue/{self.namespace}/{self.local_queue}"
        if self.namespace == ALL_NAMESPACES:
            return "every namespace"
        return f"namespace {self.namespace}"


class Authorizer(Protocol):
    """Whether `caller` may do `action`: a policy file, or the Kubernetes API server."""

    async def allowed(self, caller: Caller, action: Action) -> bool: ...


async def denials(authorizer: Authorizer, caller: Caller, actions: Iterable[Action]) -> list[str]:
    """One `denial` line per action `caller` may not do, in order; each distinct question is
    asked once (a manifest of 1 000 Jobs in one namespace asks one)."""
    answers: dict[tuple[Permission, str, str, str], bool] = {}
    lines = []
    for action in actions:
        key = (action.permission, action.namespace, action.local_queue, action.resource_kind)
        if action.permission is Permission.ADMIN:
            key = (action.permission, action.kind, action.name, action.resource_kind)
        if key not in answers:
            answers[key] = await authorizer.allowed(caller, action)
        if not answers[key]:
            lines.append(denial(caller, action))
    return lines


class PolicyError(ValueError):
    """The policy (or tokens) document is invalid; one line per problem, with the field path."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    permissions: frozenset[Permission] = frozenset()
    namespaces: tuple[str, ...] = ()  # "ns", "ns/local-queue" or "*"

    def applies_to(self, caller: Caller) -> bool:
        return caller.user in self.users or not self.groups.isdisjoint(caller.groups)

    def grants(self, action: Action) -> bool:
        if action.permission not in self.permissions:
            return False
        if action.permission is Permission.ADMIN:
            return True
        return any(_covers(scope, action) for scope in self.namespaces)


def _covers(scope: str, action: Action) -> bool:
    """Whether a rule's namespace entry covers the action's namespace (and LocalQueue)."""
    if scope == ALL_NAMESPACES:
        return True
    namespace, _, local_queue = scope.partition("/")
    if namespace != action.namespace:
        return False
    return not local_queue or local_queue == action.local_queue


class Policy(msgspec.Struct, frozen=True):
    """Rules granting permissions; nothing is allowed unless a rule (or admin) allows it."""

    rules: tuple[Rule, ...] = ()

    def allows(self, caller: Caller, action: Action) -> bool:
        if caller.is_admin:
            return True
        rules = [r for r in self.rules if r.applies_to(caller)]
        if any(Permission.ADMIN in r.permissions for r in rules):
            return True
        return any(r.grants(action) for r in rules)


def policy_from_document(doc: Any, *, source: str = "policy") -> Policy:
    """The Policy a policy file holds (YAML already parsed); PolicyError naming every problem.

    ```yaml
    rules:
    - groups: [team-a]              # and/or users: [alice]
      permissions: [submit, watch, create_queue]
      namespaces: [team-a, shared/gpu]
    - groups: [platform]
      permissions: [admin]
    ```
    """
    if doc is None:
        return Policy()
    if not isinstance(doc, Mapping):
        raise PolicyError([f"{source}: (document): must be a mapping with rules"])
    problems = [
        f"{source}: {key}: unknown field (known: rules)"
        for key in doc
        if key not in ("rules", "apiVersion", "kind")
    ]
    raw_rules = doc.get("rules") or []
    if not isinstance(raw_rules, list):
        raise PolicyError([*problems, f"{source}: rules: must be a list"])
    rules = []
    for i, raw in enumerate(raw_rules):
        rule, found = _rule(raw, f"{source}: rules[{i}]")
        problems += found
        if rule is not None:
            rules.append(rule)
    if problems:
        raise PolicyError(problems)
    return Policy(rules=tuple(rules))


_RULE_FIELDS: Final = ("users", "groups", "permissions", "namespaces")


def _rule(raw: Any, where: str) -> tuple[Rule | None, list[str]]:
    if not isinstance(raw, Mapping):
        return None, [f"{where}: must be a mapping"]
    problems = [
        f"{where}.{key}: unknown field (known: {', '.join(_RULE_FIELDS)})"
        for key in raw
        if key not in _RULE_FIELDS
    ]
    fields: dict[str, list[str]] = {}
    for name in _RULE_FIELDS:
        value = raw.get(name) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            problems.append(f"{where}.{name}: must be a list of non-empty strings")
            value = []
        fields[name] = value
    if not fields["users"] and not fields["groups"]:
        problems.append(f"{where}: needs users or groups")
    permissions = set()
    for j, name in enumerate(fields["permissions"]):
        if name in Permission.__members__.values():
            permissions.add(Permission(name))
        else:
            known = ", ".join(Permission)
            problems.append(f'{where}.permissions[{j}]: unknown permission "{name}" ({known})')
    if not permissions and not problems:
        problems.append(f"{where}.permissions: is required")
    for j, scope in enumerate(fields["namespaces"]):
        problems += [f"{where}.namespaces[{j}]: {p}" for p in _scope_problems(scope)]
    if permissions & NAMESPACED and not fields["namespaces"]:
        problems.append(f"{where}.namespaces: is required for {', '.join(sorted(permissions))}")
    rule = Rule(
        users=frozenset(fields["users"]),
        groups=frozenset(fields["groups"]),
        permissions=frozenset(permissions),
        namespaces=tuple(fields["namespaces"]),
    )
    return rule, problems


def _scope_problems(scope: str) -> list[str]:
    if scope == ALL_NAMESPACES:
        return []
    parts = scope.split("/")
    if len(parts) > 2 or not all(parts):
        return [f'must be "<namespace>", "<namespace>/<local-queue>" or "*", got "{scope}"']
    return []


# --- the actions of a request ---------------------------------------------------------------


def submit_actions(
    planned: Iterable[PlannedEvent], *, cluster: str, default_cluster: str
) -> list[Action]:
    """What submitting `planned` to `cluster` needs: one action per object, in order, and
    admin when the request chooses a cluster id other than the gateway's."""
    actions = []
    if cluster != default_cluster:
        actions.append(Action(permission=Permission.ADMIN, kind=CLUSTER_KIND, name=cluster))
    actions += [_object_action(p) for p in planned]
    return actions


def _object_action(p: PlannedEvent) -> Action:
    if "/" not in p.key:  # cluster-scoped: ClusterQueue, ResourceFlavor, Node, Namespace, ...
        return Action(permission=Permission.ADMIN, kind=p.kind, name=p.key)
    namespace = p.key.split("/", 1)[0]
    if p.kind == "LocalQueue":
        permission = Permission.CREATE_QUEUE
        return Action(permission=permission, namespace=namespace, kind=p.kind, name=p.key)
    local_queue, resource_kind = "", p.kind
    if isinstance(p.payload, events_pb2.WorkloadSubmitted):
        local_queue = p.payload.queue_name or "default"
        if p.payload.owner.kind == "Job":
            resource_kind = "Job"
    return Action(
        permission=Permission.SUBMIT,
        namespace=namespace,
        local_queue=local_queue,
        kind=p.kind,
        name=p.key,
        resource_kind=resource_kind,
    )


def event_action(env: events_pb2.Envelope) -> Action:
    """What seeing `env` in a Watch needs: watch in its workload's (or LocalQueue's) namespace,
    or in every namespace for what is not in one (ClusterQueue status, cluster-scoped config)."""
    if env.workload:
        return Action(permission=Permission.WATCH, namespace=env.workload.split("/", 1)[0])
    name = ""
    if env.HasField("config_applied"):
        name = env.config_applied.name
    elif env.HasField("config_deleted"):
        name = env.config_deleted.name
    if "/" in name:
        return Action(permission=Permission.WATCH, namespace=name.split("/", 1)[0])
    return Action(permission=Permission.WATCH, namespace=ALL_NAMESPACES)


def watch_action(namespace: str, local_queue: str = "") -> Action:
    """Reading what is in `namespace` (one LocalQueue of it, when given); "*": everything."""
    return Action(permission=Permission.WATCH, namespace=namespace, local_queue=local_queue)


def denial(caller: Caller, action: Action) -> str:
    """The user-facing line of one denied action: the object, the permission, the namespace."""
    who = f'user "{caller.user}"'
    if action.permission is Permission.ADMIN:
        what = (
            "choosing a cluster id is"
            if action.kind == CLUSTER_KIND
            else "cluster-scoped objects are"
        )
        return f"{action.describe()}: permission admin denied to {who}: {what} for admins"
    if action.namespace == ALL_NAMESPACES:
        where = "every namespace"
    else:
        where = f"namespace {action.namespace}"
    if action.local_queue:
        where += f" (LocalQueue {action.local_queue})"
    return f"{action.describe()}: permission {action.permission} denied to {who} in {where}"
