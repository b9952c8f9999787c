"""The admission check controllers muster runs, by the name the watcher's
`--check-controllers` flag takes. A new controller is one module and one entry here."""

from __future__ import annotations

from collections.abc import Callable

from muster.checks.framework import CheckController
from muster.checks.provisioning import ProvisioningController

# name → how to make it for a kueue.x-k8s.io version
CONTROLLERS: dict[str, Callable[[str], CheckController]] = {
    "provisioning-request": lambda version: ProvisioningController(kueue_version=version),
}
NONE = "none"


def controller_names(text: str) -> tuple[str, ...]:
    """The names in a comma-separated `--check-controllers` value ("none": no controller);
    ValueError naming the flag and the names it knows for an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == (NONE,):
        return ()
    unknown = [n for n in names if n not in CONTROLLERS]
    if unknown or not names:
        known = ", ".join([*CONTROLLERS, NONE])
        shown = ", ".join(unknown) or repr(text)
        raise ValueError(f"--check-controllers: unknown controller {shown}; one of {known}")
    return names


def make(names: tuple[str, ...], *, kueue_version: str) -> list[CheckController]:
    return [CONTROLLERS[name](kueue_version) for name in names]
