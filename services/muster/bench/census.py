"""What a service process keeps, counted from inside it: `muster bench soak`'s probe.

On SIGUSR2, the process walks its objects (`gc.get_objects`) and writes, as one JSON file in
the census directory, its RSS and the summed length of every large container (dict, set, list,
deque) held by an attribute of a muster object or by a global of a muster module, keyed
`module.Class.attribute`. Summed over instances: a per-workload map split over shards or
clusters still counts as one.

No service knows about it: the soak starts the services with the census directory in
CENSUS_DIR_ENV and a `sitecustomize` module (`SITECUSTOMIZE`) on their PYTHONPATH that calls
`install`; without the variable, `install` does nothing. A signal rather than an RPC, so every
process, whatever it serves, answers the same way, and the walk reads the maps as they are
(no service exports a count it was not written to export).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType, ModuleType
from typing import Final

CENSUS_DIR_ENV: Final = "MUSTER_BENCH_CENSUS_DIR"
MIN_SIZE_ENV: Final = "MUSTER_BENCH_CENSUS_MIN"
SIGNAL: Final = signal.SIGUSR2
SITECUSTOMIZE: Final = "from muster.bench.census import install\n\ninstall()\n"
_CONTAINERS: Final = (dict, set, frozenset, list, collections.deque)
_OURS: Final = ("muster.",)


def rss_kb(pid: int | str = "self") -> int:
    """Resident set size of process `pid` in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def _owner(obj: object) -> str | None:
    """`module.Class` of a muster object; None for anything else (and for classes, modules)."""
    kind = type(obj)
    if isinstance(obj, type | ModuleType):
        return None
    module = getattr(kind, "__module__", None)
    if not isinstance(module, str) or not module.startswith(_OURS):
        return None
    return f"{module}.{kind.__qualname__}"


def _attributes(obj: object) -> dict[str, object]:
    found = dict(getattr(obj, "__dict__", None) or {})
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()) or ():
            if isinstance(name, str) and name not in found and hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def containers(*, min_size: int) -> dict[str, int]:
    """`module.Class.attribute` (or `module.global`) -> summed length of its containers of at
    least `min_size` items."""
    sizes: dict[str, int] = {}

    def note(where: str, value: object) -> None:
        if isinstance(value, _CONTAINERS) and len(value) >= min_size:
            sizes[where] = sizes.get(where, 0) + len(value)

    for obj in gc.get_objects():
        owner = _owner(obj)
        if owner is not None:
            for name, value in _attributes(obj).items():
                note(f"{owner}.{name}", value)
    for name, module in list(sys.modules.items()):
        if name.startswith(_OURS) or name == "muster":
            for attr, value in list(vars(module).items()):
                if not attr.startswith("__"):  # __builtins__, __all__: the module's own
                    note(f"{name}.{attr}", value)
    return sizes


def write(directory: Path, *, min_size: int) -> Path:
    """This process's census as `<pid>-<n>.json` (n counts up); written whole, then renamed."""
    pid = os.getpid()
    n = len(list(directory.glob(f"{pid}-*.json"))) + 1
    body = {"pid": pid, "rss_kb": rss_kb(), "maps": containers(min_size=min_size)}
    final = directory / f"{pid}-{n}.json"
    partial = final.with_suffix(".part")
    partial.write_text(json.dumps(body))
    partial.rename(final)
    return final


def install() -> None:
    """Answer SIGUSR2 with a census when CENSUS_DIR_ENV names a directory; else nothing."""
    where = os.environ.get(CENSUS_DIR_ENV)
    if not where:
        return
    directory, min_size = Path(where), int(os.environ.get(MIN_SIZE_ENV, "100"))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        try:
            write(directory, min_size=min_size)
        except Exception as err:  # a probe: never take the service down
            print(f"muster bench census: {err!r}", file=sys.stderr)

    signal.signal(SIGNAL, on_signal)
