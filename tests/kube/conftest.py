"""Fixtures: a fresh API-server stand-in per test (on its own thread, free loopback port) and
the official client's API objects pointed at it; or one on the test's own event loop
(`server`) with a KubeBackend tuned for fast tests (`backend`); muster's INFO logs kept for
a failed test's report."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from kube_backend_helpers import backend_for
from kube_helpers import api_client
from kubernetes import client

from muster.cluster.kube import KubeBackend
from muster.devtools.apiserver import ApiServer, ThreadedApiServer


@pytest.fixture
def apiserver() -> Iterator[ThreadedApiServer]:
    with ThreadedApiServer(ApiServer(bookmark_interval_s=60.0)) as server:
        yield server


@pytest.fixture
def kube(apiserver: ThreadedApiServer) -> Iterator[client.ApiClient]:
    api = api_client(apiserver.url)
    yield api
    api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


@pytest.fixture
def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


@pytest.fixture
def batch(kube: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(kube)


@pytest.fixture
def custom(kube: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer() as running:
        yield running


@pytest.fixture
async def backend(server: ApiServer) -> AsyncIterator[KubeBackend]:
    async with backend_for(server) as made:
        yield made


@pytest.fixture(autouse=True)
def _muster_info_logs(caplog: pytest.LogCaptureFixture) -> None:
    """A failed test shows muster's INFO lines too (relists, reconciles, leases): the few a
    test writes say which step of a chain of services did not happen."""
    caplog.set_level(logging.INFO, logger="muster")
