"""YAML text -> plain data for jsonschema, plus the position of every key and value
by path, so every later check can say ``file:line:column``."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from genericdp.config.yamldepth import flow_too_deep, issue_at, too_deep_for_parser
from genericdp.errors import ConfigIssue

_SHOWN = 40  # characters of a user's value quoted in a message

Key = str | int
KeyPath = tuple[Key, ...]

_STANDARD_TAG = "tag:yaml.org,2002:"
_SIMPLE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A plain scalar as written, for "quote it, e.g. "0403"" hints.
_TOKEN = re.compile(r"[^\s,\]}#]+")

# Aliases let a few hundred bytes stand for gigabytes (a "billion laughs"
# document). ruamel shares aliased objects; the copy below is what would grow,
# so it is counted and stops at limits far above any real config.
MAX_VALUES = 100_000  # mappings, lists and scalars, with aliases expanded
MAX_TEXT = 4 * 1024 * 1024  # characters of keys and strings, with aliases expanded
MAX_ALIASED_VALUES = 20_000  # values copied through aliases
_MAX_DIGITS = 4300  # Python's int() refuses longer decimal strings (sys.int_info)
_MAX_BITS = 3 * _MAX_DIGITS  # a number of fewer bits has fewer digits: str() can print it


@dataclass(frozen=True)
class Pos:
    """A 1-based line and column."""

    line: int
    column: int


def located(file: str, pos: Pos | None, path: KeyPath, message: str) -> ConfigIssue:
    return ConfigIssue(
        file, pos.line if pos else None, pos.column if pos else None, format_path(path), message
    )


@dataclass(frozen=True)
class Document:
    file: str
    data: Any
    keys: Mapping[KeyPath, Pos]
    values: Mapping[KeyPath, Pos]
    lines: tuple[str, ...]

    def key_pos(self, path: KeyPath) -> Pos | None:
        """Where the key naming ``path`` is (else its value, else the nearest ancestor)."""
        return self._find(path, self.keys, self.values)

    def value_pos(self, path: KeyPath) -> Pos | None:
        """Where the value at ``path`` starts (else its key, else the nearest ancestor)."""
        return self._find(path, self.values, self.keys)

    def _find(
        self, path: KeyPath, first: Mapping[KeyPath, Pos], second: Mapping[KeyPath, Pos]
    ) -> Pos | None:
        # Keys pulled in by a YAML merge (``<<: *base``) have no position of
        # their own; the nearest ancestor that has one is the best we can say.
        while True:
            pos = first.get(path) or second.get(path)
            if pos is not None or not path:
                return pos
            path = path[:-1]

    def token(self, path: KeyPath) -> str | None:
        """The scalar at ``path`` exactly as written in the file, if we can tell."""
        pos = self.values.get(path)
        if pos is None or pos.line > len(self.lines):
            return None
        found = _TOKEN.match(self.lines[pos.line - 1], pos.column - 1)
        # A tagged value (``!!int 1``) starts with its tag, which is not the value.
        return found.group(0) if found and not found.group(0).startswith("!") else None

    def issue(self, path: KeyPath, message: str, *, at_key: bool = False) -> ConfigIssue:
        pos = self.key_pos(path) if at_key else self.value_pos(path)
        return located(self.file, pos, path, message)


def format_path(path: KeyPath) -> str:
    """``("resources", 0, "match")`` -> ``resources[0].match``; odd keys are quoted."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        elif _SIMPLE_KEY.fullmatch(key):
            out += f".{key}" if out else key
        else:
            quoted = key.replace("\\", "\\\\").replace('"', '\\"')
            # A NUL or an escape sequence in a key must not reach a terminal or a log as is.
            out += '["' + "".join(c if c.isprintable() else repr(c)[1:-1] for c in quoted) + '"]'
    return out


def parse_yaml(text: str, file: str) -> tuple[Document | None, list[ConfigIssue]]:
    """One YAML document (None if unparsable) and the problems found reading it."""
    too_deep = flow_too_deep(text, file)
    if too_deep is not None:
        return None, [too_deep]
    return _parsed(text, file)


