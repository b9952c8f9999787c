"""`muster service admission` flags and their environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.admission.__main__ import configs


def test_shard_flags_and_lease_ttl() -> None:
    service, config = configs(
        ["--shard", "1", "--shards", "3", "--lease-ttl-seconds", "2", "--cluster", "east"]
    )
    assert (config.shard, config.shards, config.cluster) == (1, 3, "east")
    assert (config.source, config.durable) == ("admission/1", "admission-1")
    assert config.lease_ttl_s == 2.0
    assert config.lease_renew_s == pytest.approx(2 / 3)
    assert service.name == "admission"


def test_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_ADMISSION_SHARD", "2")
    monkeypatch.setenv("MUSTER_ADMISSION_SHARDS", "4")
    monkeypatch.setenv("MUSTER_ADMISSION_LEASE_TTL_SECONDS", "9")
    _, config = configs([])
    assert (config.shard, config.shards, config.lease_ttl_s, config.lease_renew_s) == (
        2,
        4,
        9.0,
        1.0,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--shard", "2", "--shards", "2"],
        ["--shards", "0"],
        ["--shard", "-1"],
        ["--lease-ttl-seconds", "0"],
    ],
)
def test_bad_shard_settings_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_kueue_config_file_sets_what_admission_decides_with(tmp_path: Path) -> None:
    path = tmp_path / "kueue.yaml"
    path.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
        "kind: Configuration\n"
        "fairSharing: {enable: true}\n"
        "featureGates: {PartialAdmission: false}\n"
    )

    _, config = configs(["--kueue-config", str(path)])

    assert config.kueue is not None
    assert config.kueue.fair_sharing.enable
    assert not config.kueue.partial_admission


def test_a_kueue_config_file_without_a_configuration_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "not-a-config.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"
    )

    with pytest.raises(SystemExit) as exit_:
        configs(["--kueue-config", str(path)])

    assert exit_.value.code == 2
    assert "must hold exactly one Configuration" in capsys.readouterr().err


def test_routing_policy_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert configs([])[1].routing_policy == "static"
    assert configs(["--routing-policy", "fastest"])[1].routing_policy == "fastest"
    monkeypatch.setenv("MUSTER_ROUTING_POLICY", "threshold")
    assert configs([])[1].routing_policy == "threshold"


def test_an_unknown_routing_policy_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(["--routing-policy", "quickest"])

    assert exit_.value.code == 2
    assert (
        "--routing-policy: must be one of static, threshold, fastest, got 'quickest'"
        in capsys.readouterr().err
    )


def test_a_kueue_config_that_never_ends_exits_2_instead_of_filling_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(["--kueue-config", "/dev/zero"])

    assert exit_.value.code == 2
    assert (
        "argument --kueue-config: /dev/zero: not a regular file" in capsys.readouterr().err
    )  # refused before a byte is read


def test_a_kueue_config_over_64_mib_exits_2_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = tmp_path / "kueue.yaml"
    with huge.open("wb") as out:
        out.truncate(65 << 20)  # sparse: no 65 MiB written

    with pytest.raises(SystemExit) as exit_:
        configs(["--kueue-config", str(huge)])

    assert exit_.value.code == 2
    assert f"{huge}: (file): larger than 64 MiB: not read" in capsys.readouterr().err
