"""Server-side field validation on the stand-in, through the official client: with
`fieldValidation=Strict` a write naming a field its kind lacks is refused, worded as the API
server words it; `Warn` and `Ignore` let it through. Built-in kinds (Jobs, Pods) are checked
against their fields, custom resources against their CRD's schema (muster's own k8s/crds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import api_client, job, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ApiServer, ThreadedApiServer, builtin_resources

CRDS = Path(__file__).resolve().parents[2] / "k8s" / "crds"
KUEUE = ("kueue.x-k8s.io", "v1beta1")


@pytest.fixture
def with_crds() -> Iterator[client.ApiClient]:
    """A cluster without Kueue, given muster's CRDs through the API."""
    with ThreadedApiServer(ApiServer(resources=builtin_resources())) as server:
        api = api_client(server.url)
        extensions = client.ApiextensionsV1Api(api)
        for path in sorted(CRDS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    extensions.create_custom_resource_definition(doc)
        yield api
        api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


# The typed client refuses unknown fields itself; its untyped one sends them, as kubectl does.
BATCH = ("batch", "v1", "default", "jobs")


def test_a_job_with_unknown_fields_is_refused_as_the_api_server_words_it(
    custom: client.CustomObjectsApi,
) -> None:
    typo = job("train")
    typo["spec"]["suspnd"] = True
    typo["spec"]["template"]["spec"]["containers"][0]["resources"]["request"] = {"cpu": "1"}

    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*BATCH, typo, field_validation="Strict")

    assert caught.value.status == 400
    assert status_of(caught.value)["message"] == (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.template.spec.containers[0].resources.request", '
        'unknown field "spec.suspnd"'
    )  # in the order the body has them
    custom.create_namespaced_custom_object(*BATCH, typo, field_validation="Ignore")  # as before


def test_an_update_is_checked_too(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(*BATCH, job("train"), field_validation="Strict")
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            *BATCH, "train", {"spec": {"parallelizm": 2}}, field_validation="Strict"
        )
    assert 'unknown field "spec.parallelizm"' in status_of(caught.value)["message"]


def test_a_custom_resource_is_checked_against_its_crds_schema(
    with_crds: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(with_crds)
    queue: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "resourceGroup": []},
    }
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(
            *KUEUE, "clusterqueues", queue, field_validation="Strict"
        )
    assert status_of(caught.value)["message"] == (
        'ClusterQueue in version "v1beta1" cannot be handled as a ClusterQueue: strict decoding '
        'error: unknown field "spec.resourceGroup"'
    )
    del queue["spec"]["resourceGroup"]
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", queue, field_validation="Strict")
