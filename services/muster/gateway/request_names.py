"""The names a request brings, checked before anything is looked up, as Kubernetes validates
a path before it reads: a name no object can have is INVALID_ARGUMENT naming the field, never
NOT_FOUND (which would send the caller looking for something that cannot exist). Used by
every RPC that takes a name: Visibility's queries and Clusters, Describe, Watch, and
Gateway.Stop, Resume and Delete."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from muster.api.multikueue import cluster_id_problem
from muster.api.names import NameCheck, dns1123_label_problem, dns1123_subdomain_problem
from muster.gateway.visibility import InvalidQueryError

NAMESPACE: Final[NameCheck] = dns1123_label_problem
OBJECT_NAME: Final[NameCheck] = dns1123_subdomain_problem  # ClusterQueue, LocalQueue, workload
CLUSTER_ID: Final[NameCheck] = cluster_id_problem
MAX_GANG_PARTS: Final = 3  # "<namespace>/<gang>" after a workload's namespace (docs/events.md)

Check = tuple[str, str, NameCheck]  # (field, value as given, why it names nothing)


def check_names(checks: Iterable[Check]) -> None:
    """InvalidQueryError "<field>: <problem>" for the first value that is given ("" is not)
    and names nothing by its check."""
    for field, value, problem_of in checks:
        if value and (problem := problem_of(value)) is not None:
            raise InvalidQueryError(f"{field}: {problem}")


def workload_name(field: str, name: str) -> list[Check]:
    """The checks of a workload's name, which may be a gang's key after its namespace
    ("<namespace>/<gang>", three parts at most); InvalidQueryError for more parts."""
    parts = name.split("/")
    if len(parts) > MAX_GANG_PARTS:
        raise InvalidQueryError(
            f"{field}: at most {MAX_GANG_PARTS} parts separated by '/', got {len(parts)}"
        )
    return [(field, part, OBJECT_NAME) for part in parts]
