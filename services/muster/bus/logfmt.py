"""Structured logging for services: one logfmt line per record on stderr.

`log.info("admitted", extra={"workload": key})` prints
`ts=2025-01-02T03:04:05.678Z level=info service=admission logger=muster.admission msg=admitted
workload=team-a/train-1`; every `extra` field becomes a `key=value` pair. Tracebacks are kept on
the same line (newlines escaped), so a record is always one line. Credentials are masked
(`muster.bus.redact`): whatever a message or a library's exception says, no NATS password,
token or URL user reaches the log.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Final

from muster.bus.redact import redact

# Attributes every LogRecord has: anything else on a record came from `extra`.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(c: str) -> str:
    """`c` as a quoted value shows it: control and format characters by their code (a NUL made
    grep take the whole log for binary, an ESC drives the terminal, U+202E reverses text)."""
    if c in _ESCAPES:
        return _ESCAPES[c]
    if c.isprintable():
        return c
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _value(value: object) -> str:
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' "=\\'):
        return text
    return '"' + "".join(map(_escaped, text)) + '"'


class LogfmtFormatter(logging.Formatter):
    """Formats a record as one logfmt line, naming the service it came from."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        pairs = [
            ("ts", ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"),
            ("level", record.levelname.lower()),
            ("service", self.service),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        pairs += [(k, v) for k, v in vars(record).items() if k not in _STANDARD and v != ""]
        if record.exc_info:
            pairs.append(("exc", self.formatException(record.exc_info)))
        elif record.exc_text:
            pairs.append(("exc", record.exc_text))
        return redact(" ".join(f"{k}={_value(v)}" for k, v in pairs))


def setup_logging(service: str, level: str = "INFO") -> None:
    """Send every log record of this process to stderr as logfmt, at `level` and above."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
