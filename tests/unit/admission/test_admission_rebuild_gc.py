"""A rebuild runs no cyclic garbage collection while it builds, and collects as before after
it, whether it succeeded or failed."""

from __future__ import annotations

import gc

import pytest

from muster.admission.rebuild import rebuilding


def test_a_rebuild_collects_nothing_while_it_builds_and_as_before_after_it() -> None:
    with rebuilding():
        assert not gc.isenabled()
        with rebuilding():  # another replica's, in the same process
            assert not gc.isenabled()
        assert not gc.isenabled()

    assert gc.isenabled()


def failed_rebuild() -> None:
    with rebuilding():
        raise RuntimeError("the stream went away")


def test_a_rebuild_that_fails_collects_as_before() -> None:
    with pytest.raises(RuntimeError):
        failed_rebuild()

    assert gc.isenabled()
