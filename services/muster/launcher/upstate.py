"""Where `muster up` keeps its stack's state, and how `down` and `status` read it.

One directory per user (`--state-dir`, `MUSTER_STATE_DIR`, else `$XDG_STATE_HOME/muster`,
else `~/.local/state/muster`), never inside a checkout: `stack.json` (the supervisor's pid,
every process it started with its pid and start time, the addresses, its restarts and last
exit), `logs/` (one per start: `<name>.log`, `<name>.1.log`, ...) and the NATS
server's JetStream data and configuration (readable by this user only).

A pid is trusted only with the start time recorded beside it (`/proc/<pid>/stat`), so a stale
file after a crash or a reboot never names someone else's process; and only while it is this
user's, and the file too. A state directory another user owns or may write (a shared
MUSTER_STATE_DIR such as /tmp/muster) is not read: whoever can write `stack.json` could name
this user's processes for `muster down` to stop, or a gateway of theirs for client commands
to send this user's token to.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
from pathlib import Path
from typing import Final

import msgspec

STATE_FILE: Final = "stack.json"
# Metrics: the first service's port; each next one in start order takes the next port.
DEFAULT_PORTS: Final = {"gateway": 50051, "nats": 4222, "dashboard": 8080, "metrics": 9400}


def state_dir(explicit: str | None = None) -> Path:
    """The state directory: `explicit`, `MUSTER_STATE_DIR`, XDG's state home, or ~/.local/state."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("MUSTER_STATE_DIR"):
        return Path(os.environ["MUSTER_STATE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "muster"


class Process(msgspec.Struct, kw_only=True):
    """One process the supervisor started."""

    name: str
    pid: int
    started: int  # /proc/<pid>/stat start time (clock ticks since boot): tells pid reuse apart
    address: str = ""  # gRPC health (services), nats://, http:// (dashboard)
    kind: str = "service"  # service, nats, dashboard
    metrics: str = ""  # host:port of its Prometheus /metrics (services)
    # Kept across its restarts (`muster.launcher.upkeep`), as a Pod's restartCount and
    # lastState.terminated: how many times it was started again, its last exit.
    restarts: int = 0
    last_exit: int | None = None  # exit status; -N: killed by signal N
    last_exit_why: str = ""  # why, when the status does not say: "not ready in 120s"
    last_exit_at: float = 0.0  # wall clock, seconds since the epoch; 0: it never exited
    back_off_until: float = 0.0  # exited, to be started again then (wall clock); 0: not waiting


class StackState(msgspec.Struct, kw_only=True):
    """What `stack.json` holds."""

    supervisor: Process
    ready: bool = False
    error: str = ""  # why the start failed, for the `muster up` that waits
    gateway: str = ""
    dashboard: str = ""
    nats: str = ""
    cluster: str = "local"
    api_server: str = ""  # the Kubernetes API server served (MUSTER_CLUSTER_BACKEND=kube); "": sim
    nodes: list[str] = msgspec.field(default_factory=list)
    speed: float = 1.0
    log_dir: str = ""
    processes: list[Process] = msgspec.field(default_factory=list)


def read_state(directory: Path) -> StackState | None:
    """The recorded state; None when there is none, it is unreadable (a torn write) or
    another user could have written it (`distrusted`)."""
    if distrusted(directory):
        return None
    try:
        return msgspec.json.decode((directory / STATE_FILE).read_bytes(), type=StackState)
    except (OSError, msgspec.DecodeError):
        return None


def distrusted(directory: Path) -> str:
    """Why the state directory `directory`, or its state file, may hold another user's
    writing ("" when neither does, or neither exists): its owner, or its mode. The file may be
    group-writable (an older muster wrote it so under umask 002, the group the user's own);
    the directory may not (`muster up` makes it 0700: others made one that is)."""
    for path, writers in (
        (directory, stat.S_IWGRP | stat.S_IWOTH),
        (directory / STATE_FILE, stat.S_IWOTH),
    ):
        try:
            found = path.stat()  # a symbolic link's target: what would be read or written
        except OSError:
            continue
        if found.st_uid != os.getuid():
            return f"{path} belongs to uid {found.st_uid}, not to this user ({os.getuid()})"
        if found.st_mode & writers:
            return f"{path} may be written by others (mode {stat.filemode(found.st_mode)})"
    return ""


def recorded_gateway(directory: Path) -> tuple[str, str]:
    """(the gateway address of the stack `muster up` started in `directory`, why the state
    file there is ignored): where client commands call when no --gateway is given. ("", "")
    when no stack is up there; ("", one line) when the file is left from a stack whose
    supervisor is gone: its address may be anyone's now."""
    if why := distrusted(directory):
        return "", f"ignoring {directory}: {why}"
    state = read_state(directory)
    if state is None or not state.ready:
        return "", ""
    if not alive(state.supervisor):
        return "", (
            f"ignoring {directory / STATE_FILE}: its supervisor (pid {state.supervisor.pid}) "
            "is not running; `muster down` clears it"
        )
    return state.gateway, ""


def write_state(directory: Path, state: StackState) -> None:
    """Replace the state file at once (a reader never sees half of it)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = directory / f".{STATE_FILE}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # one left by a killed writer of this pid: opened anew, this user's only
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
        file.write(msgspec.json.encode(state))
    tmp.replace(directory / STATE_FILE)


def remove_state(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (directory / STATE_FILE).unlink()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it does not exist."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (2nd field) is in parentheses and may hold spaces: split after it.
    fields = line.rsplit(")", 1)[1].split()
    return int(fields[19])  # field 22 of the whole line


def _ours(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}").stat().st_uid == os.getuid()
    except OSError:
        return False


def process(name: str, pid: int, *, address: str = "", kind: str = "service") -> Process:
    return Process(name=name, pid=pid, started=start_time(pid) or 0, address=address, kind=kind)


def alive(p: Process) -> bool:
    """Whether the recorded process still runs (the same one: same pid, same start time, and
    this user's: `muster up` never starts another user's)."""
    found = start_time(p.pid)
    if found is None or found != p.started or not _ours(p.pid):
        return False
    with contextlib.suppress(FileNotFoundError):
        if Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False  # a zombie: exited, waiting for its parent
    return True


def leftovers(state: StackState) -> list[Process]:
    """What still runs of a stack whose supervisor is gone (or is to be stopped): each process
    recorded (the same one: pid and start time) and every other of the supervisor's process
    group, where `muster up` keeps its children, so one started an instant before it was
    recorded is found too."""
    found = [p for p in state.processes if alive(p)]
    known = {p.pid for p in found}
    found += [process(f"pid {pid}", pid) for pid in group_of(state.supervisor) if pid not in known]
    return found


def group_of(leader: Process) -> list[int]:
    """The live processes of `leader`'s process group but itself; [] when its pid is another
    process's now. Sound after `leader` died: the kernel gives a pid out again only once no
    process group bears it, so a reused pid means our group had emptied."""
    now = start_time(leader.pid)
    if now is not None and now != leader.started:
        return []
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == leader.pid:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[2] == str(leader.pid) and fields[0] != "Z" and _ours(int(entry.name)):
            members.append(int(entry.name))  # fields: state, ppid, pgrp
    return members


def terminate(processes: list[Process], *, grace_s: float = 10.0) -> list[str]:
    """SIGTERM each live one, SIGKILL what is left after `grace_s`; the names stopped."""
    live = [p for p in processes if alive(p)]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in live) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in live:
        if alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    return [p.name for p in live]


def port_in_use(port: int) -> bool:
    """Whether something listens on loopback `port` already."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
