"""NATS subject matching for tests that stand in for the server's filters. Pure."""

from __future__ import annotations


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether `subject` (or a KV key) matches `pattern`: `*` is one token, a final `>` one
    or more."""
    want, got = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(got) > i
        if i >= len(got) or token not in ("*", got[i]):
            return False
    return len(want) == len(got)
