"""`events.k8s.io/v1` Events as kube-apiserver validates them (pkg/apis/core/validation,
events.go), which is what client-go's event recorder and muster's write.

- eventTime, reportingController (a qualified name), reportingInstance (at most 128), action
  and reason (each at most 128) are required; type is Normal or Warning; the note is at most
  1 kB; a series counts at least 2 and has its lastObservedTime.
- The regarding object's namespace, when it has one, is the Event's.
- An update may change the note, the series and the metadata, nothing that identifies the
  occurrence (what, who, when).
- As on a real cluster, where both APIs are views of one stored Event, each events.k8s.io
  Event is also served as a core/v1 Event (`core_view`), which is what `kubectl describe` and
  `kubectl get events` list. (One way only: a core/v1 Event is not served as events.k8s.io.)
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import Cause, bad_value, immutable, required, unsupported
from muster.devtools.apiserver.objects import JsonObj, meta
from muster.devtools.apiserver.strategy_base import Strategy
from muster.devtools.apiserver.validation import qualified_name_causes

NOTE_LIMIT = 1024
SHORT_LIMIT = 128
TYPES = ["Normal", "Warning"]
# What an update must leave as it was.
IDENTITY = (
    "eventTime",
    "type",
    "reason",
    "action",
    "reportingController",
    "reportingInstance",
    "regarding",
    "related",
)


def _text(obj: JsonObj, field: str) -> str:
    value = obj.get(field)
    return value if isinstance(value, str) else ""


def _short_causes(obj: JsonObj, field: str) -> list[Cause]:
    value = _text(obj, field)
    if not value:
        return [required(field)]
    if len(value) > SHORT_LIMIT:
        return [bad_value(field, value, f"can have at most {SHORT_LIMIT} characters")]
    return []


def _series_causes(series: Any) -> list[Cause]:
    if series is None:
        return []
    if not isinstance(series, dict):
        return [bad_value("series", series, "must be an object")]
    causes = []
    count = series.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        causes.append(bad_value("series.count", count, "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(required("series.lastObservedTime"))
    return causes


class EventStrategy(Strategy):
    def causes(self, obj: JsonObj) -> list[Cause]:
        causes: list[Cause] = []
        if not obj.get("eventTime"):
            causes.append(required("eventTime"))
        if obj.get("type") not in TYPES:
            causes.append(unsupported("type", obj.get("type"), TYPES))
        controller = _text(obj, "reportingController")
        if not controller:
            causes.append(required("reportingController"))
        else:
            causes += qualified_name_causes("reportingController", controller)
        causes += _short_causes(obj, "reportingInstance")
        causes += _short_causes(obj, "action")
        causes += _short_causes(obj, "reason")
        if len(_text(obj, "note").encode()) > NOTE_LIMIT:
            causes.append(bad_value("note", "", f"can have at most {NOTE_LIMIT} bytes"))
        causes += _series_causes(obj.get("series"))
        regarding = obj.get("regarding")
        namespace = regarding.get("namespace") if isinstance(regarding, dict) else None
        if namespace and namespace != meta(obj).get("namespace"):
            causes.append(
                bad_value("regarding.namespace", namespace, "does not match event.namespace")
            )
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        return [immutable(f, new.get(f)) for f in IDENTITY if new.get(f) != old.get(f)]


# events.k8s.io/v1 field → core/v1 field, as kube-apiserver converts them.
_CORE_NAMES = {
    "regarding": "involvedObject",
    "related": "related",
    "note": "message",
    "reason": "reason",
    "type": "type",
    "action": "action",
    "eventTime": "eventTime",
    "series": "series",
    "reportingController": "reportingComponent",
    "reportingInstance": "reportingInstance",
    "deprecatedSource": "source",
    "deprecatedCount": "count",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
}


def core_view(event: JsonObj) -> JsonObj:
    """The core/v1 Event a stored events.k8s.io/v1 Event is served as."""
    out: JsonObj = {"apiVersion": "v1", "kind": "Event", "metadata": dict(meta(event))}
    for field, core in _CORE_NAMES.items():
        if field in event:
            out[core] = event[field]
    if "source" not in out and event.get("reportingController"):
        out["source"] = {"component": event["reportingController"]}
    return out
