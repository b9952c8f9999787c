"""Fault injection as the official client experiences it: 429 with Retry-After, 500, reset
connections, latency; and the request log tests assert on."""

from __future__ import annotations

import time

import pytest
import urllib3
from kube_helpers import as_model, job, pod, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ThreadedApiServer


def test_a_429_on_a_write_carries_retry_after_and_is_not_retried(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    apiserver.faults.fail_next(1, status=429, retry_after_s=1, verb="patch")
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    status = status_of(caught.value)
    assert caught.value.status == 429
    assert present(caught.value.headers)["Retry-After"] == "1"
    assert status["reason"] == "TooManyRequests"
    assert status["details"] == {"retryAfterSeconds": 1}
    assert present(
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}}).metadata
    ).labels == {"a": "b"}
    assert apiserver.requests.count(verb="patch") == 2


def test_the_client_retries_a_read_answered_429_with_retry_after(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    """urllib3's default policy retries GETs on 429 + Retry-After, three times at most."""
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    apiserver.faults.fail_next(1, status=429, retry_after_s=0, verb="get")
    assert present(core.read_namespaced_pod("p", "default").metadata).name == "p"
    apiserver.faults.fail_next(10, status=429, retry_after_s=0, verb="get")
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("p", "default")
    assert caught.value.status == 429
    assert apiserver.requests.count(verb="get", code=429) == 1 + 4


def test_a_500_surfaces_once_and_the_next_request_succeeds(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    apiserver.faults.fail_next(1, status=500, verb="list")
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default")
    assert caught.value.status == 500
    assert status_of(caught.value)["reason"] == "InternalError"
    assert core.list_namespaced_pod("default").items == []
    assert apiserver.faults.pending() == 0


def test_faults_match_on_verb_and_path(
    apiserver: ThreadedApiServer, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train")))
    apiserver.faults.fail_next(2, status=503, verb="patch", path=r"/status$")
    batch.patch_namespaced_job("train", "default", {"metadata": {"labels": {"a": "b"}}})
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            batch.patch_namespaced_job_status("train", "default", {"status": {"active": 1}})
        assert caught.value.status == 503
    assert (
        present(
            batch.patch_namespaced_job_status("train", "default", {"status": {"active": 1}}).status
        ).active
        == 1
    )


def test_a_reset_connection_is_retried_for_reads_but_not_for_creates(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    apiserver.faults.reset_next(verb="get")
    assert present(core.read_namespaced_pod("p", "default").metadata).name == "p"
    apiserver.faults.reset_next(verb="create")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("q")))
    assert apiserver.requests.count(code=0) == 2
    with pytest.raises(ApiException):  # the create never happened
        core.read_namespaced_pod("q", "default")


def test_latency_delays_matching_answers(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    apiserver.faults.set_latency(0.2, verb="list")
    started = time.monotonic()
    core.list_namespaced_pod("default")
    assert time.monotonic() - started >= 0.2
    apiserver.faults.set_latency(0)
    core.list_namespaced_pod("default")


def test_fault_arguments_are_checked(apiserver: ThreadedApiServer) -> None:
    with pytest.raises(ValueError, match="HTTP error code"):
        apiserver.faults.fail_next(status=200)
    with pytest.raises(ValueError, match="count"):
        apiserver.faults.reset_next(0)