def _parsed(text: str, file: str) -> tuple[Document | None, list[ConfigIssue]]:
    yaml = YAML(typ="rt", pure=True)
    yaml.version = (1, 2)  # "on", "yes" and "no" are strings, not booleans
    try:
        node = yaml.load(text)
    except RecursionError:
        return None, [too_deep_for_parser(text, file)]
    except MarkedYAMLError as exc:
        return None, [_syntax_issue(exc, file)]
    except ReaderError as exc:  # a character YAML does not allow, e.g. NUL
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"YAML syntax error: the control character U+{char:04X} is not allowed"
        return None, [issue_at(text, exc.position, file, message)]
    except (ValueError, TypeError, KeyError, OverflowError, AttributeError) as exc:
        # A scalar its tag (given or implied) cannot hold: ``!!int abc``, a number of
        # thousands of digits (int() refuses them), ``!!bool maybe``.
        return None, [_unconstructable(text, file, exc)]
    builder = _Builder(file)
    if isinstance(node, CommentedMap):
        builder.values[()] = Pos(node.lc.line + 1, node.lc.col + 1)
    try:
        data = builder.plain(node, ())
    except _TooLarge as exc:
        return None, [*builder.issues, exc.issue]
    doc = Document(file, data, builder.keys, builder.values, tuple(text.splitlines()))
    return doc, builder.issues


