"""CPU time of other processes, read from /proc (Linux), for the launcher and the benches."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far (Linux: /proc/<pid>/stat).
    OSError when it is gone or there is no /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
