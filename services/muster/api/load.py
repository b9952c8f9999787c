"""The one way muster reads user YAML and JSON: bounded in depth, alias expansion and size.

`load_yaml` parses with libyaml (PyYAML's CParser) when PyYAML was built with it, else with
PyYAML's pure-Python parser, and builds plain values from the parser's events itself. Why not
`yaml.load`: PyYAML's constructor shares an anchored value among its aliases, so a 557-byte
"billion laughs" document loads at once and blows up later, in whatever walks it (JSON
encoding, msgspec); its constructor also recurses, so deep nesting ends in RecursionError.
Here every alias counts as the whole value it stands for, nesting is counted as it opens,
and each limit is an error naming the source and the line. Timestamps stay strings, as
Kubernetes reads YAML. `load_json` applies the same limits to JSON.

A text that is one JSON object (what kubectl and programs send) is read by the json module,
a tenth of libyaml's time, to exactly the values the YAML reader gives: its numbers and
constants are resolved by their spelling as YAML 1.1 resolves them (`1e3` stays a string),
and a text where the two could differ (escapes, a duplicate key, non-ASCII, tabs, a key YAML
cannot take as one, a limit reached) is read as YAML, which names the problem.

Used by `muster.api.decode` (files, scenarios, the gateway's manifests) and anywhere else a
user's YAML or JSON is read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import yaml
from yaml import events as ev
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from muster.api.errors import FieldError

try:  # libyaml's parser, about 10x faster than the pure-Python one
    from yaml import CSafeLoader as _Parser
except ImportError:  # PyYAML without libyaml
    from yaml import SafeLoader as _Parser  # type: ignore[assignment]

MAX_DEPTH: Final = 100  # nested maps and lists; a pod template needs about 15
# Values aliases may add beyond those written out, over the whole text (not per document, or
# many small bombs would add up): aliases can at most double the input
# plus this much, so a small document never costs more than a bounded amount to walk.
ALIAS_ALLOWANCE: Final = 10_000
MAX_DOCUMENT_CHARS: Final = 3 * 1024 * 1024  # the API server's limit on one request body
MAX_INT_DIGITS: Final = 64  # far above any int64; Python refuses int() over 4 300 digits

_STR: Final = "tag:yaml.org,2002:str"
_MERGE: Final = "tag:yaml.org,2002:merge"
_SCALAR_TAGS: Final = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null")
)
_MAP_TAGS: Final = frozenset({None, "!", "tag:yaml.org,2002:map"})
_SEQ_TAGS: Final = frozenset({None, "!", "tag:yaml.org,2002:seq"})


class LoadError(Exception):
    """The input cannot be read; `error` names the source and the line."""

    def __init__(self, error: FieldError) -> None:
        super().__init__(str(error))
        self.error = error


class _KubernetesResolver(Resolver):
    """YAML 1.1 implicit types as PyYAML's SafeLoader reads them, but timestamps stay strings."""


_KubernetesResolver.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}
_RESOLVER: Final = _KubernetesResolver()
_CONSTRUCTOR: Final = SafeConstructor()
# Plain scalar spelling -> its value, shared by every load: a value depends on its spelling
# alone and is immutable (str, int, float, bool, None), and resolving one by regexes was a
# third of loading a small manifest (`muster bench decode`). Short spellings only, and emptied
# when full, so no input can grow it or keep the common ones out for long.
_PLAIN: Final[dict[str, Any]] = {}
_PLAIN_MAX_ENTRIES: Final = 4096
_PLAIN_MAX_CHARS: Final = 64


def load_yaml(
    text: str, *, source: str = "", duplicates: list[FieldError] | None = None
) -> tuple[list[Any], FieldError | None]:
    """Return the documents of a multi-document YAML text, and the problem that stopped reading.

    Documents before the problem are returned (each as plain dicts, lists and scalars; an
    empty document is None). The problem names `source` and the line. A key written twice in
    one map keeps its later value, as Kubernetes' lenient decoding does; pass a list as
    `duplicates` to learn of each (strict field validation refuses them). One JSON object is
    read as JSON, to the same values (the module's docstring).
    """
    if text[:1] == "{" or text.lstrip()[:1] == "{":
        document = _json_as_yaml(text)
        if document is not _NOT_JSON:
            return [document], None
    return _read_yaml(text, source=source, duplicates=duplicates)


