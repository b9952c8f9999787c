"""The connection options every client command shares, given hostile or careless values:
exit 2 with a line naming the option, before any call (no gateway is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int | str | None, str]:
    """`muster queues ARGV`'s exit status and stderr (it exits before calling anything)."""
    with pytest.raises(SystemExit) as exit_:
        main(["queues", "--gateway", "127.0.0.1:1", "--timeout", "1", *argv])
    return exit_.value.code, capsys.readouterr().err


def test_a_token_file_that_never_ends_is_refused_not_read_to_memory_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "--token-file", "/dev/zero") == (
        2,
        "muster: --token-file /dev/zero: larger than 1 MiB: not read\n",
    )


@pytest.mark.parametrize("token", ["two\nlines", "with space", "caf\u00e9"])
def test_a_token_no_header_can_carry_names_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, token: str
) -> None:
    # gRPC answered "INTERNAL: Invalid metadata" for these, naming neither option nor why.
    path = tmp_path / "token"
    path.write_text(token + "\n")
    problem = "a token is one line of printable ASCII, without spaces\n"

    assert run(capsys, "--token-file", str(path)) == (2, f"muster: --token-file {path}: {problem}")
    assert run(capsys, "--token", token) == (2, f"muster: --token: {problem}")


def test_a_binary_token_file_is_refused_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe\x00\x01")

    status, err = run(capsys, "--token-file", str(path))

    assert (status, err.startswith(f"muster: --token-file {path}: a token is")) == (2, True)


def test_a_gateway_port_past_65535_is_refused_not_wrapped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "--gateway", "127.0.0.1:99999") == (
        2,
        "muster: --gateway 127.0.0.1:99999: the port must be 1 to 65535, got 99999\n",
    )
