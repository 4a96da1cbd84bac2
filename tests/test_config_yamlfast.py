"""The fast YAML path (libyaml) reads a file exactly as the round-trip reader does,
or declines it: data, the position of every key and value, and no issue it
would miss. Compared on every YAML file and doc block of the repository and on
the odd corners of YAML a config can hold."""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path

import pytest

from genericdp.config import load_text, yamlfast
from genericdp.config.yamlfast import read_fast
from genericdp.config.yamlpos import MAX_TEXT, MAX_VALUES, Pos, parse_round_trip, parse_yaml
from genericdp.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.DOTALL | re.MULTILINE)


@functools.cache
def _corpus() -> dict[str, str]:
    texts: dict[str, str] = {}
    for top in ("tests", "configs", "deploy", "docs", "e2e", "bench"):
        for path in sorted((REPO / top).rglob("*.y*ml")):
            texts[str(path.relative_to(REPO))] = path.read_text(encoding="utf-8")
    for doc in [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]:
        for i, block in enumerate(_BLOCK.findall(doc.read_text(encoding="utf-8"))):
            texts[f"{doc.name}#{i}"] = textwrap.dedent(block)
    return texts


CORNERS = {
    "null values": "version: v1\nresources:\n  - name: a/b\n    health: ~\n    hooks: null\n",
    "empty strings": "a: ''\nb: \"\"\nc: [x, '']\n",
    "scalars": (
        "i: 10\no: 0o17\nx: 0x1F\nu: 1_000\nf: 1.5\ne: 1e3\ninf: .inf\nnan: .NaN\nneg: -3\n"
        "t: true\nT: True\nf2: FALSE\nn: null\nN: Null\ntilde: ~\nyes: yes\non: on\nno: 'no'\n"
        "d: 2024-01-01\nts: 2024-01-01T10:00:00Z\nlead: 010\nbin: 0b101\nsexa: 1:20\n"
    ),
    "quoting": "'a b': \"c\\td\"\n\"1\": '2'\nplain: a 'b' \"c\"\nhash: a#b\ncolon: 'a: b'\n",
    "block scalars": (
        "lit: |\n  one\n  two\nfold: >\n  one\n  two\n\nkeep: |+\n  x\n\nstrip: |-\n  y\n"
        "ind: |2\n    two more\nlast: end\n"
    ),
    "multi-line plain": "a: one\n  two\n  three\nb: [x,\n  y]\n",
    "flow": "a: {b: 1, c: [d, {e: f}], 'g': \"h\"}\nl: [1, 2.5, x, null, true]\ne: {}\nel: []\n",
    "comments": "# top\na: 1 # after\n# between\nb:\n  # inside\n  - x # item\n  -   y\n",
    "document markers": "---\na: 1\n...\n",
    "unicode": 'ключ: значение\nemoji: "\\U0001F600"\nwide: 日本語\nk: x\n',
    "nested lists": "a:\n- - 1\n  - 2\n- - [3]\n-\n  b: c\n",
    "indented sequence": "a:\n    -   b: 1\n        c: 2\n    -   d\n",
    "crlf": "a: 1\r\nb:\r\n  - c\r\n",
    "lone CR": "a: 1\rb: 2\r",
    "colons in values": "cmd: [sh, -c, 'echo a: b']\nurl: http://x:80/y\n",
    "question key": "? a\n: b\n",
}
DECLINED = {
    "anchor and alias": "a: &x 1\nb: *x\n",
    "merge key": "base: &b {x: 1}\nc:\n  <<: *b\n",
    "tag": "a: !!str 1\n",
    "custom tag": "a: !glob x\n",
    "non-string key": "1: a\n",
    "null key": "~: a\n",
    "boolean key": "true: a\n",
    "duplicate key": "a: 1\na: 2\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "directive": "%YAML 1.2\n---\na: 1\n",
    "top-level list": "- a\n",
    "scalar document": "just text\n",
    "only comments": "# nothing\n",
    "syntax error": "a: [1, 2\nb: 3\n",
    "tab indent": "a:\n\tb: 1\n",
    "control character": "a: \x07\n",
    "nul": 'a: "x\\0y"\n',
    "deep block nesting": "a:\n" + "".join(" " * i + "- \n" for i in range(1, 80)) + "  x\n",
    "complex key": "? [a, b]\n: c\n",
    "empty value": "a: 1\nb:\n",
    "empty value at the end": "a:\n  b:\n",
    "empty item": "a:\n  -\n  - x\n",
    "tab in a plain scalar (ruamel refuses it)": "a: x\ty\n",
    "tab in a quoted scalar": "a: 'x\ty'\n",
    "line separator": "a: 'x\u2028y'\nb: 1\n",
    "next line": "a: x\x85y\n",
    "key longer than libyaml's 1024": "k" * 2000 + ": v\n",
}


