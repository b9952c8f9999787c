"""Helpers for driving the API-server stand-in with the official `kubernetes` client: a client
configured for a stand-in URL, object factories (plain dicts, as the client accepts), the
Status body of an ApiException, and the bridges to the client's types (`as_model`, `present`,
`as_json`, `http_response`)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3
from budget import wait_s
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")


def api_client(url: str, *, token: str | None = None) -> client.ApiClient:
    """An ApiClient for `url`, ignoring any proxy from the environment (loopback only); with
    `token`, authenticated by it (a stand-in with access control)."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.proxy = None
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def status_of(err: ApiException) -> dict[str, Any]:
    """The Status object the server answered with."""
    body: dict[str, Any] = json.loads(present(err.body))
    return body


def as_model(model: type[ModelT], doc: Mapping[str, Any]) -> ModelT:
    """`doc` as the client's `model`: what a typed method does itself with a plain dict passed
    as its body (pydantic's validate_call), done where mypy sees it; the same body is sent."""
    return model.model_validate(doc)


def present(value: T | None) -> T:
    """A field the server sets, which the client's models declare optional."""
    assert value is not None
    return value


def as_json(value: object) -> dict[str, Any]:
    """A custom object as the client returns it: the decoded JSON, which its signature types
    as `object`."""
    assert isinstance(value, dict)
    return value


def http_response(answer: object) -> urllib3.BaseHTTPResponse:
    """What a call made with `_preload_content=False` returns: the HTTP response, though the
    method's signature names its model."""
    assert isinstance(answer, urllib3.BaseHTTPResponse)
    return answer


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    scheduler: str | None = None,
    gates: tuple[str, ...] = (),
    priority_class: str | None = None,
    image: str = "busybox:1.36",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image}]}
    if node is not None:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def job(
    name: str, *, queue: str | None = None, suspend: bool = True, parallelism: int = 3
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": suspend,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def node(name: str, *, labels: dict[str, str] | None = None, cpu: str = "8") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"capacity": {"cpu": cpu}, "allocatable": {"cpu": cpu}},
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def cluster_queue(name: str, *, version: str = "v1beta1", cpu: str = "10") -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [{"name": "cpu", "nominalQuota": cpu}],
                        }
                    ],
                }
            ],
        },
    }


def workload(name: str, *, queue: str = "lq", version: str = "v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                }
            ],
        },
    }


def until(check: Callable[[], T | None], *, timeout_s: float | None = None) -> T:
    """The first truthy `check()`, asked every 10 ms until `timeout_s` (None: the rest of the
    test's time, `tests/budget.py`): a threaded stand-in's controllers run on its own thread
    after a request is answered, so a read may come before them."""
    timeout_s = wait_s(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, f"not so after {timeout_s:g}s: {found!r}"
            return found
        time.sleep(0.01)


END = "END"  # what WatchThread yields when the stream ended cleanly


class WatchThread:
    """Runs `kubernetes.watch.Watch().stream(func, ...)` on a thread and hands its events (or
    the exception that ended it, or END) to the test through a queue, so a test can write while
    a watch is open and wait for outcomes with a timeout instead of sleeping."""

    def __init__(self, func: Any, *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]  # the client has no hints here
        self._items: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)

    def __enter__(self) -> WatchThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.stop()  # type: ignore[no-untyped-call]  # the client has no hints here
        self._thread.join(5)

    def _run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            events = self.watch.stream(func, *args, **kwargs)  # type: ignore[no-untyped-call]  # unhinted
            for event in events:
                self._items.put(event)
        except BaseException as err:  # handed to the test, which asserts on it
            self._items.put(err)
        else:
            self._items.put(END)

    def next(self, timeout_s: float | None = None) -> Any:
        """The next event dict, END, or the exception that ended the stream (waiting at most
        `timeout_s`; None: the rest of the test's time, `tests/budget.py`)."""
        return self._items.get(timeout=wait_s(timeout_s))

    def events(self, count: int, timeout_s: float | None = None) -> list[dict[str, Any]]:
        found = [self.next(timeout_s) for _ in range(count)]
        for item in found:
            if not isinstance(item, dict):
                raise AssertionError(f"the stream ended early: {item!r}")
        return found


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, name) of each event."""
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]
