"""deploy/monitoring: the PodMonitor scrapes every muster pod's /metrics port, the network lets
Prometheus in, and the Grafana dashboard asks only for series muster exports."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client import CollectorRegistry
from test_manifests import (
    DEPLOY,
    OVERLAYS,
    by_kind,
    label_match,
    muster_containers,
    needs_kubectl,
    overlay,
    rendered,
    workloads,
)

from muster.metrics.bus import BusMetrics
from muster.metrics.kueue_series import KueueSeries
from muster.metrics.services import AdmissionSeries, BinderSeries, PlacementSeries

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
# PromQL words that look like series names in an expression.
PROMQL = {"sum", "by", "rate", "increase", "max", "histogram_quantile", "le", "without"}


def exported() -> set[str]:
    """Every series name muster's services can expose."""
    registry = CollectorRegistry()
    BusMetrics(registry, service="any")
    KueueSeries(registry)
    AdmissionSeries(registry, shard=0)
    PlacementSeries(registry, cluster="any")
    BinderSeries(registry, cluster="any")
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def dashboard_series() -> set[str]:
    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = set()
    for expr in exprs:
        bare = re.sub(r"\{[^}]*\}|\[[^]]*\]|\"[^\"]*\"", "", expr)  # selectors, ranges, strings
        names |= {w for w in re.findall(r"[a-z_][a-z0-9_]*", bare) if w.startswith(("kueue_",
                  "muster_", "multikueue_"))}  # fmt: skip
    return names


def test_the_dashboard_asks_only_for_series_muster_exports() -> None:
    asked = dashboard_series()
    assert asked, "no series found in the dashboard"
    assert asked - exported() == set()
    assert not asked & PROMQL


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_every_muster_container_serves_metrics_where_the_pod_monitor_scrapes(name: str) -> None:
    (monitor,) = by_kind(rendered("deploy/monitoring"), "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    objs = overlay(name)
    env = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind(objs, "ConfigMap")}
    port = int(env["muster-env"]["MUSTER_METRICS_PORT"])
    served = 0
    for obj, c in muster_containers(objs):
        if obj["kind"] == "Job":
            continue
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert label_match(selector, labels), obj["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        assert ports.get(endpoint["port"]) == port, obj["metadata"]["name"]
        served += 1
    assert served == len(workloads(objs)) - 1  # every service; not NATS


@needs_kubectl
def test_the_dashboard_config_map_is_the_json_file() -> None:
    (config_map,) = by_kind(rendered("deploy/monitoring"), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    on_disk = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    assert json.loads(config_map["data"]["muster.json"]) == on_disk
