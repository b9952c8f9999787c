"""`--snapshot-seconds` (MUSTER_SNAPSHOT_SECONDS): how often admission stores a snapshot."""

from __future__ import annotations

import pytest

from muster.admission.__main__ import configs


def test_snapshots_are_written_every_five_minutes_unless_told_otherwise() -> None:
    assert configs([])[1].snapshot_s == 300.0
    assert configs(["--snapshot-seconds", "30"])[1].snapshot_s == 30.0
    assert configs(["--snapshot-seconds", "0"])[1].snapshot_s == 0.0  # off


def test_the_snapshot_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_SNAPSHOT_SECONDS", "12.5")
    assert configs([])[1].snapshot_s == 12.5
    assert configs(["--snapshot-seconds", "7"])[1].snapshot_s == 7.0  # the flag wins


def test_a_negative_snapshot_interval_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(["--snapshot-seconds", "-1"])
    assert exit_.value.code == 2
    assert "--snapshot-seconds must be a finite number >= 0" in capsys.readouterr().err
