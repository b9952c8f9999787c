"""Workload names at the edges of the one-write claim's name key (`bus.subjects.name_key`):
`<namespace>.<name>` is one name's only because a namespace has no dot, so a Submit naming a
dotted namespace ("a.b/c", whose key would be "a/b.c"'s) is refused naming the field; the
longest namespace and name keep their readable key (no hash), distinct from a hashed one."""

from __future__ import annotations

import pytest

from muster.bus.subjects import name_key
from muster.gateway.submit import InvalidManifestError, plan_submit

LONGEST_NAMESPACE = "n" * 63  # a DNS-1123 label
LONGEST_NAME = "x" * 30 + "." + "y" * 32  # a Workload's name: at most 63, dots allowed


def workload(namespace: str, name: str) -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\n"
        f"metadata: {{name: '{name}', namespace: '{namespace}'}}\n"
        "spec:\n  queueName: q\n"
        "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]\n"
    )


@pytest.mark.parametrize("namespace", ["a.b", "=sha256", "A", "a/b", "a*", "a>"])
def test_a_namespace_that_could_forge_another_names_key_is_refused(namespace: str) -> None:
    with pytest.raises(InvalidManifestError) as refused:
        plan_submit(workload(namespace, "c"), cluster="local", submission="k")
    assert "metadata.namespace" in str(refused.value)


def test_the_longest_names_keep_a_readable_key_of_their_own() -> None:
    assert len(LONGEST_NAME) == 63
    (planned,) = plan_submit(
        workload(LONGEST_NAMESPACE, LONGEST_NAME), cluster="local", submission="k"
    )
    assert planned.key == f"{LONGEST_NAMESPACE}/{LONGEST_NAME}"
    key = name_key(f"{LONGEST_NAMESPACE}/{LONGEST_NAME}")
    assert key == f"{LONGEST_NAMESPACE}.{LONGEST_NAME}"
    assert not key.startswith("=")
    assert name_key("a/b.c") != name_key("a/b-c")
