"""`muster service <name> [flags]`: run one muster service as this process.

Each service lives in `muster.<package>.__main__` with `main(argv: list[str]) -> int`; the module
is imported only when its service is asked for, so one service never loads another's code.
"""

from __future__ import annotations

import importlib
import sys
from types import MappingProxyType
from typing import Final

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

SERVICES: Final = MappingProxyType(
    {
        "watcher": "muster.watcher.__main__",
        "admission": "muster.admission.__main__",
        "preemption": "muster.preemption.__main__",
        "gangpermit": "muster.gangpermit.__main__",
        "binder": "muster.binder.__main__",
        "gateway": "muster.gateway.__main__",
        "sim-cluster": "muster.cluster.sim.__main__",
        "dashboard": "muster.dashboard.__main__",
    }
)

USAGE = f"""usage: muster service NAME [flags]

Run one muster service as this process; `muster service NAME --help` lists its flags.

services: {", ".join(SERVICES)}"""


def main(argv: list[str]) -> int:
    """Run the service named by `argv[0]` with the rest of `argv`; its exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return EXIT_OK if argv else EXIT_USAGE
    name, rest = argv[0], argv[1:]
    module_name = SERVICES.get(name)
    if module_name is None:
        print(f"muster service: unknown service {name!r}\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the service exists but one of its own imports is missing: show that
        print(
            f"muster service: {name!r} is not available in this build (no module {module_name})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    status: int = module.main(rest)
    return status
