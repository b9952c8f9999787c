"""Service logs: one logfmt line per record, with the service and the record's extra fields."""

from __future__ import annotations

import logging
import sys

import pytest

from muster.bus.logfmt import LogfmtFormatter

pytestmark = pytest.mark.timeout(10)


def record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("muster.admission", logging.WARNING, __file__, 1, msg, None, None)
    rec.__dict__.update(extra)
    return rec


def test_a_record_is_one_line_with_service_and_workload() -> None:
    line = LogfmtFormatter("admission").format(record("handler failed", workload="ns/a b"))
    assert "\n" not in line
    assert " level=warning service=admission logger=muster.admission " in line
    assert 'msg="handler failed" workload="ns/a b"' in line


def test_a_traceback_stays_on_the_same_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = LogfmtFormatter("binder").format(rec)
    assert "\n" not in line
    assert "ValueError: boom" in line
    assert line.startswith("ts=")
