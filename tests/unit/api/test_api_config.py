"""Kueue's Configuration, v1beta1 and v1beta2, with Kueue's defaults."""

from __future__ import annotations

import pytest

from muster.api import decode_yaml
from muster.api.config import parse_duration
from muster.api.model import FairSharingStrategy, KueueConfig


def config(body: str, *, version: str = "v1beta1") -> KueueConfig:
    objects, errors = decode_yaml(
        f"apiVersion: config.kueue.x-k8s.io/{version}\nkind: Configuration\n{body}"
    )
    assert [str(e) for e in errors] == []
    (cfg,) = objects
    assert isinstance(cfg, KueueConfig)
    return cfg


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_empty_configuration_gets_kueue_defaults(version: str) -> None:
    cfg = config("", version=version)
    assert cfg.fair_sharing.enable is False
    assert cfg.wait_for_pods_ready.enable is False
    assert cfg.wait_for_pods_ready.timeout_seconds == 300.0
    assert cfg.wait_for_pods_ready.requeuing_strategy.backoff_base_seconds == 60
    assert cfg.wait_for_pods_ready.requeuing_strategy.backoff_max_seconds == 3600
    assert cfg.wait_for_pods_ready.requeuing_strategy.backoff_limit_count is None
    assert cfg.partial_admission is True


def test_v1beta1_enables_features_with_enable_and_defaults_block_admission_to_it() -> None:
    cfg = config(
        "fairSharing:\n  enable: true\n  preemptionStrategies: [LessThanInitialShare]\n"
        "waitForPodsReady:\n  enable: true\n  timeout: 1h30m\n"
        "  requeuingStrategy: {timestamp: Creation, backoffLimitCount: 3, backoffBaseSeconds: 10}\n"
        "featureGates: {PartialAdmission: false}\n"
    )
    assert cfg.fair_sharing.enable is True
    assert cfg.fair_sharing.preemption_strategies == (FairSharingStrategy.LESS_THAN_INITIAL_SHARE,)
    wait = cfg.wait_for_pods_ready
    assert (wait.enable, wait.timeout_seconds, wait.block_admission) == (True, 5400.0, True)
    strategy = wait.requeuing_strategy
    assert (strategy.timestamp, strategy.backoff_limit_count, strategy.backoff_base_seconds) == (
        "Creation",
        3,
        10,
    )
    assert strategy.backoff_max_seconds == 3600
    assert cfg.partial_admission is False


def test_v1beta1_section_without_enable_stays_off() -> None:
    cfg = config("fairSharing: {}\nwaitForPodsReady: {timeout: 10m}\n")
    assert (cfg.fair_sharing.enable, cfg.wait_for_pods_ready.enable) == (False, False)
    assert cfg.wait_for_pods_ready.block_admission is False


def test_v1beta2_enables_features_by_presence() -> None:
    cfg = config("fairSharing: {}\nwaitForPodsReady: {timeout: 300s}\n", version="v1beta2")
    assert cfg.fair_sharing.enable is True
    assert cfg.wait_for_pods_ready.enable is True
    assert cfg.wait_for_pods_ready.block_admission is False
    assert cfg.wait_for_pods_ready.timeout_seconds == 300.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m", 300.0),
        ("300s", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("0", 0.0),
    ],
)
def test_parses_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_rejects_bad_duration_with_path() -> None:
    objects, errors = decode_yaml(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "waitForPodsReady: {enable: true, timeout: 5 minutes}\n"
    )
    assert objects == []
    assert [str(e) for e in errors] == [
        "Configuration: waitForPodsReady.timeout: expected a duration such as 5m, 300s or 1h30m,"
        ' got "5 minutes"'
    ]


def test_recovery_timeout_is_read_and_0s_turns_it_off() -> None:
    on = config("waitForPodsReady: {enable: true, recoveryTimeout: 2m}\n")
    assert on.wait_for_pods_ready.recovery_timeout_seconds == 120.0
    off = config("waitForPodsReady: {enable: true, recoveryTimeout: 0s}\n")
    assert off.wait_for_pods_ready.recovery_timeout_seconds is None
    unset = config("waitForPodsReady: {enable: true, timeout: 1m}\n")
    assert unset.wait_for_pods_ready.recovery_timeout_seconds is None


@pytest.mark.parametrize(
    ("timeout", "problem"),
    [
        ("999999999999999h", 'must be at most 2562047h47m16.854775807s, got "999999999999999h"'),
        ("9" * 5000 + "s", 'expected a duration such as 5m, 300s or 1h30m, got "' + "9" * 64),
    ],
)
def test_a_duration_go_cannot_hold_is_a_field_error(timeout: str, problem: str) -> None:
    # Go's ParseDuration refuses both (int64 nanoseconds); the first was read as 1.1e11 years,
    # the second ended in Python's own "Exceeds the limit (4300 digits)".
    _, errors = decode_yaml(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        f"waitForPodsReady: {{enable: true, recoveryTimeout: '{timeout}'}}\n"
    )
    (error,) = errors
    assert error.path == "waitForPodsReady.recoveryTimeout"
    assert error.problem.startswith(problem)
    assert parse_duration("2562047h47m16.854775807s") > 9.2e9  # the longest still reads


def test_admission_fair_sharing_is_read_with_kueue_defaults() -> None:
    cfg = config(
        "admissionFairSharing:\n  usageHalfLifeTime: 10m\n"
        "  resourceWeights: {memory: 0.5, cpu: 2}\n",
        version="v1beta2",
    )
    afs = cfg.admission_fair_sharing
    assert afs is not None
    assert (afs.usage_half_life_s, afs.usage_sampling_interval_s) == (600.0, 300.0)
    assert afs.resource_weights == (("cpu", 2.0), ("memory", 0.5))
    assert config("", version="v1beta2").admission_fair_sharing is None


def test_admission_fair_sharing_is_off_with_its_feature_gate() -> None:
    cfg = config(
        "admissionFairSharing: {usageHalfLifeTime: 10m}\n"
        "featureGates: {AdmissionFairSharing: false}\n",
        version="v1beta2",
    )
    assert cfg.admission_fair_sharing is None


def test_admission_fair_sharing_names_each_bad_field() -> None:
    objects, errors = decode_yaml(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "admissionFairSharing:\n  usageHalfLifeTime: -1m\n  usageSamplingInterval: 0s\n"
        "  resourceWeights: {cpu: -1, memory: .inf, nvidia.com/gpu: .nan}\n"
    )
    assert objects == []
    assert [str(e) for e in errors] == [
        'Configuration: admissionFairSharing.usageHalfLifeTime: must be >= 0, got "-1m"',
        'Configuration: admissionFairSharing.usageSamplingInterval: must be > 0, got "0s"',
        "Configuration: admissionFairSharing.resourceWeights.cpu: must be a finite number >= 0,"
        " got -1",
        "Configuration: admissionFairSharing.resourceWeights.memory: must be a finite number"
        " >= 0, got inf",
        "Configuration: admissionFairSharing.resourceWeights.nvidia.com/gpu: must be a finite"
        " number >= 0, got nan",
    ]
