"""The shape of a per-kind strategy (`strategies`, `gangs`): defaults, server-set fields on
create, validation, and which fields an update may change."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from muster.devtools.apiserver.errors import Cause
from muster.devtools.apiserver.objects import JsonObj


class FeatureGates(msgspec.Struct, frozen=True, kw_only=True):
    """The API server's feature gates the stand-in models; the defaults are Kubernetes v1.36's.

    `mutable_pod_resources_for_suspended_jobs` (KEP-5440, `MutablePodResourcesForSuspendedJobs`:
    alpha in v1.35, beta and on since v1.36): a suspended Job's container requests and limits
    may change. Off models an older cluster, which refuses such an update.
    """

    mutable_pod_resources_for_suspended_jobs: bool = True


V1_36 = FeatureGates()  # the defaults


def _no_limit_ranges(namespace: str) -> list[JsonObj]:
    return []


def _no_runtime_class(name: str) -> JsonObj | None:
    return None


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What strategies may read besides the object: PriorityClasses, a namespace's
    LimitRanges, RuntimeClasses and the time."""

    priority_class: Callable[[str], JsonObj | None]
    global_default_priority_class: Callable[[], JsonObj | None]
    now: str
    limit_ranges: Callable[[str], list[JsonObj]] = _no_limit_ranges
    runtime_class: Callable[[str], JsonObj | None] = _no_runtime_class


class Strategy:
    """The default: no defaults, no extra checks; metadata names are RFC 1123 subdomains."""

    name_check = "subdomain"

    def defaults(self, obj: JsonObj) -> None:
        """Fill fields the server defaults when missing (on create and on update)."""

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        """Server-set fields of a new object; may raise ApiError (admission)."""

    def causes(self, obj: JsonObj) -> list[Cause]:
        return []

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        return []

    def status_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        """Why a write of the status subresource is refused."""
        return []
