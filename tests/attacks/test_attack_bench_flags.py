"""`muster bench chaos`, `soak`, `e2e` and `kueue-live` given counts that cannot run: exit 2 at
once, naming the flag, before any service starts. Before, `chaos --shards 0` started a whole
stack with no admission replica and waited out its timeout (minutes) for admissions that could
never come; negative --gangs or --big-pods were taken silently."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from muster.bench import chaos, e2e, kueue_live, soak
from muster.cli.main import main as muster


def never_run(**_: Any) -> NoReturn:
    raise AssertionError("the benchmark ran")


@pytest.fixture(autouse=True)
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (chaos, e2e, kueue_live, soak):
        monkeypatch.setattr(module, "run", never_run)


@pytest.mark.parametrize(
    ("section", "flag", "value"),
    [
        ("chaos", "--shards", "0"),
        ("chaos", "--shards", "-2"),
        ("chaos", "--workloads", "0"),
        ("chaos", "--workloads", "-5"),
        ("chaos", "--gangs", "-1"),
        ("chaos", "--big-pods", "-1"),
        ("soak", "--waves", "0"),
        ("e2e", "--shards", "0"),
        ("kueue-live", "--shards", "0"),
    ],
)
def test_a_count_that_cannot_run_exits_2_naming_the_flag(
    section: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        muster(["bench", section, flag, value])

    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert f"argument {flag}: must be >= " in last
    assert last.endswith(repr(value))


def test_a_count_that_is_not_a_number_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        muster(["bench", "chaos", "--gangs", "many"])

    assert exit_.value.code == 2
    assert "argument --gangs: not a whole number: 'many'" in capsys.readouterr().err
