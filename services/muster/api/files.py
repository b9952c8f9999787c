"""Files read whole at start or on reload: regular files only, and bounded.

A pipe (FIFO) named as a file blocks `open` until something writes to it, and a device such as
/dev/zero never ends: either held a service at start for ever, or grew it until memory ran out.
So a file is opened without waiting, refused unless regular, and read only up to a bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NOT_REGULAR = "not a regular file (a directory, pipe, socket or device)"


def read_regular(path: str | Path, *, max_bytes: int) -> bytes:
    """The bytes of `path`; OSError when it cannot be opened, ValueError when it is not a
    regular file or is larger than `max_bytes` (neither is read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(NOT_REGULAR)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {_size(max_bytes)}: not read")
    return data


def special_file(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file (it exists and is not regular), or None: a regular
    file, or none at all (its reader says what is missing). Looks without opening it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else NOT_REGULAR


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"
