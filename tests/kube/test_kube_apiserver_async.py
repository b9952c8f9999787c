"""The stand-in as an async context manager, driven by the official asyncio client
(`kubernetes.aio`), and as a command (`python -m muster.devtools.apiserver`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from kube_helpers import as_model, pod, present

from muster.devtools.apiserver import ApiServer

if TYPE_CHECKING:
    import kubernetes.aio.client as aio_client  # as importorskip gives it
else:
    aio_client = pytest.importorskip(
        "kubernetes.aio.client", reason="kubernetes.aio ships with client 37+"
    )
aio_watch = pytest.importorskip("kubernetes.aio.watch")


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer() as running:
        yield running


@pytest.fixture
async def core(server: ApiServer) -> AsyncIterator[aio_client.CoreV1Api]:
    configuration = aio_client.Configuration()
    configuration.host = server.url
    configuration.proxy = None
    async with aio_client.ApiClient(configuration) as api:
        yield aio_client.CoreV1Api(api)


async def test_the_asyncio_client_lists_creates_and_watches(
    server: ApiServer, core: aio_client.CoreV1Api
) -> None:
    since = present((await core.list_namespaced_pod("default")).metadata).resource_version
    await core.create_namespaced_pod("default", as_model(aio_client.V1Pod, pod("p")))
    seen = []
    watcher = aio_watch.Watch()
    async with watcher.stream(
        core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=5
    ) as events:
        async for event in events:
            seen.append((event["type"], event["object"].metadata.name))
            watcher.stop()
            break
    assert seen == [("ADDED", "p")]


async def test_an_expired_watch_raises_410_in_the_asyncio_client(
    server: ApiServer, core: aio_client.CoreV1Api
) -> None:
    since = present((await core.list_namespaced_pod("default")).metadata).resource_version
    await core.create_namespaced_pod("default", as_model(aio_client.V1Pod, pod("p")))
    server.compact()
    with pytest.raises(aio_client.ApiException) as caught:
        await _watch_to_the_end(core, resource_version=since)
    assert caught.value.status == 410


async def _watch_to_the_end(core: aio_client.CoreV1Api, **options: object) -> None:
    async with aio_watch.Watch().stream(core.list_namespaced_pod, "default", **options) as events:
        async for _ in events:
            pass


async def _request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str
) -> bytes:
    writer.write(f"GET {target} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    await writer.drain()
    return await reader.readuntil(b"\r\n\r\n")


async def test_a_cleanly_ended_watch_leaves_the_connection_usable(server: ApiServer) -> None:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = await _request(
        reader, writer, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1"
    )
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"Transfer-Encoding: chunked" in head
    assert server.end_watches() == 1  # registered before the head was sent
    assert await reader.readuntil(b"0\r\n\r\n")  # the closing chunk
    again = await _request(reader, writer, "/healthz")
    assert again.startswith(b"HTTP/1.1 200 OK")
    writer.close()


async def test_stop_returns_with_watches_open(core: aio_client.CoreV1Api) -> None:
    other = ApiServer()
    await other.start()
    reader, writer = await asyncio.open_connection(other.host, other.port)
    await _request(reader, writer, "/api/v1/pods?watch=true")
    await asyncio.wait_for(other.stop(), 5)
    assert await reader.read() == b""  # the stream was cut: no closing chunk
    writer.close()


def test_the_command_serves_until_interrupted() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "muster.devtools.apiserver", "--port", "0", "--bare"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as health:
            assert health.read() == b"ok"
        with urllib.request.urlopen(f"{url}/apis", timeout=5) as apis:
            groups = {g["name"] for g in json.load(apis)["groups"]}
        assert "kueue.x-k8s.io" not in groups
        assert "batch" in groups
    finally:
        proc.terminate()
        proc.wait(10)