def _same(name: str, text: str) -> None:
    fast = read_fast(text, max_values=MAX_VALUES, max_text=MAX_TEXT)
    if fast is None:
        return
    doc, issues = parse_round_trip(text, name)
    assert issues == [], f"{name}: the fast path took a file with issues: {issues}"
    assert doc is not None
    assert fast.data == doc.data, name
    assert repr(fast.data) == repr(doc.data), f"{name}: types differ"
    assert {k: Pos(*v) for k, v in fast.keys.items()} == dict(doc.keys), name
    assert {k: Pos(*v) for k, v in fast.values.items()} == dict(doc.values), name


@pytest.mark.parametrize("name", sorted(_corpus()))
def test_every_yaml_file_of_the_repository_reads_the_same(name: str) -> None:
    """Every YAML file and doc block gives the same data and positions on both paths."""
    _same(name, _corpus()[name])


def test_the_corpus_takes_the_fast_path() -> None:
    """Most of the repository's YAML is read on the fast path: the comparison means something."""
    texts = _corpus()
    fast = [n for n, t in texts.items() if read_fast(t, max_values=MAX_VALUES, max_text=MAX_TEXT)]
    assert len(fast) >= 100
    assert len(fast) >= 0.7 * len(texts)


@pytest.mark.parametrize("name", sorted(CORNERS))
def test_odd_corners_read_the_same(name: str) -> None:
    """Scalars of every kind, quoting, block and flow styles, comments, CRLF: the same."""
    text = CORNERS[name]
    assert read_fast(text, max_values=MAX_VALUES, max_text=MAX_TEXT) is not None, name
    _same(name, text)


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_what_needs_judgement_is_left_to_the_round_trip_reader(name: str) -> None:
    """Anchors, merges, tags, odd or repeated keys, directives, errors, deep nesting: declined."""
    assert read_fast(DECLINED[name], max_values=MAX_VALUES, max_text=MAX_TEXT) is None


def test_the_limits_are_left_to_the_round_trip_reader() -> None:
    """A file at the value or text limit is declined, so the round-trip reader says where."""
    text = "a: [" + ", ".join("x" for _ in range(50)) + "]\n"
    assert read_fast(text, max_values=51, max_text=MAX_TEXT) is None
    assert read_fast(text, max_values=53, max_text=MAX_TEXT) is not None
    assert read_fast(text, max_values=MAX_VALUES, max_text=50) is None
    assert read_fast(text, max_values=MAX_VALUES, max_text=51) is not None


def test_a_config_read_fast_reports_schema_errors_where_they_are() -> None:
    """A config the fast path reads still locates its schema problems exactly."""
    text = "version: v1\nresources:\n  - name: example.com/a\n    match: [{glob: /dev/null}]\n"
    text += "    count: zero\n"
    assert read_fast(text, max_values=MAX_VALUES, max_text=MAX_TEXT) is not None
    with pytest.raises(ConfigError) as caught:
        load_text(text, "c.yaml")
    (issue,) = caught.value.issues
    assert (issue.line, issue.column, issue.path) == (5, 12, "resources[0].count")


def test_without_the_c_parser_the_round_trip_reader_reads_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where ruamel.yaml.clib has no wheel, every file is read by the round-trip reader."""
    monkeypatch.setattr(yamlfast, "CParser", None)
    text = "a: 1\nb: [x]\n"
    assert read_fast(text, max_values=MAX_VALUES, max_text=MAX_TEXT) is None
    doc, issues = parse_yaml(text, "x.yaml")
    assert issues == []
    assert doc is not None
    assert doc.data == {"a": 1, "b": ["x"]}
