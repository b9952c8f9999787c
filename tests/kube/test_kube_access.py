"""Access control on the API-server stand-in (tokens, RBAC-like grants, impersonation,
TokenReview, SubjectAccessReview) and the kube backend writing as the user it is given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_access_helpers import cluster_access, kubeconfig, token
from kube_backend_helpers import fast_config
from kube_helpers import api_client, as_model, pod, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.cluster.backend import Identity
from muster.cluster.errors import ClusterError
from muster.cluster.kube import KubeBackend
from muster.devtools.apiserver import ApiServer, ThreadedApiServer

pytestmark = pytest.mark.timeout(60)
NAMESPACES = ("team-a", "team-b")


@pytest.fixture
def guarded() -> Iterator[ThreadedApiServer]:
    with ThreadedApiServer(ApiServer(access=cluster_access())) as server:
        admin = client.CoreV1Api(api_client(server.url, token=token("admin")))
        for name in NAMESPACES:
            admin.create_namespace(as_model(client.V1Namespace, {"metadata": {"name": name}}))
        yield server


def core_as(server: ThreadedApiServer, account: str | None, **headers: str) -> client.CoreV1Api:
    api = api_client(server.url, token=token(account) if account else None)
    for name, value in headers.items():
        api.set_default_header(name.replace("_", "-"), value)  # type: ignore[no-untyped-call]  # the client has no hints here
    return client.CoreV1Api(api)


def refusal(call: object) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()  # type: ignore[operator]
    return caught.value.status, status_of(caught.value).get("message", "")


def test_a_request_without_a_known_token_is_unauthorized(guarded: ThreadedApiServer) -> None:
    anonymous, stranger = (
        core_as(guarded, None),
        client.CoreV1Api(api_client(guarded.url, token="no-such-token")),
    )

    assert refusal(lambda: anonymous.list_namespaced_pod("team-b"))[0] == 401
    assert refusal(lambda: stranger.list_namespaced_pod("team-b"))[0] == 401
    assert core_as(guarded, "bob").list_namespaced_pod("team-b").items == []
    assert client.VersionApi(api_client(guarded.url)).get_code().major == "1"  # open


def test_a_request_outside_the_grants_is_forbidden_as_the_api_server_says(
    guarded: ThreadedApiServer,
) -> None:
    bob = core_as(guarded, "bob")

    code, message = refusal(
        lambda: bob.create_namespaced_pod("kube-system", as_model(client.V1Pod, pod("evil")))
    )

    assert code == 403
    assert message == (
        'pods is forbidden: User "bob" cannot create resource "pods" in API group "" '
        'in the namespace "kube-system"'
    )


def test_impersonation_needs_the_right_and_then_judges_the_impersonated_user(
    guarded: ThreadedApiServer,
) -> None:
    as_bob = {"Impersonate_User": "bob", "Impersonate_Group": "team-b"}
    binder = core_as(guarded, "binder", **as_bob)
    alice = core_as(guarded, "alice", **as_bob)

    binder.create_namespaced_pod("team-b", as_model(client.V1Pod, pod("ok")))
    denied = refusal(
        lambda: binder.create_namespaced_pod("kube-system", as_model(client.V1Pod, pod("evil")))
    )
    no_right = refusal(
        lambda: alice.create_namespaced_pod("team-b", as_model(client.V1Pod, pod("sneaky")))
    )

    assert denied[0] == 403
    assert 'User "bob" cannot create resource "pods"' in denied[1]
    assert no_right[0] == 403
    assert 'User "alice" cannot impersonate resource "users"' in no_right[1]
    (created,) = [
        r for r in guarded.requests.entries() if r.path.endswith("/pods") and r.code == 201
    ]
    assert (created.path, created.user) == ("/api/v1/namespaces/team-b/pods", "bob")


def test_token_and_subject_access_reviews_answer_for_the_access_policy(
    guarded: ThreadedApiServer,
) -> None:
    gateway = api_client(guarded.url, token=token("gateway"))
    authn, authz = client.AuthenticationV1Api(gateway), client.AuthorizationV1Api(gateway)

    def review(user: str, groups: list[str], namespace: str) -> bool:
        attrs = {"verb": "create", "resource": "pods", "namespace": namespace}
        spec = {"user": user, "groups": groups, "resourceAttributes": attrs}
        return bool(
            present(
                authz.create_subject_access_review(
                    as_model(client.V1SubjectAccessReview, {"spec": spec})
                ).status
            ).allowed
        )

    known = present(
        authn.create_token_review(
            as_model(client.V1TokenReview, {"spec": {"token": token("alice")}})
        ).status
    )
    unknown = present(
        authn.create_token_review(
            as_model(client.V1TokenReview, {"spec": {"token": "guess"}})
        ).status
    )
    bob = client.AuthenticationV1Api(api_client(guarded.url, token=token("bob")))

    assert (known.authenticated, present(known.user).username) == (True, "alice")
    assert present(known.user).groups == ["team-a", "system:authenticated"]
    assert unknown.authenticated is False
    assert review("alice", ["team-a"], "team-a") is True
    assert review("alice", ["team-a"], "kube-system") is False
    assert (
        refusal(
            lambda: bob.create_token_review(
                as_model(client.V1TokenReview, {"spec": {"token": "x"}})
            )
        )[0]
        == 403
    )


async def test_the_kube_backend_writes_as_the_identity_it_is_given(tmp_path: Path) -> None:
    async with ApiServer(access=cluster_access()) as server:
        for name in NAMESPACES:
            server.api.create(
                present(server.registry.by_key(("", "namespaces"))),
                "v1",
                "",
                {"metadata": {"name": name}},
            )
        config = fast_config(server.url, kubeconfig=str(kubeconfig(tmp_path, server.url, "binder")))
        backend = await KubeBackend.connect(config)
        alice = Identity(user="alice", groups=("team-a",))
        try:
            created = await backend.create(
                {**pod("mine"), "metadata": {"name": "mine", "namespace": "team-a"}}, as_user=alice
            )
            with pytest.raises(ClusterError) as refused:
                await backend.create(
                    {**pod("evil"), "metadata": {"name": "evil", "namespace": "kube-system"}},
                    as_user=alice,
                )
        finally:
            await backend.close()
        writes = [(r.path, r.code, r.user) for r in server.requests.entries() if r.verb == "create"]

    assert created is True
    assert (refused.value.reason, refused.value.temporary) == ("Forbidden", False)
    assert 'User "alice" cannot create resource "pods"' in refused.value.message
    assert writes[-2:] == [
        ("/api/v1/namespaces/team-a/pods", 201, "alice"),
        ("/api/v1/namespaces/kube-system/pods", 403, "alice"),
    ]
