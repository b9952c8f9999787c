"""The pure permission decisions: the policy document, what it allows, and which actions a
Submit, an event or a Kubernetes review needs."""

from __future__ import annotations

import pytest
import yaml

from muster.contracts.v1 import events_pb2
from muster.gateway.permissions import (
    Action,
    Caller,
    Permission,
    PolicyError,
    denial,
    event_action,
    policy_from_document,
    submit_actions,
)
from muster.gateway.permissions_kube import review_of
from muster.gateway.submit import plan_submit

POLICY = policy_from_document(
    yaml.safe_load(
        """
        rules:
        - groups: [team-a]
          permissions: [submit, watch]
          namespaces: [team-a, shared/gpu]
        - users: [ops]
          permissions: [admin]
        """
    )
)
ALICE = Caller(user="alice", groups=("team-a",))


def act(permission: str, namespace: str = "", local_queue: str = "") -> Action:
    return Action(permission=Permission(permission), namespace=namespace, local_queue=local_queue)


@pytest.mark.parametrize(
    ("caller", "action", "allowed"),
    [
        (ALICE, act("submit", "team-a"), True),
        (ALICE, act("submit", "team-a", "any"), True),
        (ALICE, act("watch", "team-a"), True),
        (ALICE, act("create_queue", "team-a"), False),
        (ALICE, act("submit", "team-b"), False),
        (ALICE, act("submit", "shared", "gpu"), True),
        (ALICE, act("submit", "shared", "cpu"), False),
        (ALICE, act("submit", "shared"), False),  # a Pod: no LocalQueue
        (ALICE, act("watch", "*"), False),
        (ALICE, act("admin"), False),
        (Caller(user="ops"), act("admin"), True),
        (Caller(user="ops"), act("submit", "kube-system"), True),
        (Caller(user="x", groups=("muster:admins",)), act("admin"), True),
        (Caller(user="team-a"), act("submit", "team-a"), False),  # a user is not a group
    ],
)
def test_policy_allows_only_what_a_rule_grants(
    caller: Caller, action: Action, allowed: bool
) -> None:
    assert POLICY.allows(caller, action) is allowed


def test_a_bad_policy_names_every_problem_with_its_field_path() -> None:
    doc = yaml.safe_load(
        """
        rulez: []
        rules:
        - permissions: [submit, fly]
          namespaces: [a/b/c]
        - users: [x]
          permissions: [watch]
        - users: [y]
          permissions: [admin]
          what: 1
        """
    )

    with pytest.raises(PolicyError) as caught:
        policy_from_document(doc)

    assert caught.value.problems == (
        "policy: rulez: unknown field (known: rules)",
        "policy: rules[0]: needs users or groups",
        'policy: rules[0].permissions[1]: unknown permission "fly" '
        "(submit, cancel, watch, create_queue, admin)",
        'policy: rules[0].namespaces[0]: must be "<namespace>", "<namespace>/<local-queue>" '
        'or "*", got "a/b/c"',
        "policy: rules[1].namespaces: is required for watch",
        "policy: rules[2].what: unknown field (known: users, groups, permissions, namespaces)",
    )


def test_a_submit_needs_one_action_per_object_and_admin_for_another_cluster() -> None:
    manifest = """\
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ml, labels: {kueue.x-k8s.io/queue-name: gpu}}
spec: {template: {spec: {containers: [{name: c}]}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpu, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec: {}
"""
    planned = plan_submit(manifest, cluster="east")

    actions = submit_actions(planned, cluster="east", default_cluster="local")

    assert [
        (a.permission, a.namespace, a.local_queue, a.kind, a.resource_kind) for a in actions
    ] == [
        (Permission.ADMIN, "", "", "Cluster", ""),
        (Permission.SUBMIT, "ml", "gpu", "Workload", "Job"),
        (Permission.CREATE_QUEUE, "ml", "", "LocalQueue", ""),
        (Permission.ADMIN, "", "", "ClusterQueue", ""),
    ]
    assert denial(ALICE, actions[1]).startswith(
        f'Workload/{planned[0].key}: permission submit denied to user "alice" in namespace ml '
        "(LocalQueue gpu)"
    )


@pytest.mark.parametrize(
    ("env", "namespace"),
    [
        (events_pb2.Envelope(workload="ml/w", type="workload.admitted"), "ml"),
        (events_pb2.Envelope(workload="ml/g/pg/0", type="workload.bound"), "ml"),
        (
            events_pb2.Envelope(config_applied=events_pb2.ConfigApplied(name="ml/lq")),
            "ml",
        ),
        (events_pb2.Envelope(config_applied=events_pb2.ConfigApplied(name="cq")), "*"),
        (events_pb2.Envelope(config_deleted=events_pb2.ConfigDeleted(name="ns/lq")), "ns"),
        (events_pb2.Envelope(type="queue.status"), "*"),
    ],
)
def test_an_event_is_seen_by_who_may_watch_its_namespace(
    env: events_pb2.Envelope, namespace: str
) -> None:
    assert event_action(env) == act("watch", namespace)


def test_kube_authorization_asks_what_kubectl_would_need() -> None:
    job = Action(permission=Permission.SUBMIT, namespace="ml", kind="Workload", resource_kind="Job")
    cluster = Action(permission=Permission.ADMIN, kind="Cluster", name="east")
    lq = act("watch", "ml", "gpu")

    assert [(r.verb, r.group, r.resource, r.namespace, r.name) for r in review_of(job)] == [
        ("create", "batch", "jobs", "ml", "")
    ]
    assert [(r.verb, r.group, r.resource, r.name) for r in review_of(cluster)] == [
        ("use", "muster.dev", "clusters", "east")
    ]
    assert [(r.verb, r.resource, r.namespace, r.name) for r in review_of(lq)] == [
        ("watch", "workloads", "ml", ""),
        ("get", "localqueues", "ml", "gpu"),
    ]
    assert review_of(act("watch", "*"))[0].namespace == ""
    assert review_of(Action(permission=Permission.ADMIN, kind="Unknown")) == []