def _read_yaml(
    text: str, *, source: str = "", duplicates: list[FieldError] | None = None
) -> tuple[list[Any], FieldError | None]:
    """`load_yaml` by libyaml alone, whatever the text."""
    builder = _Builder(source or "(input)")
    if duplicates is not None:
        builder.duplicates = duplicates
    parser = _Parser(text)
    try:
        builder.run(parser)
    except LoadError as exc:
        return builder.documents, exc.error
    except yaml.YAMLError as exc:
        return builder.documents, _yaml_error(exc, builder.source, text)
    finally:
        parser.dispose()
    return builder.documents, None


def load_json(text: str, *, source: str = "") -> Any:
    """Return one JSON document, within the YAML limits; raise LoadError naming the problem."""
    where = source or "(input)"
    if len(text) > MAX_DOCUMENT_CHARS:
        raise LoadError(FieldError(where, "(document)", _too_large(len(text))))
    try:
        value = json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise LoadError(
            FieldError(where, f"line {exc.lineno}", f"invalid JSON: {exc.msg}")
        ) from None
    except _JsonNumberError as exc:
        raise LoadError(FieldError(where, "(document)", str(exc))) from None
    except RecursionError:
        raise LoadError(FieldError(where, "(document)", _too_deep())) from None
    problem = _json_problem(value)
    if problem is not None:
        raise LoadError(FieldError(where, "(document)", problem))
    return value


class _Frame:
    """A map or list being built: its value, its size so far (aliases counted whole)."""

    __slots__ = ("anchor", "is_list", "key", "merged", "size", "value")

    def __init__(self, value: dict[Any, Any] | list[Any], anchor: str | None) -> None:
        self.value = value
        self.is_list = type(value) is list
        self.anchor = anchor
        self.size = 1
        self.key: Any = _NO_KEY  # a map's key waiting for its value
        self.merged: list[tuple[Any, int]] = []  # `<<:` values, applied when the map ends


_NO_KEY: Final = object()
_MERGE_KEY: Final = object()  # stands for `<<` until its value arrives
_SCALAR, _ALIAS, _DOC_END = ev.ScalarEvent, ev.AliasEvent, ev.DocumentEndEvent
_MAP_START, _MAP_END = ev.MappingStartEvent, ev.MappingEndEvent
_SEQ_START, _SEQ_END = ev.SequenceStartEvent, ev.SequenceEndEvent


