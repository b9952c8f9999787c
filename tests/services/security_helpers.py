"""A gateway with identities and permissions for tests: users with bearer tokens (a tokens
file), a policy file, and manifests of each kind a Submit can carry."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gateway_helpers import RunningGateway, running_gateway

from muster.bus import Bus
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.auth_tokens import token_hash

# user → groups
USERS: dict[str, tuple[str, ...]] = {
    "alice": ("team-a",),
    "bob": ("team-b",),
    "carol": (),
    "viewer": (),
    "root": ("platform",),
}
POLICY = textwrap.dedent(
    """\
    rules:
    - groups: [team-a]
      permissions: [submit, watch, create_queue]
      namespaces: [team-a]
    - users: [carol]
      permissions: [submit, watch]
      namespaces: [team-b/gpu]
    - users: [viewer]
      permissions: [watch]
      namespaces: ["*"]
    - groups: [platform]
      permissions: [admin]
    """
)


def token_of(user: str) -> str:
    return f"{user}-token-7c1e0d5b9a"


def as_user(user: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `user`'s bearer token."""
    return (("authorization", f"Bearer {token_of(user)}"),)


def tokens_yaml(users: dict[str, tuple[str, ...]]) -> str:
    lines = ["tokens:"]
    for user, groups in users.items():
        lines.append(f"- sha256: {token_hash(token_of(user))}")
        lines.append(f"  user: {user}")
        lines.append(f"  groups: [{', '.join(groups)}]")
    return "\n".join(lines) + "\n"


def write_security_files(directory: Path) -> tuple[Path, Path]:
    """The tokens file (every user of USERS) and the policy file (POLICY), written there."""
    tokens, policy = directory / "tokens.yaml", directory / "policy.yaml"
    tokens.write_text(tokens_yaml(USERS))
    policy.write_text(POLICY)
    return tokens, policy


@contextlib.asynccontextmanager
async def secured_gateway(
    bus: Bus, directory: Path, **config: Any
) -> AsyncIterator[RunningGateway]:
    """A gateway authenticating USERS by token and authorizing them with POLICY."""
    tokens, policy = write_security_files(directory)
    security = SecurityConfig(tokens_file=str(tokens), policy_file=str(policy))
    async with running_gateway(bus, security=security, **config) as gw:
        yield gw


# --- one manifest per kind a Submit carries ----------------------------------------------------

_CONTAINER = "containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]"


def manifest(kind: str, namespace: str, name: str = "x") -> str:
    """A small valid object of `kind` ("Job", "Workload:<queue>", "Pod", "LocalQueue",
    "ClusterQueue", "ResourceFlavor", "Node") in `namespace` (ignored when cluster-scoped)."""
    kind, _, queue = kind.partition(":")
    meta = f"metadata: {{name: {name}, namespace: {namespace}}}"
    if kind == "Job":
        return textwrap.dedent(
            f"""\
            apiVersion: batch/v1
            kind: Job
            metadata:
              name: {name}
              namespace: {namespace}
              labels: {{kueue.x-k8s.io/queue-name: {queue or "cpu"}}}
            spec:
              template: {{spec: {{{_CONTAINER}}}}}
            """
        )
    if kind == "Workload":
        return textwrap.dedent(
            f"""\
            apiVersion: kueue.x-k8s.io/v1beta1
            kind: Workload
            {meta}
            spec:
              queueName: {queue or "cpu"}
              podSets: [{{name: main, count: 1, template: {{spec: {{{_CONTAINER}}}}}}}]
            """
        )
    if kind == "Pod":
        return textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Pod
            {meta}
            spec:
              schedulerName: muster
              containers:
              - name: c
                image: busybox
                securityContext: {{privileged: true}}
                volumeMounts: [{{name: root, mountPath: /host}}]
              volumes: [{{name: root, hostPath: {{path: /}}}}]
            """
        )
    if kind == "LocalQueue":
        return f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n{meta}\n" + (
            "spec: {clusterQueue: shared}\n"
        )
    if kind in ("ClusterQueue", "ResourceFlavor"):
        spec = "spec: {}\n" if kind == "ClusterQueue" else ""
        return (
            f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: {kind}\nmetadata: {{name: {name}}}\n{spec}"
        )
    if kind == "Node":
        return textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Node
            metadata: {{name: {name}}}
            status: {{allocatable: {{cpu: "4", memory: 8Gi, pods: "10"}}}}
            """
        )
    raise AssertionError(f"no manifest for {kind}")
