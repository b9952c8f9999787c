"""Access control on the stand-in for the security tests: a token per account, the grants of
muster's own ClusterRoles read from k8s/rbac (so the tests prove those roles suffice), and
namespaced grants for two teams, as an operator's RBAC would give them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc.aio
import yaml

from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.devtools.apiserver.access import Access, Grant, User

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "k8s" / "rbac"
TEAM_RESOURCES = frozenset(
    {"pods", "jobs.batch", "workloads.kueue.x-k8s.io", "workloads.scheduling.k8s.io"}
)
# account → (token, user)
ACCOUNTS = {
    "admin": ("admin-token", User("kubernetes-admin", ("system:masters",))),
    "watcher": ("watcher-token", User("system:serviceaccount:muster:muster-watcher")),
    "gangpermit": ("gangpermit-token", User("system:serviceaccount:muster:muster-gangpermit")),
    "binder": ("binder-token", User("system:serviceaccount:muster:muster-binder")),
    "gateway": ("gateway-token", User("system:serviceaccount:muster:muster-gateway")),
    "alice": ("alice-token", User("alice", ("team-a",))),
    "bob": ("bob-token", User("bob", ("team-b",))),
}


def token(account: str) -> str:
    return ACCOUNTS[account][0]


def role_grants(service: str) -> list[Grant]:
    """The rules of k8s/rbac/<service>.yaml's ClusterRole, granted to its ServiceAccount."""
    user = ACCOUNTS[service][1].name
    docs = [d for d in yaml.safe_load_all((RBAC / f"{service}.yaml").read_text()) if d]
    grants = []
    for doc in docs:
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            resources = frozenset(
                _resource(g, r) for g in rule["apiGroups"] for r in rule["resources"]
            )
            grants.append(
                Grant(users=frozenset({user}), verbs=frozenset(rule["verbs"]), resources=resources)
            )
    return grants


def _resource(group: str, resource: str) -> str:
    plural, _, sub = resource.partition("/")
    name = f"{plural}.{group}" if group else plural
    return f"{name}/{sub}" if sub else name


def team_grant(group: str, namespace: str, *, verbs: tuple[str, ...] = ("*",)) -> Grant:
    """What a namespace's team may do there: its workloads and their pods, and read them."""
    return Grant(
        groups=frozenset({group}),
        verbs=frozenset(verbs),
        resources=TEAM_RESOURCES,
        namespaces=frozenset({namespace}),
    )


def cluster_access() -> Access:
    """Tokens of every account; the admin may do anything, the watcher and gang-permit what
    they read and write (broadly: not what these tests are about), the binder and the
    gateway exactly their ClusterRoles, and each team its own namespace."""
    anything = frozenset({"*"})
    return Access(
        tokens={t: user for t, user in ACCOUNTS.values()},
        grants=[
            Grant(groups=frozenset({"system:masters"}), verbs=anything, resources=anything),
            Grant(
                users=frozenset({ACCOUNTS["watcher"][1].name, ACCOUNTS["gangpermit"][1].name}),
                verbs=anything,
                resources=anything,
            ),
            *role_grants("binder"),
            *role_grants("gateway"),
            team_grant("team-a", "team-a"),
            team_grant("team-b", "team-b"),
        ],
    )


def kubeconfig(directory: Path, url: str, account: str) -> Path:
    """A kubeconfig for `url` with `account`'s bearer token, as a service is given one."""
    path = directory / f"{account}.kubeconfig"
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "standin", "cluster": {"server": url}}],
        "users": [{"name": account, "user": {"token": token(account)}}],
        "contexts": [{"name": account, "context": {"cluster": "standin", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def own_credentials(directory: Path) -> dict[str, list[str]]:
    """Each per-cluster service's own token, as its ServiceAccount gives it (the kubeconfig's
    server is overridden by the stack's --kube-host)."""
    return {
        service: ["--kubeconfig", str(kubeconfig(directory, "http://127.0.0.1:1", service))]
        for service in ("watcher", "gangpermit", "binder")
    }


def bearer(account: str) -> tuple[tuple[str, str], ...]:
    secret = token(account) if account != "nobody" else "a-token-nobody-issued"
    return (("authorization", f"Bearer {secret}"),)


async def submit(channel: grpc.aio.Channel, text: str, account: str) -> tuple[str, str]:
    stub = services_pb2_grpc.GatewayStub(channel)
    try:
        await stub.Submit(services_pb2.SubmitRequest(manifest=text), metadata=bearer(account))
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", ""
