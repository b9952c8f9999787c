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
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

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


def tied_to_launcher(argv: Sequence[str]) -> list[str]:
    """`argv` started so that it ends with this process: through this module (`main`), which
    asks for the notice and then becomes `argv` (same process, same parent); `argv` itself
    where the kernel offers no such notice (the child then outlives a killed launcher).

    Not a `preexec_fn`: that makes subprocess fork without exec'ing at once, and gRPC's fork
    handlers then restart its threads in the child, where closing the inherited descriptors
    before the exec crashed it now and then (SIGABRT/SIGSEGV before the exec, in `muster run`'s
    and the chaos bench's restarts). Without one, subprocess uses vfork and runs no handler.
    The notice comes when the thread that started the child ends, so children are started
    from the event loop's thread, which lives as long as the launcher."""
    if _PRCTL is None:
        return list(argv)
    return [sys.executable, "-m", __name__, str(os.getpid()), *argv]


def main(args: Sequence[str]) -> NoReturn:
    """`python -m muster.launcher.lifeline LAUNCHER_PID COMMAND...`: SIGTERM on the
    launcher's end, then exec COMMAND."""
    launcher, *command = args
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(launcher):  # gone before the prctl: no notice will come
        os._exit(1)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
