"""Service flags given values that parse as floats but mean nothing useful (inf, nan, 0,
negative, a heartbeat a millisecond): `muster service ...` exits 2 with a line naming the flag,
before it connects to anything. Before, inf gave a gang-permit that never beat (admission takes
its cluster for lost) or never sent an unanswered eviction again, 1e-9 one that beat as fast as
its loop turned (each beat a NATS write), and --snapshot-seconds nan an admission that silently
wrote no snapshot."""

from __future__ import annotations

import pytest

from muster.cli.main import main as muster


@pytest.mark.parametrize(
    ("service", "flag", "value"),
    [
        ("gangpermit", "--evict-resend-seconds", "inf"),
        ("gangpermit", "--evict-resend-seconds", "1e999"),
        ("gangpermit", "--evict-resend-seconds", "nan"),
        ("gangpermit", "--evict-resend-seconds", "-1"),
        ("gangpermit", "--heartbeat-seconds", "inf"),
        ("gangpermit", "--heartbeat-seconds", "nan"),
        ("gangpermit", "--heartbeat-seconds", "0.001"),  # a write to NATS a millisecond
        ("admission", "--round-stretch-most-seconds", "inf"),
        ("admission", "--round-stretch-most-seconds", "nan"),
        ("admission", "--round-stretch-most-seconds", "0"),
        ("admission", "--round-stretch-most-seconds", "1.5"),
        ("admission", "--snapshot-seconds", "nan"),
        ("admission", "--snapshot-seconds", "inf"),
    ],
)
def test_a_meaningless_number_exits_2_naming_the_flag(
    service: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        muster(["service", service, flag, value])

    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"muster service {service}: error: {flag}"), last
    assert value.lstrip("-").replace("1e999", "inf") in last
