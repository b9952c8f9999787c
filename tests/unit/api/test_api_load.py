"""muster.api.load: YAML and JSON read within bounds, each limit an error with source and line."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml
from hostile import alias_bomb, deeply_nested

from muster.api import FieldError, decode_yaml, load_json, load_yaml
from muster.api.load import ALIAS_ALLOWANCE, MAX_DEPTH, LoadError

REPO = Path(__file__).resolve().parents[3]


def test_an_alias_bomb_is_refused_at_once_naming_source_and_line() -> None:
    bomb = alias_bomb()
    tracemalloc.start()
    try:
        objects, errors = decode_yaml(bomb, source="lol.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert len(bomb) < 600
    assert objects == []
    assert [str(e) for e in errors] == [
        f"lol.yaml: line 11: aliases expand to more than the input's own values +"
        f" {ALIAS_ALLOWANCE} (an alias bomb?)"
    ]
    assert peak < 5 * 1024 * 1024  # bytes: nothing was expanded


def test_many_small_alias_bombs_add_up() -> None:
    small = alias_bomb(levels=4)  # 9**4 = 6 561 values: within the allowance on its own

    assert decode_yaml(small, validation="ignore")[1] == []
    _, errors = decode_yaml("---\n".join([small] * 4), source="many.yaml", validation="ignore")

    assert [e.problem for e in errors] == [
        f"aliases expand to more than the input's own values + {ALIAS_ALLOWANCE} (an alias bomb?)"
    ]


def test_aliases_within_the_allowance_load_as_written() -> None:
    text = "base: &b {cpu: 1}\nmore:\n  <<: *b\n  memory: 2\nagain: *b\n"

    documents, problem = load_yaml(text, source="f")

    assert problem is None
    assert documents == [{"base": {"cpu": 1}, "more": {"memory": 2, "cpu": 1}, "again": {"cpu": 1}}]


@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_past_the_limit_is_an_error_with_the_line(style: str) -> None:
    depth = MAX_DEPTH + 1
    if style == "flow":
        text = "a: " + "[" * depth + "]" * depth + "\n"
    else:
        text = "".join("  " * i + "- \n" for i in range(depth)) + "  " * depth + "x\n"

    documents, problem = load_yaml(text, source="deep.yaml")

    assert documents == []
    assert problem is not None
    assert problem.obj == "deep.yaml"
    assert problem.problem == f"nested more than {MAX_DEPTH} levels deep"


def test_far_deeper_nesting_never_raises_recursion_error() -> None:
    objects, errors = decode_yaml(deeply_nested(100_000), source="deep.yaml")

    assert objects == []
    (error,) = errors
    assert error.obj == "deep.yaml"
    assert error.path == "line 4"


def test_an_integer_of_thousands_of_digits_is_an_error_not_a_traceback() -> None:
    documents, problem = load_yaml("a: 1\nb: " + "9" * 5000 + "\n", source="big.yaml")

    assert problem == FieldError("big.yaml", "line 2", "integer has more than 64 digits")
    assert documents == []


def test_a_recursive_alias_is_refused() -> None:
    _, problem = load_yaml("a: &a [1, *a]\n", source="f")

    assert problem == FieldError("f", "line 1", "alias *a is inside its own anchor")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: !!binary aGk=\n", "tag tag:yaml.org,2002:binary is not supported"),
        ("a: !!python/object:os.system x\n", "tag tag:yaml.org,2002:python/object:os.system"),
        ("? [1]\n: 2\n", "a map key must be a string, number or boolean"),
        ("a: *nowhere\n", "alias *nowhere names no anchor before it"),
    ],
)  # fmt: skip
def test_what_json_cannot_hold_is_refused(text: str, problem: str) -> None:
    _, found = load_yaml(text, source="f")

    assert found is not None
    assert found.problem.startswith(problem)


def test_documents_before_a_syntax_error_are_kept() -> None:
    documents, problem = load_yaml("a: 1\n---\nb: [\n", source="f")

    assert documents == [{"a": 1}]
    assert problem is not None
    assert problem.path == "line 4"


def test_keys_written_twice_keep_the_later_value_and_are_reported() -> None:
    duplicates: list[FieldError] = []

    documents, _ = load_yaml("a: 1\nb: 2\na: 3\n", source="f", duplicates=duplicates)

    assert documents == [{"a": 3, "b": 2}]
    assert [str(d) for d in duplicates] == [
        "f: line 3: duplicate key 'a': the later value replaces the earlier"
    ]


def test_every_yaml_file_in_the_repository_loads_as_pyyaml_reads_it() -> None:
    files = sorted(p for p in REPO.glob("**/*.yaml") if ".venv" not in p.parts)

    class Reference(yaml.SafeLoader):
        """PyYAML's own reading, timestamps left as strings."""

    Reference.yaml_implicit_resolvers = {
        k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    assert len(files) > 100
    for path in files:
        text = path.read_text(encoding="utf-8")
        expected = list(yaml.load_all(text, Loader=Reference))
        assert load_yaml(text, source=str(path)) == (expected, None), path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
            f"nested more than {MAX_DEPTH} levels deep",
        ),
        ("[" * 100_000, f"nested more than {MAX_DEPTH} levels deep"),
        ('{"cpu": ' + "1" * 5000 + "}", "integer has more than 64 digits"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": "\\ud800"}', "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"),
    ],
)
def test_json_within_the_same_limits(text: str, problem: str) -> None:
    with pytest.raises(LoadError) as raised:
        load_json(text, source="w.json")

    assert raised.value.error == FieldError("w.json", "(document)", problem)


def test_json_syntax_error_names_the_line() -> None:
    with pytest.raises(LoadError) as raised:
        load_json('{\n"a": 1,\n}', source="w.json")

    assert str(raised.value).startswith("w.json: line 3: invalid JSON: ")


def test_plain_scalars_read_the_same_in_every_load_and_their_shared_table_stays_bounded() -> None:
    from muster.api import load as loader

    # A caller's many distinct spellings (hostile or not) neither grow the table nor stay in it.
    flood = "\n".join(f"k{i}: v{i}" for i in range(3 * loader._PLAIN_MAX_ENTRIES))
    assert len(load_yaml(flood)[0][0]) == 3 * loader._PLAIN_MAX_ENTRIES
    long = "x" * (loader._PLAIN_MAX_CHARS + 1)
    assert load_yaml(f"a: {long}")[0] == [{"a": long}]

    assert len(loader._PLAIN) <= loader._PLAIN_MAX_ENTRIES
    assert long not in loader._PLAIN
    # The same spelling gives the same value in a later load, whatever came before; quoted
    # and tagged spellings are not plain, and are read as written.
    first = load_yaml("a: 010\nb: yes\nc: ~\nd: 1e3")[0]
    again = load_yaml("a: 010\nb: yes\nc: ~\nd: 1e3\ne: '010'\nf: !!str yes")[0]
    assert first == [{"a": 8, "b": True, "c": None, "d": "1e3"}]
    assert again == [{"a": 8, "b": True, "c": None, "d": "1e3", "e": "010", "f": "yes"}]


def test_a_control_character_is_one_line_naming_where_it_is() -> None:
    from muster.api import decode_yaml

    _, errors = decode_yaml("a: b\nc: d\x00e\n", source="f.yaml")

    (line,) = [str(e) for e in errors]
    assert "\n" not in line
    assert line.startswith("f.yaml: line 2: invalid YAML: unacceptable character #x0000")
