"""`--round-gap-seconds` and `--round-fill`: admission's bounded coalescing of rounds."""

from __future__ import annotations

import pytest

from muster.admission.__main__ import configs
from muster.bus.ordered import Gather


def test_rounds_are_not_coalesced_unless_asked() -> None:
    config = configs([])[1]
    assert config.gather is None


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
    ],
)
def test_a_gap_out_of_bounds_or_an_empty_fill_is_refused(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        configs(argv)
    assert exited.value.code == 2
    assert problem in capsys.readouterr().err
