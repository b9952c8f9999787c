"""Watches through the official client: exactly the changes after a resourceVersion, in
order; bookmarks; 410 Gone for a resourceVersion older than the history; selectors on both
sides of a change; streams cut mid-way and resumed without loss or duplicates."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import urllib3
from kube_helpers import (
    END,
    WatchThread,
    api_client,
    as_json,
    as_model,
    http_response,
    pod,
    present,
    summary,
    workload,
)
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ApiServer, ThreadedApiServer


def _rv(core: client.CoreV1Api) -> str:
    return str(present(core.list_namespaced_pod("default").metadata).resource_version)


def test_a_watch_from_a_resource_version_sees_exactly_the_later_changes_in_order(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("before")))
    since = _rv(core)
    with WatchThread(core.list_namespaced_pod, "default", resource_version=since) as stream:
        written = [
            present(
                core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p1"))).metadata
            ).resource_version,
            present(
                core.patch_namespaced_pod(
                    "before", "default", {"metadata": {"labels": {"a": "b"}}}
                ).metadata
            ).resource_version,
        ]
        core.delete_namespaced_pod("p1", "default")
        events = stream.events(3)
    assert summary(events) == [("ADDED", "p1"), ("MODIFIED", "before"), ("DELETED", "p1")]
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions[:2] == [int(present(v)) for v in written]
    assert versions == sorted(versions)
    assert versions[2] > versions[1]


def test_a_watch_without_resource_version_starts_with_every_current_object(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("b")))
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("a")))
    with WatchThread(core.list_namespaced_pod, "default") as stream:
        initial = stream.events(2)
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("c")))
        live = stream.events(1)
    assert summary(initial + live) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_watch_objects_are_typed_by_the_client_and_it_tracks_the_resource_version(
    core: client.CoreV1Api,
) -> None:
    since = _rv(core)
    created = core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    w = watch.Watch()  # type: ignore[no-untyped-call]  # the client has no hints here
    for event in w.stream(  # type: ignore[no-untyped-call]  # the client has no hints here
        core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=5
    ):
        assert isinstance(event["object"], client.V1Pod)
        w.stop()  # type: ignore[no-untyped-call]  # the client has no hints here
    assert w.resource_version == present(created.metadata).resource_version


def test_an_object_leaving_or_joining_a_selector_is_deleted_or_added(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p", labels={"team": "a"})))
    since = _rv(core)
    with WatchThread(
        core.list_namespaced_pod, "default", label_selector="team=a", resource_version=since
    ) as stream:
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"team": "b"}}})
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"tier": "1"}}})  # unseen
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"team": "a"}}})
        events = stream.events(2)
    assert summary(events) == [("DELETED", "p"), ("ADDED", "p")]
    assert events[0]["raw_object"]["metadata"]["labels"]["team"] == "b"  # the state that left


def test_a_field_selected_watch_sees_pods_for_its_scheduler_only(core: client.CoreV1Api) -> None:
    since = _rv(core)
    with WatchThread(
        core.list_pod_for_all_namespaces,
        field_selector="spec.schedulerName=muster",
        resource_version=since,
    ) as stream:
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("theirs")))
        core.create_namespaced_pod(
            "default", as_model(client.V1Pod, pod("mine", scheduler="muster"))
        )
        assert summary(stream.events(1)) == [("ADDED", "mine")]


def test_a_resource_version_older_than_the_history_is_410_gone(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    since = _rv(core)
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    apiserver.compact()
    # The server answers 200 with one ERROR event carrying a 410 Expired Status ...
    raw = http_response(
        core.list_namespaced_pod(
            "default", watch=True, resource_version=since, _preload_content=False
        )
    )
    lines = [json.loads(line) for line in raw.read().decode().splitlines()]
    assert raw.status == 200
    assert len(lines) == 1
    error = lines[0]
    assert error["type"] == "ERROR"
    assert {k: error["object"][k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    # ... which the client's Watch turns into ApiException 410 after one retry.
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=since))  # type: ignore[no-untyped-call]  # the client has no hints here
    assert caught.value.status == 410
    assert apiserver.requests.count(verb="watch") == 3


def test_the_history_window_is_bounded(core: client.CoreV1Api) -> None:
    with ThreadedApiServer(ApiServer(history_limit=3)) as small:
        small_core = client.CoreV1Api(api_client(small.url))
        since = _rv(small_core)
        for i in range(4):
            small_core.create_namespaced_pod("default", as_model(client.V1Pod, pod(f"p{i}")))
        with pytest.raises(ApiException) as caught:
            list(
                watch.Watch().stream(  # type: ignore[no-untyped-call]  # the client has no hints here
                    small_core.list_namespaced_pod,
                    "default",
                    resource_version=since,
                    timeout_seconds=5,
                )
            )
        assert caught.value.status == 410
        recent = str(int(since) + 1)
        with WatchThread(
            small_core.list_namespaced_pod, "default", resource_version=recent
        ) as stream:
            assert summary(stream.events(3)) == [("ADDED", "p1"), ("ADDED", "p2"), ("ADDED", "p3")]


@pytest.fixture
def bookmarking() -> Iterator[ThreadedApiServer]:
    with ThreadedApiServer(ApiServer(bookmark_interval_s=0.05)) as server:
        yield server


def test_bookmarks_arrive_periodically_with_the_current_resource_version(
    bookmarking: ThreadedApiServer,
) -> None:
    core = client.CoreV1Api(api_client(bookmarking.url))
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    since = _rv(core)
    with WatchThread(
        core.list_namespaced_pod, "default", resource_version=since, allow_watch_bookmarks=True
    ) as stream:
        bookmark = stream.next()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["raw_object"] == {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": since},
        }
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("q")))
        after = stream.next()
        while after["type"] == "BOOKMARK":
            after = stream.next()
        assert summary([after]) == [("ADDED", "q")]
        later = stream.next()
        assert later["type"] == "BOOKMARK"
        assert (
            later["raw_object"]["metadata"]["resourceVersion"]
            == after["raw_object"]["metadata"]["resourceVersion"]
        )
        assert stream.watch.resource_version == after["raw_object"]["metadata"]["resourceVersion"]


def test_bookmarks_only_when_asked_for(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    since = _rv(core)
    with WatchThread(core.list_namespaced_pod, "default", resource_version=since) as stream:
        apiserver.send_bookmarks()
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
        assert summary(stream.events(1)) == [("ADDED", "p")]


def test_send_initial_events_ends_with_an_annotated_bookmark(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    with WatchThread(
        core.list_namespaced_pod,
        "default",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
    ) as stream:
        events = stream.events(2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["raw_object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"
    }


def test_a_watch_cut_mid_stream_resumes_without_loss_or_duplicates(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    since = _rv(core)
    for i in range(5):
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod(f"p{i}")))
    apiserver.faults.drop_next_watch(after_events=2, partial=True)
    seen: list[str] = []
    w = watch.Watch()  # type: ignore[no-untyped-call]  # the client has no hints here

    def watch_until_cut() -> None:
        events = w.stream(core.list_namespaced_pod, "default", resource_version=since)  # type: ignore[no-untyped-call]  # the client has no hints here
        seen.extend(e["raw_object"]["metadata"]["name"] for e in events)  # kept up to the cut

    with pytest.raises(urllib3.exceptions.ProtocolError):
        watch_until_cut()
    assert seen == ["p0", "p1"]
    resumed = w.resource_version
    assert resumed is not None
    for event in w.stream(  # type: ignore[no-untyped-call]  # the client has no hints here
        core.list_namespaced_pod, "default", resource_version=resumed, timeout_seconds=5
    ):
        seen.append(event["raw_object"]["metadata"]["name"])
        if len(seen) == 5:
            w.stop()  # type: ignore[no-untyped-call]  # the client has no hints here
    assert seen == ["p0", "p1", "p2", "p3", "p4"]


def test_dropping_open_watches_ends_them_with_an_error(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    since = _rv(core)
    with WatchThread(core.list_namespaced_pod, "default", resource_version=since) as stream:
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
        stream.events(1)
        assert apiserver.drop_watches() == 1
        assert isinstance(stream.next(), urllib3.exceptions.ProtocolError)


def test_a_server_side_end_finishes_a_watch_with_a_timeout_cleanly(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    since = _rv(core)
    with WatchThread(
        core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=60
    ) as stream:
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
        stream.events(1)
        assert apiserver.end_watches() == 1
        assert stream.next() == END
    assert apiserver.open_watches() == 0


def test_custom_resources_are_watched_at_the_version_asked_for(
    custom: client.CustomObjectsApi,
) -> None:
    group = "kueue.x-k8s.io"
    since = as_json(custom.list_namespaced_custom_object(group, "v1beta2", "default", "workloads"))[
        "metadata"
    ]["resourceVersion"]
    with WatchThread(
        custom.list_namespaced_custom_object,
        group,
        "v1beta2",
        "default",
        "workloads",
        resource_version=since,
    ) as stream:
        custom.create_namespaced_custom_object(
            group, "v1beta1", "default", "workloads", workload("w")
        )
        custom.patch_namespaced_custom_object_status(
            group, "v1beta1", "default", "workloads", "w", {"status": {"conditions": []}}
        )
        events = stream.events(2)
    assert summary(events) == [("ADDED", "w"), ("MODIFIED", "w")]
    assert {e["raw_object"]["apiVersion"] for e in events} == {"kueue.x-k8s.io/v1beta2"}
