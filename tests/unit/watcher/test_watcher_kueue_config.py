"""The watcher's `--kueue-config`: what the statuses it writes take from Kueue's Configuration."""

from __future__ import annotations

from pathlib import Path

from muster.watcher.__main__ import _kueue_config


def test_admission_fair_sharing_is_read_for_local_queue_statuses(tmp_path: Path) -> None:
    path = tmp_path / "kueue.yaml"
    path.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "admissionFairSharing: {usageHalfLifeTime: 10m}\n"
    )
    fair = _kueue_config(str(path)).admission_fair_sharing
    assert fair is not None
    assert fair.usage_half_life_s == 600.0


def test_without_a_file_kueue_defaults_hold(tmp_path: Path) -> None:
    kueue = _kueue_config(None)
    assert kueue.admission_fair_sharing is None
    assert kueue.granular_pending_reasons
    assert not kueue.wait_for_pods_ready.enable
