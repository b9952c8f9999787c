"""A MultiKueueCluster whose kubeConfig names a path (locationType: Path) that is no kubeconfig
file: a device that never ends (/dev/zero), a FIFO nobody writes, a directory, a huge file,
bytes that are not UTF-8. The service reading it for its worker says why in the cluster's
status reason (BadKubeConfig) and reads at most 1 MiB; before, /dev/zero filled its memory,
a FIFO held a thread for ever, and non-UTF-8 bytes raised out of the read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest

from muster.cluster.kube.settings import WorkerSource
from muster.cluster.kube.transport import Transport
from muster.cluster.kube.worker import BAD, WorkerConfigError, read_kubeconfig

pytestmark = pytest.mark.timeout(30)


class Manager:
    """The manager's API server, as far as reading one MultiKueueCluster goes."""

    def __init__(self, location: str) -> None:
        self.cluster = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueCluster",
            "metadata": {"name": "east"},
            "spec": {
                "clusterSource": {"kubeConfig": {"locationType": "Path", "location": location}}
            },
        }

    async def checked(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path.rsplit("/", 1)[-1]) == ("GET", "east")
        return self.cluster


async def refusal(location: str | Path) -> str:
    manager = cast(Transport, Manager(str(location)))
    with pytest.raises(WorkerConfigError) as refused:
        await read_kubeconfig(manager, WorkerSource(cluster="east"), version="v1beta2")
    assert refused.value.reason == BAD
    return refused.value.message


async def test_a_device_that_never_ends_is_not_read() -> None:
    message = await refusal("/dev/zero")
    assert "kubeConfig /dev/zero: not a regular file" in message


async def test_a_fifo_nobody_writes_does_not_hold_the_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    assert "not a regular file" in await refusal(fifo)


async def test_a_directory_is_named(tmp_path: Path) -> None:
    assert "not a regular file" in await refusal(tmp_path)


async def test_a_file_larger_than_a_secret_is_not_read(tmp_path: Path) -> None:
    huge = tmp_path / "kubeconfig"
    huge.write_bytes(b"#" * ((1 << 20) + 1))
    assert f"kubeConfig {huge}: larger than 1 MiB: not read" in await refusal(huge)


async def test_bytes_that_are_not_text_are_named(tmp_path: Path) -> None:
    binary = tmp_path / "kubeconfig"
    binary.write_bytes(b"clusters: [\xff\xfe]")
    assert f"kubeConfig {binary}: 'utf-8' codec can't decode" in await refusal(binary)