class _Builder:
    """Plain values from parser events, one document at a time, with the limits enforced."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.documents: list[Any] = []
        self.duplicates: list[FieldError] = []
        self.own = self.aliased = 0

    def run(self, parser: Any) -> None:
        get_event = parser.get_event
        while True:
            event = get_event()
            if isinstance(event, ev.DocumentStartEvent):
                self.documents.append(self._document(get_event, event))
            elif event is None or isinstance(event, ev.StreamEndEvent):
                return

    def _document(self, get_event: Any, start: Any) -> Any:
        # One loop over the events, with the common cases inline: it runs once per value.
        stack: list[_Frame] = []
        top: _Frame | None = None  # stack[-1]
        anchors: dict[str, tuple[Any, int] | None] = {}  # None while its node is open
        # Values written out, values that aliases stand for: over the whole text so far.
        own, aliased = self.own, self.aliased
        scalars = _PLAIN
        result: Any = None
        while True:
            event = get_event()
            cls = type(event)
            if cls is _SCALAR:
                own += 1
                size = 1
                value = scalars.get(event.value, _NO_KEY) if event.implicit[0] else _NO_KEY
                if value is _NO_KEY or event.tag is not None:
                    value = self._scalar(event)
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1)
            elif cls is _MAP_START or cls is _SEQ_START:
                own += 1
                top = self._open(event, depth=len(stack) + 1)
                stack.append(top)
                if event.anchor is not None:
                    anchors[event.anchor] = None
                continue
            elif cls is _MAP_END or cls is _SEQ_END:
                frame = stack.pop()
                top = stack[-1] if stack else None
                if frame.merged:
                    self._merge(frame)
                value, size = frame.value, frame.size
                if frame.anchor is not None:
                    anchors[frame.anchor] = (value, size)
            elif cls is _ALIAS:
                value, size = self._alias(event, anchors)
                aliased += size
                if aliased > own + ALIAS_ALLOWANCE:
                    raise self._error(event, _too_many_aliases())
            elif cls is _DOC_END:
                self.own, self.aliased = own, aliased
                chars = event.end_mark.index - start.start_mark.index
                if chars > MAX_DOCUMENT_CHARS:
                    raise self._error(start, _too_large(chars))
                return result
            else:
                raise self._error(event, f"unexpected {cls.__name__}")
            if top is None:
                result = "<<" if value is _MERGE_KEY else value
            elif top.is_list:
                top.size += size
                top.value.append("<<" if value is _MERGE_KEY else value)  # type: ignore[union-attr]
            elif top.key is _NO_KEY or top.key is _MERGE_KEY or value is _MERGE_KEY:
                self._add(top, value, size, event)
            else:
                top.size += size
                if top.key in top.value:
                    self._duplicate(top.key, event)
                top.value[top.key] = value
                top.key = _NO_KEY

    def _open(self, event: Any, *, depth: int) -> _Frame:
        if depth > MAX_DEPTH:
            raise self._error(event, _too_deep())
        mapping = type(event) is ev.MappingStartEvent
        if event.tag not in (_MAP_TAGS if mapping else _SEQ_TAGS):
            raise self._error(event, f"tag {event.tag} is not supported")
        return _Frame({} if mapping else [], event.anchor)

    def _add(self, frame: _Frame, value: Any, size: int, event: Any) -> None:
        frame.size += size
        container = frame.value
        key = frame.key
        if value is _MERGE_KEY and not (key is _NO_KEY and type(container) is dict):
            value = "<<"  # only a key merges
        if type(container) is list:
            container.append(value)
            return
        if key is _NO_KEY:
            if type(value) is dict or type(value) is list:
                raise self._error(event, "a map key must be a string, number or boolean")
            frame.key = value
        elif key is _MERGE_KEY:
            frame.merged.append((value, event.start_mark.line))
            frame.key = _NO_KEY
        else:
            if key in container:
                self._duplicate(key, event)
            container[key] = value
            frame.key = _NO_KEY

    def _scalar(self, event: Any) -> Any:
        value: str = event.value
        tag = event.tag
        try:
            if tag is None and event.implicit[0]:  # plain: resolved by its spelling
                return _plain(value)
            if tag is None or tag == "!" or tag == _STR:
                return value
            if tag not in _SCALAR_TAGS:
                raise _UnreadableError(f"tag {tag} is not supported")
            return _construct(tag, value)
        except _UnreadableError as exc:
            raise self._error(event, str(exc)) from None

    def _alias(self, event: Any, anchors: dict[str, tuple[Any, int] | None]) -> tuple[Any, int]:
        if event.anchor not in anchors:
            raise self._error(event, f"alias *{event.anchor} names no anchor before it")
        found = anchors[event.anchor]
        if found is None:
            raise self._error(event, f"alias *{event.anchor} is inside its own anchor")
        return found

    def _merge(self, frame: _Frame) -> None:
        """Apply `<<:` merge keys: a merged map's entries never replace the map's own keys."""
        target = frame.value
        assert isinstance(target, dict)
        for value, line in frame.merged:
            sources = value if isinstance(value, list) else [value]
            for source in sources:
                if not isinstance(source, dict):
                    problem = "a merge key (<<) takes a map or a list of maps"
                    raise LoadError(FieldError(self.source, f"line {line + 1}", problem))
                for key, item in source.items():
                    target.setdefault(key, item)

    def _duplicate(self, key: Any, event: Any) -> None:
        # The line of the value: the key's own event is gone by now.
        problem = f"duplicate key {key!r}: the later value replaces the earlier"
        self.duplicates.append(
            FieldError(self.source, f"line {event.start_mark.line + 1}", problem)
        )

    def _error(self, event: Any, problem: str) -> LoadError:
        return LoadError(FieldError(self.source, f"line {event.start_mark.line + 1}", problem))


class _UnreadableError(ValueError):
    """A scalar YAML will not read; the caller names where."""


def _plain(value: str) -> Any:
    """A plain scalar's value, resolved by its spelling (YAML 1.1, timestamps as strings)."""
    known = _PLAIN.get(value, _NO_KEY)  # one lookup: another Submit's thread may clear it
    if known is not _NO_KEY:
        return known
    tag = _RESOLVER.resolve(ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
    found = _construct(tag, value)
    if len(value) <= _PLAIN_MAX_CHARS:
        if len(_PLAIN) >= _PLAIN_MAX_ENTRIES:
            _PLAIN.clear()
        _PLAIN[value] = found
    return found


def _construct(tag: str, value: str) -> Any:
    if tag == _STR:
        return value
    if tag == _MERGE:
        return _MERGE_KEY
    if tag == "tag:yaml.org,2002:int" and sum(c.isdigit() for c in value) > MAX_INT_DIGITS:
        raise _UnreadableError(f"integer has more than {MAX_INT_DIGITS} digits")
    method = _CONSTRUCTOR.yaml_constructors.get(tag)
    if method is None:
        raise _UnreadableError(f"tag {tag} is not supported")
    try:
        return method(_CONSTRUCTOR, ScalarNode(tag, value))
    except (ConstructorError, ValueError) as exc:
        kind = tag.rsplit(":", 1)[-1]
        raise _UnreadableError(f"cannot read {value!r} as {kind}: {exc}") from None


# A JSON text is read as JSON only when it is made of what YAML reads alike: printable ASCII
# without escapes (YAML 1.1 and JSON escape differently), spaces and newlines between tokens.
_JSON_UNLIKE_YAML: Final = ("\\", "\t", "\r", "\x7f")
# YAML takes a map's key only within 1024 characters of its ':' (a "simple key"); longer, read
# as YAML, which says so. Well short of it, for the spaces JSON allows before the ':'. Without
# escapes a JSON string is exactly `"[^"]*"`, and only a key's is followed by a ':'.
_JSON_KEY_CHARS: Final = 512
_LONG_JSON_KEY: Final = re.compile(f'"[^"]{{{_JSON_KEY_CHARS},}}"[ \n]*:')
_NOT_JSON: Final = object()


class _NotLikeYamlError(Exception):
    """JSON that YAML would read otherwise, or not at all: read it as YAML."""


def _json_scalar(spelling: str) -> Any:
    """A JSON number or constant as YAML reads the same spelling (`1e3`, `NaN`: strings)."""
    try:
        value = _plain(spelling)
    except _UnreadableError:
        raise _NotLikeYamlError from None
    if value is _MERGE_KEY:
        raise _NotLikeYamlError
    return value


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise _NotLikeYamlError  # a duplicate key: YAML tells each
    return mapping


_JSON_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_json_pairs,
    parse_int=_json_scalar,
    parse_float=_json_scalar,
    parse_constant=_json_scalar,
)


