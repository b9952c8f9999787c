"""Never a confused deputy, on the kube path: the gateway asks the API server who a caller is
and what they may do (TokenReview, SubjectAccessReview), and what it lets through is written by
the binder as the caller (impersonation), so the cluster's RBAC has the last word.

The case from issue 12: a Pod with `privileged: true` and a `hostPath: /` volume submitted
into kube-system by a team's user."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from kube_access_helpers import (
    bearer,
    cluster_access,
    kubeconfig,
    own_credentials,
    submit,
    token,
)
from kube_services_helpers import eventually, running_stack

from muster.bus import DLQ_STREAM, Bus, BusConfig, connect
from muster.cluster.kube.settings import KubeConfig
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.devtools.apiserver import ApiServer
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.auth_tokens import token_hash
from muster.gateway.config import GatewayConfig
from muster.gateway.service import GatewayServer
from muster.launcher.nats_server import NatsServer

pytestmark = pytest.mark.timeout(120)

EVIL = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Pod
    metadata: {name: evil, namespace: kube-system}
    spec:
      schedulerName: muster
      containers:
      - name: c
        image: busybox
        securityContext: {privileged: true}
        volumeMounts: [{name: root, mountPath: /host}]
      volumes: [{name: root, hostPath: {path: /}}]
    """
)
JOB = textwrap.dedent(
    """\
    apiVersion: batch/v1
    kind: Job
    metadata: {name: train, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: main}}
    spec: {template: {spec: {containers: [{name: c, image: busybox}]}}}
    """
)
NAMESPACES = "".join(
    f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}}}\n" for n in ("team-a", "team-b")
)


@contextlib.asynccontextmanager
async def gateway_on(bus: Bus, security: SecurityConfig) -> AsyncIterator[grpc.aio.Channel]:
    server = GatewayServer(bus, GatewayConfig(listen="127.0.0.1:0", security=security, grace_s=1))
    address = await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            yield channel
    finally:
        await server.stop()


async def test_the_gateway_authenticates_and_authorizes_with_the_api_server(
    tmp_path: Path,
) -> None:
    nats = NatsServer(tmp_path / "nats")
    url = await nats.start(log_path=tmp_path / "nats.log")
    bus = await connect(BusConfig(url=url, name="muster-test", connect_timeout_s=5.0))
    try:
        await bus.ensure_streams()
        async with ApiServer(access=cluster_access()) as server:
            config = KubeConfig(kubeconfig=str(kubeconfig(tmp_path, server.url, "gateway")))
            security = SecurityConfig(authentication="kube", authorization="kube", kube=config)
            async with gateway_on(bus, security) as channel:
                job = await submit(channel, JOB, "alice")
                again = await submit(channel, JOB, "alice")
                evil = await submit(channel, EVIL, "alice")
                stranger = await submit(channel, JOB, "nobody")
                watch = services_pb2_grpc.EventsStub(channel).Watch(
                    services_pb2.WatchRequest(namespace="team-b", history_only=True),
                    metadata=bearer("alice"),
                )
                with pytest.raises(grpc.aio.AioRpcError) as watch_denied:
                    await watch.read()
            reviews = [r.path.rsplit("/", 1)[1] for r in server.requests.entries()]
    finally:
        await bus.close()
        await nats.stop()

    assert job == again == ("OK", "")
    assert evil == (
        "PERMISSION_DENIED",
        'Pod/kube-system/evil: permission submit denied to user "alice" in namespace kube-system',
    )
    assert stranger[0] == "UNAUTHENTICATED"
    assert watch_denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # Answers are cached: alice's token and "create jobs in team-a" were each asked once.
    assert reviews.count("tokenreviews") == 2  # alice, nobody
    assert reviews.count("subjectaccessreviews") == 3  # jobs team-a, pods kube-system, watch


async def test_what_the_gateway_lets_through_is_written_as_the_caller(tmp_path: Path) -> None:
    # A policy that (wrongly) lets bob submit anywhere: the cluster still judges bob.
    (tmp_path / "tokens.yaml").write_text(
        f"tokens: [{{sha256: {token_hash(token('bob'))}, user: bob, groups: [team-b]}}]\n"
    )
    (tmp_path / "policy.yaml").write_text(
        'rules: [{users: [bob], permissions: [submit], namespaces: ["*"]}]\n'
    )
    security = SecurityConfig(
        tokens_file=str(tmp_path / "tokens.yaml"), policy_file=str(tmp_path / "policy.yaml")
    )
    async with running_stack(
        tmp_path,
        access=cluster_access(),
        admin_token=token("admin"),
        service_flags=own_credentials(tmp_path),
    ) as stack:
        await stack.kubectl.apply(NAMESPACES)
        async with gateway_on(stack.bus, security) as channel:
            own = await submit(channel, EVIL.replace("kube-system", "team-b"), "bob")
            evil = await submit(channel, EVIL, "bob")

            async def dead() -> Any:
                info = await stack.bus.js.stream_info(DLQ_STREAM)
                return info.state.messages and await stack.bus.js.get_msg(DLQ_STREAM, 1)

            letter = await eventually(dead)
            mine = await eventually(lambda: stack.kubectl.get("Pod", "evil", "team-b"))
            theirs = await stack.kubectl.get("Pod", "evil", "kube-system")
        creates = [
            (r.path, r.code, r.user)
            for r in stack.server.requests.entries()
            if r.verb == "create" and r.path.endswith("/pods")
        ]

    assert own == evil == ("OK", "")  # the gateway's policy let both through
    assert mine is not None
    assert theirs is None  # never created: not by bob, and not by the binder for him
    reason = letter.headers["Muster-Dlq-Reason"]
    assert "Pod/kube-system/evil" in reason
    assert 'User "bob" cannot create resource "pods"' in reason
    assert creates == [
        ("/api/v1/namespaces/team-b/pods", 201, "bob"),
        ("/api/v1/namespaces/kube-system/pods", 403, "bob"),
    ]
