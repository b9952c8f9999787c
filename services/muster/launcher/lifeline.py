"""Children that end with the launcher that started them.

A SIGKILLed `muster run` or bench cannot stop what it started: its services ran on for ever,
reconnecting to a NATS that went with it (or that ran on too). On Linux the kernel itself sends
the child SIGTERM once the launcher is gone (`prctl(PR_SET_PDEATHSIG)`), which each service
takes as a normal stop and nats-server as its shutdown. `muster up`'s supervisor does not ask:
its services outlive a crashed supervisor so that `muster status` shows what died and `muster
down` stops the rest.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def _prctl() -> Callable[[int, int], int] | None:
    """libc's prctl, looked up once in the launcher (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_ulong)
    function.restype = ctypes.c_int
    return function


_PRCTL: Final = _prctl()


def ends_with_launcher() -> Callable[[], None] | None:
    """A `preexec_fn` for a child that must not outlive this process; None where the kernel
    offers no such notice (the child then outlives a killed launcher, as before).

    The notice comes when the thread that started the child ends, so children are started
    from the event loop's thread, which lives as long as the launcher."""
    prctl, launcher = _PRCTL, os.getpid()
    if prctl is None:
        return None

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:  # gone between the fork and the prctl: no notice will come
            os._exit(1)

    return in_child