def _json_as_yaml(text: str) -> Any:
    """`text`, one JSON object, as the YAML reader would return its document; `_NOT_JSON`
    when it is not JSON, or when YAML could read it otherwise or refuse it."""
    if len(text) > MAX_DOCUMENT_CHARS or not text.isascii():
        return _NOT_JSON
    if any(unlike in text for unlike in _JSON_UNLIKE_YAML):
        return _NOT_JSON
    if len(text) > _JSON_KEY_CHARS and _LONG_JSON_KEY.search(text):
        return _NOT_JSON
    try:
        value = _JSON_DECODER.decode(text)
    except (ValueError, _NotLikeYamlError, RecursionError):
        return _NOT_JSON
    # Nested too deep (YAML names the line): the walk only when the brackets could be.
    if text.count("{") + text.count("[") > MAX_DEPTH and _json_problem(value) is not None:
        return _NOT_JSON
    return value


class _JsonNumberError(ValueError):
    pass


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _JsonNumberError(f"integer has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _json_constant(text: str) -> float:
    raise _JsonNumberError(f"{text} is not a JSON number")


def _json_problem(value: Any) -> str | None:
    """What makes loaded JSON unusable: nesting past MAX_DEPTH, or a string with a lone
    surrogate (a `\\ud800` escape, which no UTF-8 encoder takes). Walks without recursion."""
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if type(item) is str:
            if not item.isascii() and _has_surrogate(item):
                return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
            continue
        if type(item) is dict:
            if depth >= MAX_DEPTH:
                return _too_deep()
            todo.extend((key, depth) for key in item)
            todo.extend((child, depth + 1) for child in item.values())
        elif type(item) is list:
            if depth >= MAX_DEPTH:
                return _too_deep()
            todo.extend((child, depth + 1) for child in item)
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _yaml_error(exc: yaml.YAMLError, source: str, text: str) -> FieldError:
    """One line: the reader's own message spans two and names "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        line = f"line {mark.line + 1}"
    elif isinstance(exc, yaml.reader.ReaderError):  # a character YAML refuses, by offset
        line = f"line {text.count(chr(10), 0, exc.position) + 1}"
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        return FieldError(source, line, f"invalid YAML: {problem}")
    else:
        line = "(yaml)"
    problem = getattr(exc, "problem", None) or str(exc)
    return FieldError(source, line, f"invalid YAML: {problem}")


def _too_deep() -> str:
    return f"nested more than {MAX_DEPTH} levels deep"


def _too_many_aliases() -> str:
    return (
        f"aliases expand to more than the input's own values + {ALIAS_ALLOWANCE} (an alias bomb?)"
    )


def _too_large(chars: int) -> str:
    return f"document too large: {chars} characters > {MAX_DOCUMENT_CHARS}"
