"""How many times each admission check of a workload said Retry, as Kueue counts it in
status.admissionChecks[].retryCount. Pure.

Kueue counts at an eviction only (pkg/workload/evict `resetChecksOnEviction`): every check that
is not Pending goes back to Pending, a Retry counting one retry more, a Ready or Rejected
starting its count over; a Pending one keeps its count. A controller's answer leaves the count
as it is (`SetAdmissionCheckState`), and a check a reservation adds starts at none. Kueue's
ProvisioningRequest controller reads it to name its next request and to back off
(`UpdateAdmissionCheckRequeueState`); its scheduler and workload controller do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# The counts of every workload whose checks never said Retry before an eviction: one shared
# map, never written (a record's counts are replaced).
NO_RETRIES: Final[Mapping[str, int]] = {}


def retries_after_eviction(
    retries: Mapping[str, int], states: Mapping[str, str]
) -> Mapping[str, int]:
    """`retries` once an eviction resets checks in `states` (check → its state then)."""
    if not retries and "Retry" not in states.values():
        return NO_RETRIES
    out = dict(retries)
    for check, state in states.items():
        if state == "Retry":
            out[check] = out.get(check, 0) + 1
        elif state != "Pending":
            out.pop(check, None)
    return out or NO_RETRIES
