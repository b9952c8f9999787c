"""`--name-claims` (or MUSTER_GATEWAY_NAME_CLAIMS) set to anything but kv, both or submitted:
the gateway exits 2 before it connects, naming the flag and the three values it takes. Before,
argparse showed only "invalid name_claims value: 'KV'", the choices left for --help to tell."""

from __future__ import annotations

import pytest

from muster.cli.main import main as muster


@pytest.mark.parametrize("value", ["KV", "", "kv ", "submitted,kv", "none", "sübmitted"])
def test_a_name_claims_value_not_one_of_three_exits_2_naming_them(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        muster(["service", "gateway", "--name-claims", value])

    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("muster service gateway: error: argument --name-claims:"), last
    assert "must be one of kv, both, submitted" in last, last
    assert repr(value) in last, last


def test_the_environment_variable_is_refused_the_same_way(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MUSTER_GATEWAY_NAME_CLAIMS", "bogus")

    with pytest.raises(SystemExit) as exit_:
        muster(["service", "gateway"])

    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert "--name-claims" in last, last
    assert "must be one of kv, both, submitted" in last, last
