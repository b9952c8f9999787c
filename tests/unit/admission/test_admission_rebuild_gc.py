"""A rebuild collects no garbage while it builds, then freezes what it built (and thaws what an
earlier rebuild froze, so that a state dropped by a Reown can still be collected)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from muster.admission.rebuild import rebuilding


class Cycle:
    """An object only a cyclic collection frees."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session collects as usual


def frozen(obj: object) -> bool:
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def test_a_rebuild_collects_nothing_while_it_builds_then_freezes_what_it_built() -> None:
    with rebuilding():
        assert not gc.isenabled()
        dropped = weakref.ref(Cycle())  # garbage at once: only a collection frees it
        built = Cycle()

    assert gc.isenabled()
    assert dropped() is None  # collected before the freeze, not frozen
    assert frozen(built)


def test_a_second_rebuild_frees_what_the_first_built_and_was_dropped_since() -> None:
    with rebuilding():
        built = Cycle()
    first = weakref.ref(built)
    del built  # a Reown drops the first state

    with rebuilding():
        pass

    assert first() is None


def failed_rebuild(built: Cycle) -> None:
    with rebuilding():
        built.me = Cycle()  # what it had built so far
        raise RuntimeError("the stream went away")


def test_a_rebuild_that_fails_collects_again_and_freezes_nothing() -> None:
    built = Cycle()
    with pytest.raises(RuntimeError):
        failed_rebuild(built)

    assert gc.isenabled()
    assert not frozen(built.me)
