"""msgspec's structural messages in plain words, as every other problem muster reports.

msgspec says ``Expected `int | null`, got `str` - at `$.spec.priority` ``; a user reads
"spec.priority: expected an integer or null, got a string". `structural` splits off the path
(as written in YAML) and rewords the problem; a message this module does not know keeps
msgspec's words, with its type names translated.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

# msgspec's type names (its `_describe_types`) and what a YAML author calls them.
TYPE_WORDS: Final = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "null": "null",
    "array": "a list",
    "object": "a map",
    "bytes": "base64 bytes",
    "datetime": "an RFC 3339 timestamp",
    "date": "a date",
    "time": "a time",
    "timedelta": "a duration",
    "uuid": "a UUID",
    "decimal": "a decimal number",
}

_AT = re.compile(r"(?P<problem>.*) - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`", re.DOTALL)
_FIELD = re.compile(r"Object (?P<what>missing required|contains unknown) field `(?P<field>[^`]+)`")
_TYPES = re.compile(r"`(?P<types>[a-z]+(?: \| [a-z]+)*)`")
_ENUM = re.compile(r"Invalid enum value (?P<value>.+)")
_RFC3339 = re.compile(r"Invalid RFC3339 encoded (?P<what>datetime|date|time)")


class Structural(NamedTuple):
    """Where a structural problem is (a YAML path, "" for the object itself) and what it is."""

    path: str
    problem: str


def structural(message: str) -> Structural:
    """msgspec's ValidationError message as a path and a problem in plain words."""
    problem, path, key = message, "", False
    at = _AT.fullmatch(message)
    if at is not None:
        problem, path, key = at["problem"], at["path"].removeprefix("."), bool(at["key"])
    field = _FIELD.fullmatch(problem)
    if field is not None:  # the field named is the place
        path = f"{path}.{field['field']}" if path else field["field"]
        what = "is required" if field["what"] == "missing required" else "unknown field"
        return Structural(path, what)
    words = plain(problem)
    return Structural(path, f"map key: {words}" if key else words)


def plain(problem: str) -> str:
    """One msgspec problem ("Expected `int`, got `str`") in plain words."""
    enum = _ENUM.fullmatch(problem)
    if enum is not None:
        return f"unknown value {enum['value']}"
    rfc = _RFC3339.fullmatch(problem)
    if rfc is not None:
        return f"expected {TYPE_WORDS[rfc['what']]}"
    # A float where an integer belongs is most often written 1.5 or 1.0.
    words = problem.replace("got `float`", "got a number with a decimal point")
    words = _TYPES.sub(lambda m: _listed(m["types"]), words)
    words = words.replace(" matching regex ", " matching ")
    return "expected " + words.removeprefix("Expected ") if words.startswith("Expected ") else words


def _listed(types: str) -> str:
    """`int | str | null` as "an integer, a string or null"."""
    named = [TYPE_WORDS.get(t, t) for t in types.split(" | ")]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
