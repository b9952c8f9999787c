"""Kueue's `Configuration` (config.kueue.x-k8s.io v1beta1 and v1beta2) to `KueueConfig`.

Only what muster's decisions read: fair sharing, waitForPodsReady and the PartialAdmission
feature gate. Defaults are Kueue's for the version written.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from muster.api.errors import ObjectErrors
from muster.api.model import (
    AdmissionFairSharingConfig,
    FairSharingConfig,
    KueueConfig,
    RequeuingStrategy,
    WaitForPodsReadyConfig,
)
from muster.api.raw import (
    RawAdmissionFairSharing,
    RawConfiguration,
    RawFairSharingConfig,
    RawWaitForPodsReady,
)

CONFIG_V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
CONFIG_V1BETA2 = "config.kueue.x-k8s.io/v1beta2"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}


_LONGEST = Fraction(2**63 - 1, 10**9)  # Go's time.Duration: int64 nanoseconds
_MAX_CHARS = 64  # far past any duration written by hand: the digits stay cheap to read


def parse_duration(text: str) -> float:
    """Return a Go duration string ("5m", "300s", "1h30m", "1.5h", "0") in seconds.

    Raises ValueError with the user's message for anything else.
    """
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    parts = list(_DURATION_PART.finditer(body))
    if not body or len(body) > _MAX_CHARS or "".join(p.group(0) for p in parts) != body:
        shown = text if len(text) <= _MAX_CHARS else text[:_MAX_CHARS] + "..."
        raise ValueError(f'expected a duration such as 5m, 300s or 1h30m, got "{shown}"')
    seconds = sum((Fraction(p.group(1)) * _UNIT_SECONDS[p.group(2)] for p in parts), Fraction(0))
    if seconds > _LONGEST:  # Go's time.ParseDuration refuses it too (int64 nanoseconds)
        raise ValueError(f'must be at most 2562047h47m16.854775807s, got "{text}"')
    return float(-seconds if text.startswith("-") else seconds)


def kueue_config_from_raw(raw: RawConfiguration, errs: ObjectErrors) -> KueueConfig:
    """Return the settings muster reads, with Kueue's defaults for `raw.api_version`.

    v1beta1 switches fairSharing and waitForPodsReady on with `enable: true`; v1beta2 has no
    `enable` field and switches a feature on by its presence (an explicit `enable` is honoured
    in both). PartialAdmission defaults to on, as in Kueue.
    """
    v1beta1 = raw.api_version == CONFIG_V1BETA1
    return KueueConfig(
        fair_sharing=_fair_sharing(raw.fair_sharing, v1beta1=v1beta1),
        wait_for_pods_ready=_wait_for_pods_ready(raw.wait_for_pods_ready, errs, v1beta1=v1beta1),
        partial_admission=raw.feature_gates.get("PartialAdmission", True),
        granular_pending_reasons=raw.feature_gates.get("UnadmittedWorkloadsObservability", True),
        admission_fair_sharing=(
            _admission_fair_sharing(raw.admission_fair_sharing, errs)
            if raw.feature_gates.get("AdmissionFairSharing", True)
            else None
        ),
        reclaimable_pods=raw.feature_gates.get("ReclaimablePods", True),
    )


def _admission_fair_sharing(
    raw: RawAdmissionFairSharing | None, errs: ObjectErrors
) -> AdmissionFairSharingConfig | None:
    """admissionFairSharing as Kueue validates and defaults it: usageHalfLifeTime >= 0 (unset:
    0), usageSamplingInterval > 0 (unset: 5m), every resource weight >= 0."""
    if raw is None:
        return None
    where = "admissionFairSharing"
    half_life_s = _duration(raw.usage_half_life_time, f"{where}.usageHalfLifeTime", errs)
    sampling_s = _duration(raw.usage_sampling_interval, f"{where}.usageSamplingInterval", errs)
    if sampling_s is not None and sampling_s <= 0:
        errs.add(
            f"{where}.usageSamplingInterval", f'must be > 0, got "{raw.usage_sampling_interval}"'
        )
    for name, weight in sorted(raw.resource_weights.items()):
        if not 0 <= weight < math.inf:  # NaN and infinity too: usage must stay comparable
            problem = f"must be a finite number >= 0, got {weight:g}"
            errs.add(f"{where}.resourceWeights.{name}", problem)
    return AdmissionFairSharingConfig(
        usage_half_life_s=half_life_s or 0.0,
        usage_sampling_interval_s=sampling_s
        or AdmissionFairSharingConfig().usage_sampling_interval_s,
        resource_weights=tuple(sorted(raw.resource_weights.items())),
    )


def _fair_sharing(raw: RawFairSharingConfig | None, *, v1beta1: bool) -> FairSharingConfig:
    if raw is None:
        return FairSharingConfig()
    enable = raw.enable if raw.enable is not None else not v1beta1
    if raw.preemption_strategies is None:
        return FairSharingConfig(enable=enable)
    return FairSharingConfig(enable=enable, preemption_strategies=tuple(raw.preemption_strategies))


def _wait_for_pods_ready(
    raw: RawWaitForPodsReady | None, errs: ObjectErrors, *, v1beta1: bool
) -> WaitForPodsReadyConfig:
    """Return waitForPodsReady with defaults: timeout 5m, no recoveryTimeout, backoff base 60s,
    max 3600s.

    v1beta1 defaults blockAdmission to the value of `enable`; v1beta2 defaults it to false.
    """
    # Differs from Kueue: the newest Kueue enables waitForPodsReady by default (timeout 30m);
    # muster follows the releases that enable it only when configured, with a 5m timeout.
    if raw is None:
        return WaitForPodsReadyConfig()
    enable = raw.enable if raw.enable is not None else not v1beta1
    timeout_s = _duration(raw.timeout, "waitForPodsReady.timeout", errs)
    if timeout_s is None:
        timeout_s = WaitForPodsReadyConfig().timeout_seconds
    # Differs from Kueue: newer Kueue defaults recoveryTimeout to the timeout; muster follows
    # the releases that introduced it, where unset means readiness lost is waited for forever.
    recovery_s = _duration(raw.recovery_timeout, "waitForPodsReady.recoveryTimeout", errs)
    block = raw.block_admission
    if block is None:
        block = enable if v1beta1 else False
    return WaitForPodsReadyConfig(
        enable=enable,
        timeout_seconds=timeout_s,
        recovery_timeout_seconds=recovery_s or None,  # "0s" turns it off, as in Kueue
        block_admission=block,
        requeuing_strategy=_requeuing(raw),
    )


def _duration(text: str | None, path: str, errs: ObjectErrors) -> float | None:
    """The field at `path`, a Go duration, in seconds (None when unset or invalid)."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        errs.add(path, str(exc))
        return None
    if seconds < 0:
        errs.add(path, f'must be >= 0, got "{text}"')
        return None
    return seconds


def _requeuing(raw: RawWaitForPodsReady) -> RequeuingStrategy:
    strategy = raw.requeuing_strategy
    default = RequeuingStrategy()
    if strategy is None:
        return default
    return RequeuingStrategy(
        timestamp=strategy.timestamp or default.timestamp,
        backoff_base_seconds=(
            strategy.backoff_base_seconds
            if strategy.backoff_base_seconds is not None
            else default.backoff_base_seconds
        ),
        backoff_limit_count=strategy.backoff_limit_count,
        backoff_max_seconds=(
            strategy.backoff_max_seconds
            if strategy.backoff_max_seconds is not None
            else default.backoff_max_seconds
        ),
    )