def _unconstructable(text: str, file: str, exc: Exception) -> ConfigIssue:
    """Which scalar ruamel could not turn into a value, found in the node tree
    (composed, not constructed) by constructing each scalar alone."""
    yaml = YAML(typ="rt", pure=True)
    yaml.version = (1, 2)
    stack: list[tuple[Node, KeyPath]] = [(yaml.compose(text), ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, MappingNode):
            for key, _value in node.value:
                pos = Pos(key.start_mark.line + 1, key.start_mark.column + 1)
                if not isinstance(key, ScalarNode):  # ruamel fails on a tagged one
                    return located(file, pos, path, "a key must be a string, not a collection")
                problem = _scalar_problem(key)
                if problem is not None:
                    return located(file, pos, path, f"key {problem}")
            for key, value in reversed(node.value):
                stack.append((value, (*path, str(key.value))))
        elif isinstance(node, SequenceNode):
            stack += reversed([(item, (*path, i)) for i, item in enumerate(node.value)])
        elif isinstance(node, ScalarNode):
            problem = _scalar_problem(node)
            if problem is not None:
                pos = Pos(node.start_mark.line + 1, node.start_mark.column + 1)
                return located(file, pos, path, problem)
    return ConfigIssue(file, None, None, "", f"a YAML value cannot be read: {exc}")


def _scalar_problem(node: ScalarNode) -> str | None:
    digits = sum(c.isdigit() for c in node.value)
    if node.tag == _STANDARD_TAG + "int" and digits > _MAX_DIGITS:
        return f"a number of {digits} digits is far too large for any setting"
    try:
        YAML(typ="rt", pure=True).constructor.construct_object(node, deep=True)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        tag = str(node.tag).replace(_STANDARD_TAG, "!!")
        shown = node.value if len(node.value) <= _SHOWN else node.value[:_SHOWN] + "…"
        return f"{tag} {shown!r} is not a valid {tag.lstrip('!')} ({exc})"
    except MarkedYAMLError:
        return None
    return None


def _syntax_issue(exc: MarkedYAMLError, file: str) -> ConfigIssue:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else None
    column = mark.column + 1 if mark else None
    problem = (exc.problem or "").strip()
    if isinstance(exc, DuplicateKeyError):
        found = re.search(r'duplicate key "(.*?)"', problem)
        key = found.group(1) if found else "?"
        message = f"duplicate key {key!r}: a key may appear only once in a mapping"
    elif "another document" in problem:
        message = "a config file holds one YAML document, but a second one starts here"
    else:
        message = f"YAML syntax error: {problem}"
        context = (exc.context or "").strip()
        if context and exc.context_mark is not None and exc.context_mark is not mark:
            message += f" ({context} at line {exc.context_mark.line + 1})"
        message += _hint(problem)
    return ConfigIssue(file, line, column, "", message)


# Plain words for the parser's messages that mean the indentation is off.
_HINTS = (
    (
        ("expected <block end>", "did not find expected key", "expected <block mapping start>"),
        (
            "; this line is indented differently from the keys around it: line up keys of one"
            " mapping in one column, and indent what belongs to a key (or a '- ' item) further"
            " than the key, with spaces"
        ),
    ),
    (
        ("mapping values are not allowed here",),
        (
            "; a 'key: value' where only a value fits: indent it under its own key, or quote a"
            " value that contains ': '"
        ),
    ),
    (
        ("did not find expected '-' indicator",),
        "; the items of one list start with '- ' in one column: line this one up with the others",
    ),
)


def _hint(problem: str) -> str:
    return next((hint for starts, hint in _HINTS if problem.startswith(starts)), "")


_NUL_MESSAGE = "contains a NUL character (\\0): no path, command, name or value can hold one"


class _TooLarge(Exception):  # noqa: N818 - internal signal, never leaves this module
    def __init__(self, issue: ConfigIssue) -> None:
        self.issue = issue


class _Builder:
    def __init__(self, file: str) -> None:
        self.file = file
        self.keys: dict[KeyPath, Pos] = {}
        self.values: dict[KeyPath, Pos] = {}
        self.issues: list[ConfigIssue] = []
        self._open: set[int] = set()  # what is being copied, to stop alias loops
        self._copied: set[int] = set()  # collections copied once: seen again = an alias
        self._aliases: list[tuple[KeyPath, Any]] = []  # aliases being expanded: path, node
        self._values_left = MAX_VALUES
        self._text_left = MAX_TEXT
        self._aliased_left = MAX_ALIASED_VALUES

    def _located(self, path: KeyPath, message: str, *, at_key: bool = False) -> ConfigIssue:
        first, second = (self.keys, self.values) if at_key else (self.values, self.keys)
        return located(self.file, first.get(path) or second.get(path), path, message)

    def _issue(self, path: KeyPath, message: str, *, at_key: bool = False) -> None:
        self.issues.append(self._located(path, message, at_key=at_key))

    def _spend(self, path: KeyPath, text: int = 0) -> None:
        self._values_left -= 1
        self._text_left -= text
        if self._aliases:
            self._aliased_left -= 1
        if self._values_left >= 0 and self._text_left >= 0 and self._aliased_left >= 0:
            return
        if self._aliased_left < 0:
            what = f"{MAX_ALIASED_VALUES} values repeated through aliases"
        elif self._values_left < 0:
            what = f"{MAX_VALUES} values"
        else:
            what = f"{MAX_TEXT} characters"
        if self._aliases:
            # Said where the outermost alias is used (the collection holding it:
            # ruamel gives an aliased item its anchor's position).
            alias_path, node = self._aliases[0]
            where = alias_path[:-1]
            anchor = getattr(getattr(node, "anchor", None), "value", None)
            defined = self.values.get(alias_path)
            named = f"*{anchor}" if anchor else "an alias"
            if defined is not None:
                named += f" (anchored at line {defined.line})"
            message = (
                f"{named} in here expands the document beyond {what} (a YAML alias bomb?);"
                " aliases may repeat sections, not multiply them"
            )
        else:
            where = path
            message = f"the document holds more than {what}; a config needs far fewer"
        raise _TooLarge(self._located(where, message))

    def plain(self, node: Any, path: KeyPath) -> Any:
        collection = isinstance(node, dict | list)
        if collection and id(node) in self._open:
            self._issue(path, "an alias refers to itself; recursive YAML is not supported")
            return None
        # A collection, or an anchored scalar, is one object however often it is aliased.
        shared = collection or bool(getattr(getattr(node, "anchor", None), "value", None))
        alias = shared and id(node) in self._copied
        if alias:
            self._aliases.append((path, node))
        self._open.add(id(node))
        try:
            if collection:
                self._spend(path)
                self._check_tag(node, path)
                if isinstance(node, dict):
                    return self._mapping(node, path)
                return self._sequence(node, path)
            value = self._scalar(node, path)
            self._spend(path, len(value) if isinstance(value, str) else 0)
        finally:
            self._open.discard(id(node))
            if shared:
                self._copied.add(id(node))
            if alias:
                self._aliases.pop()
        if isinstance(value, str) and "\0" in value:
            self._issue(path, _NUL_MESSAGE)
        return value

    def _check_tag(self, node: Any, path: KeyPath) -> None:
        tag = getattr(node, "tag", None)
        # ruamel gives every collection a Tag object; its value is None when untagged.
        text = str(getattr(tag, "value", tag) or "")
        if text and not text.startswith(_STANDARD_TAG) and not text.startswith("!!"):
            self._issue(path, f"the YAML tag {text} is not supported here")

    def _mapping(self, node: dict[Any, Any], path: KeyPath) -> dict[str, Any]:
        # A tagged collection (``!!omap``, ``!foo [1]``) has no positions of its own.
        lc = (node.lc.data if isinstance(node, CommentedMap) else None) or {}
        out: dict[str, Any] = {}
        for raw_key, raw_value in node.items():
            key = raw_key if isinstance(raw_key, str) else str(raw_key)
            where = (*path, key)
            if raw_key in lc:
                kl, kc, vl, vc = lc[raw_key]
                self.keys[where] = Pos(kl + 1, kc + 1)
                self.values[where] = Pos(vl + 1, vc + 1)
            if not isinstance(raw_key, str):
                self._issue(where, f"key {raw_key!r} must be a string: quote it", at_key=True)
            elif "\0" in key:
                self._issue(where, _NUL_MESSAGE, at_key=True)
            self._spend(where, len(key))
            out[key] = self.plain(raw_value, where)
        return out

    def _sequence(self, node: list[Any], path: KeyPath) -> list[Any]:
        lc = (node.lc.data if isinstance(node, CommentedSeq) else None) or {}
        out: list[Any] = []
        for index, item in enumerate(node):
            where = (*path, index)
            if index in lc:
                line, col = lc[index][:2]
                self.values[where] = Pos(line + 1, col + 1)
            out.append(self.plain(item, where))
        return out

    def _scalar(self, node: Any, path: KeyPath) -> Any:
        if isinstance(node, TaggedScalar):
            self._check_tag(node, path)
        value = _plain_scalar(node)
        # A hexadecimal number is read whatever its length, but printing it in a
        # message would fail (str() of an int is bounded like int() of a string).
        if isinstance(value, int) and value.bit_length() > _MAX_BITS:
            message = f"a number of {value.bit_length()} bits is far too large for any setting"
            raise _TooLarge(self._located(path, message))
        return value


def _plain_scalar(node: Any) -> Any:
    """A scalar ruamel constructed (its subclasses keep formatting) as the plain type
    the checks want (a ScalarBoolean is an int!)."""
    if node is None or type(node) in (str, int, float, bool):
        return node
    if type(node).__name__ == "ScalarBoolean":
        return bool(node)
    if isinstance(node, TaggedScalar):
        return str(node.value)
    for kind in (str, float, int):
        if isinstance(node, kind):
            return kind(node)
    # Dates, binary data and sets have no JSON form; they stay as they are
    # and fail the schema's type checks with a message naming what they are.
    return node


def describe(value: Any) -> str:  # noqa: PLR0911 - one return per kind reads best
    """What a YAML value is, in words, for "must be X, not Y" messages."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        shown = str(value)
        if len(shown) > _SHOWN:
            shown = f"{shown[:20]}… ({len(shown)} digits)"
        return f"the number {shown}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dt.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, bytes):
        return "binary data"
    if isinstance(value, set | frozenset):
        return "a set"
    return f"a YAML {type(value).__name__}"
