"""Until muster runs JobSets on Kubernetes (watch, unsuspend, suspend: docs/kueue-compatibility.md,
"JobSet"), the Kubernetes backend writes none: a Submit of one there is refused naming it,
never created for nobody to run."""

from __future__ import annotations

import pytest

from muster.cluster.errors import ClusterError
from muster.cluster.kube.resources import resource_for, watched_sources

JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "train", "namespace": "team-a"},
}


def test_a_jobset_is_not_one_the_kubernetes_backend_writes() -> None:
    with pytest.raises(ClusterError) as refused:
        resource_for(JOBSET, kueue_version="v1beta2")

    assert str(refused.value).startswith("JobSet/train")
    assert "kind jobset.x-k8s.io/v1alpha2 JobSet is not one muster writes" in str(refused.value)


def test_no_watch_follows_jobsets() -> None:
    sources = watched_sources(scheduler_name="muster", kueue_version="v1beta2")

    assert all(source.resource.kind != "JobSet" for source in sources)
