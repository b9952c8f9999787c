"""`--round-gap-seconds`, `--round-fill`, `--round-stretch` and `--round-stretch-most-seconds`:
admission's bounded coalescing of rounds."""

from __future__ import annotations

import pytest

from muster.admission.__main__ import configs
from muster.admission.service import ROUND_STRETCH_MOST_S
from muster.bus.ordered import Gather


def test_a_lone_replicas_rounds_are_not_coalesced_unless_asked() -> None:
    config = configs([])[1]
    assert config.gather is None


def test_one_of_n_replicas_stretches_its_rounds_n_times_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    four = ["--shards", "4", "--shard", "2"]
    assert configs(four)[1].gather == Gather(
        gap_s=0.0, fill=8, stretch=4, stretch_most_s=ROUND_STRETCH_MOST_S
    )
    assert configs([*four, "--round-stretch", "off"])[1].gather is None
    monkeypatch.setenv("MUSTER_ADMISSION_ROUND_STRETCH", "off")
    assert configs([*four, "--round-gap-seconds", "0.01"])[1].gather == Gather(gap_s=0.01, fill=8)


def test_the_next_round_waits_for_the_gap_or_the_stretched_round_whichever_is_later() -> None:
    stretched = Gather(gap_s=0.0, fill=8, stretch=4, stretch_most_s=0.03)
    assert stretched.next_at(10.0, 0.002) == pytest.approx(10.008)
    assert stretched.next_at(10.0, 0.5) == pytest.approx(10.03)  # a long round: at most 30 ms
    assert stretched._replace(gap_s=0.05).next_at(10.0, 0.002) == pytest.approx(10.05)
    assert Gather(gap_s=0.02, fill=8).next_at(10.0, 0.5) == pytest.approx(10.02)


def test_a_round_as_long_as_under_load_is_stretched_n_times_up_to_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under load a round lasts 15-25 ms: one of four waits four of them, a tenth of a second
    # at most by default, rather than the 30 ms that cut the stretch short before.
    four = ["--shards", "4", "--shard", "1"]
    assert _gather(four).next_at(10.0, 0.02) == pytest.approx(10.08)
    assert _gather(four).next_at(10.0, 0.05) == pytest.approx(10.1)
    told = _gather([*four, "--round-stretch-most-seconds", "0.03"])
    assert told.next_at(10.0, 0.02) == pytest.approx(10.03)
    monkeypatch.setenv("MUSTER_ADMISSION_ROUND_STRETCH_MOST_SECONDS", "0.5")
    assert _gather(four).next_at(10.0, 0.2) == pytest.approx(10.5)


def _gather(argv: list[str]) -> Gather:
    gather = configs(argv)[1].gather
    assert gather is not None, argv
    return gather


def test_the_flags_and_their_variables_set_the_gap_and_the_fill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = configs(["--round-gap-seconds", "0.01", "--round-fill", "4"])[1]
    assert config.gather == Gather(gap_s=0.01, fill=4)
    monkeypatch.setenv("MUSTER_ADMISSION_ROUND_GAP_SECONDS", "0.02")
    assert configs([])[1].gather == Gather(gap_s=0.02, fill=8)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--round-gap-seconds", "-0.01"], "--round-gap-seconds must be in 0..0.05, got -0.01"),
        (["--round-gap-seconds", "1"], "--round-gap-seconds must be in 0..0.05, got 1"),
        (["--round-fill", "0"], "--round-fill must be >= 1, got 0"),
        (
            ["--round-stretch-most-seconds", "0"],
            "--round-stretch-most-seconds must be in (0, 1], got 0",
        ),
        (
            ["--round-stretch-most-seconds", "2"],
            "--round-stretch-most-seconds must be in (0, 1], got 2",
        ),
    ],
)
def test_a_gap_or_stretch_bound_out_of_bounds_or_an_empty_fill_is_refused(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        configs(argv)
    assert exited.value.code == 2
    assert problem in capsys.readouterr().err
