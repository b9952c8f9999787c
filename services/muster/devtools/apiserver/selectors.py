"""Label and field selectors in the API server's query syntax, parsed once and matched per object.

Labels: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined by
commas. Fields: `path=value`, `path==value`, `path!=value` over the labels each resource supports
(a missing field reads as "", an unset boolean as "false"); an unsupported label is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from muster.devtools.apiserver.errors import bad_request
from muster.devtools.apiserver.objects import JsonObj, lookup, meta, string_map

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|<|>|[^\s,=!()<>]+)")


class Requirement(msgspec.Struct, frozen=True):
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        if self.op in ("!=", "notin"):
            return value is None or value not in self.values
        if self.op == "exists":
            return value is not None
        if self.op == "!":
            return value is None
        bound = int(next(iter(self.values)))
        if value is None or not re.fullmatch(r"-?\d+", value):
            return False
        return int(value) > bound if self.op == "gt" else int(value) < bound


class LabelSelector(msgspec.Struct, frozen=True):
    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: JsonObj) -> bool:
        if not self.requirements:
            return True
        labels = string_map(meta(obj).get("labels"))
        return all(r.matches(labels) for r in self.requirements)


def _check_key(key: str) -> None:
    if key in ("in", "notin"):  # keywords, never keys
        raise bad_request(f"unable to parse requirement: {key!r} is not a label key")
    prefix, _, name = key.rpartition("/")
    if not (len(name) <= 63 and _NAME.fullmatch(name)) or (
        "/" in key and not (len(prefix) <= 253 and _PREFIX.fullmatch(prefix))
    ):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}")


def _check_value(value: str) -> str:
    if value and not (len(value) <= 63 and _NAME.fullmatch(value)):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r}")
    return value


def parse_label_selector(text: str) -> LabelSelector:
    """The selector `text` denotes; ApiError 400 when it does not parse."""
    tokens = _TOKEN.findall(text.strip())
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise bad_request(f"unable to parse label selector {text!r}")
    reader = _Tokens(tokens, text)
    requirements: list[Requirement] = []
    while not reader.done():
        requirements.append(_requirement(reader))
        if not reader.done():
            reader.expect(",")
    return LabelSelector(tuple(requirements))


class _Tokens:
    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.pos = 0

    def done(self) -> bool:
        return self.pos >= len(self.tokens)

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        token = self.peek()
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        if self.take() != token:
            raise bad_request(f"unable to parse label selector {self.text!r}: expected {token!r}")

    def word(self) -> str:
        token = self.take()
        if token in ("", "==", "!=", "=", "!", "(", ")", ",", "<", ">"):
            raise bad_request(f"unable to parse label selector {self.text!r}: expected a name")
        return token


def _requirement(reader: _Tokens) -> Requirement:
    if reader.peek() == "!":
        reader.take()
        key = reader.word()
        _check_key(key)
        return Requirement(key, "!")
    key = reader.word()
    _check_key(key)
    op = reader.peek()
    if op in ("", ","):
        return Requirement(key, "exists")
    reader.take()
    if op in ("=", "==", "!="):
        value = "" if reader.peek() in ("", ",") else reader.word()
        return Requirement(key, "!=" if op == "!=" else "=", frozenset({_check_value(value)}))
    if op in ("in", "notin"):
        reader.expect("(")
        values: set[str] = set()
        while reader.peek() != ")":
            values.add(_check_value("" if reader.peek() in (",", ")") else reader.word()))
            if reader.peek() == ",":
                reader.take()
        reader.expect(")")
        return Requirement(key, op, frozenset(values))
    if op in ("<", ">"):
        bound = reader.word()
        if not re.fullmatch(r"-?\d+", bound):
            raise bad_request(f"unable to parse requirement: {bound!r} is not an integer")
        return Requirement(key, "gt" if op == ">" else "lt", frozenset({bound}))
    raise bad_request(f"unable to parse label selector {reader.text!r}: unknown operator {op!r}")


def _boolean(path: str) -> Callable[[JsonObj], str]:
    return lambda obj: "true" if lookup(obj, path) is True else "false"


# Field labels whose value is not simply the string at that path.
_SPECIAL: dict[str, Callable[[JsonObj], str]] = {
    "spec.unschedulable": _boolean("spec.unschedulable"),
    "spec.hostNetwork": _boolean("spec.hostNetwork"),
    "status.successful": lambda obj: str(lookup(obj, "status.succeeded") or 0),
    "source": lambda obj: str(lookup(obj, "source.component") or ""),
    "reportingComponent": lambda obj: str(lookup(obj, "reportingComponent") or ""),
}


def field_value(obj: JsonObj, label: str) -> str:
    """The string a field selector compares for `label` on `obj`."""
    special = _SPECIAL.get(label)
    if special is not None:
        return special(obj)
    value = lookup(obj, label)
    return "" if value is None else str(value)


class FieldTerm(msgspec.Struct, frozen=True):
    label: str
    value: str
    negated: bool


class FieldSelector(msgspec.Struct, frozen=True):
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: JsonObj) -> bool:
        return all((field_value(obj, t.label) == t.value) != t.negated for t in self.terms)

    def exact_name(self) -> str | None:
        """The name a `metadata.name=` term pins, so lookups can skip a scan."""
        for term in self.terms:
            if term.label == "metadata.name" and not term.negated:
                return term.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str, supported: frozenset[str]) -> FieldSelector:
    """The field selector `text` denotes over `supported` labels; ApiError 400 otherwise."""
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        if not raw.strip():
            continue
        matched = re.match(r"((?:[^\\=!]|\\.)*)(!=|==|=)(.*)", raw)
        if matched is None:
            raise bad_request(f"invalid selector: {raw!r}; can't understand {raw!r}")
        label = _unescape(matched.group(1)).strip()
        if label not in supported:
            raise bad_request(f"field label not supported: {label}")
        terms.append(FieldTerm(label, _unescape(matched.group(3)), matched.group(2) == "!="))
    return FieldSelector(tuple(terms))


def selectors(
    label_text: str | None, field_text: str | None, supported: frozenset[str]
) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors of a request (empty when absent)."""
    labels = parse_label_selector(label_text) if label_text else LabelSelector()
    fields = parse_field_selector(field_text, supported) if field_text else FieldSelector()
    return labels, fields
