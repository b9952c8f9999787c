"""Careless or hostile values a newcomer gives client commands: one line naming the flag or the
file and what is wrong, exit 2, before any call (no gateway is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli.main import main

NO_GATEWAY = ["--gateway", "127.0.0.1:1"]


@pytest.mark.parametrize("seconds", ["nan", "0", "-1", "1e400", "inf"])
def test_a_timeout_no_call_could_meet_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], seconds: str
) -> None:
    # It was sent as a deadline already past: "DEADLINE_EXCEEDED", as if the gateway were slow.
    with pytest.raises(SystemExit) as exit_:
        main(["queues", *NO_GATEWAY, "--timeout", seconds])

    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"argument --timeout: must be a finite number of seconds > 0: {seconds!r}\n"
    )


def test_a_sequence_past_what_a_stream_can_hold_is_refused_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["events", *NO_GATEWAY, "--from-sequence", "99999999999999999999999"]) == 2
    assert capsys.readouterr().err == (
        "muster: --from-sequence must be 0 to 18446744073709551615\n"
    )


def test_a_missing_manifest_is_said_as_simulate_says_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "jobs.yaml"

    assert main(["submit", *NO_GATEWAY, str(missing)]) == 2
    assert main(["submit", *NO_GATEWAY, str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"muster: {missing}: no such file",  # was "cannot read: [Errno 2] No such file or ..."
        f"muster: {tmp_path}: is a directory: name the YAML files in it ({tmp_path}/*.yaml)",
    ]
