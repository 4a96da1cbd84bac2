"""The fast path of reading a config's YAML: libyaml's parser, for the usual file.

ruamel.yaml's round-trip reader (``yamlpos``) is pure Python and gathers
comments token by token: 100 resources took about 0.2 s of CPU to read, at
every start and reload. libyaml's parser (``ruamel.yaml.clib``) reads the same
text in a few milliseconds, and its events carry the line and column of every
key and value. This module builds the plain data and the positions straight
from those events, with ruamel's own YAML 1.2 resolver and constructor for
scalars, so a file read here gives exactly what the round-trip reader gives.

It reads only what needs no judgement: one document, a mapping at the top,
string keys written once, no anchors, aliases, merge keys, tags, directives
or empty values, nothing past the size limits, no NUL, no tab or Unicode line
separator, nesting of at most ``MAX_DEPTH``. On anything else, and on any
error, it returns None and the round-trip reader reads the file again: every
problem is found and worded there, so messages do not depend on which reader
ran (tests/test_config_yamlfast.py compares the two on every YAML file of the
repository).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import TaggedScalar
from ruamel.yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from ruamel.yaml.nodes import ScalarNode

try:
    from _ruamel_yaml import CParser
except ImportError:  # no wheel for this platform: the round-trip reader does it all
    CParser = None

# Characters the two readers treat differently: ruamel refuses a tab inside a
# plain scalar that libyaml (rightly) takes, and libyaml counts NEL, LS and PS
# as line breaks (YAML 1.1), which would shift every line after them.
_ROUND_TRIP_ONLY = re.compile("[\t\x85\u2028\u2029]")
# Deeper than any config goes (a resource is about five levels); deeper files
# go to the round-trip reader, which says where nesting got too deep.
MAX_DEPTH = 64
_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_ENDS = (MappingEndEvent, SequenceEndEvent)

Line = int
Column = int
Where = tuple[Line, Column]  # 1-based
KeyPath = tuple[str | int, ...]
_MAX_BITS = 3 * 4300  # larger ints have too many digits for str() (sys.int_info)


@dataclass(frozen=True)
class Read:
    """A file read on the fast path: plain data, where each key and value starts."""

    data: dict[str, Any]
    keys: dict[KeyPath, Where]
    values: dict[KeyPath, Where]


class _Declined(Exception):  # noqa: N818 - internal signal, never leaves this module
    """Not for the fast path: the round-trip reader reads the file."""


def read_fast(text: str, *, max_values: int, max_text: int) -> Read | None:
    """``text`` read with libyaml, or None when the round-trip reader must read it.

    ``max_values`` and ``max_text`` are the round-trip reader's limits: a file
    that reaches them is left to it, which says where.
    """
    if CParser is None or _ROUND_TRIP_ONLY.search(text):
        return None
    try:
        return _Reader(CParser(text), max_values, max_text).document()
    except _Declined:
        return None
    except Exception:  # noqa: BLE001 -- the fast reader declines; the full parser reports
        return None


class _Reader:
    """Plain data and positions from one stream of libyaml events."""

    def __init__(self, parser: Any, max_values: int, max_text: int) -> None:
        self._next: Callable[[], Any] = parser.get_event
        self._values_left = max_values
        self._text_left = max_text
        yaml = YAML(typ="rt", pure=True)
        yaml.version = (1, 2)  # as the round-trip reader: "on", "yes" and "no" are strings
        self._resolve = yaml.resolver.resolve
        self._construct = yaml.constructor.construct_object
        self.keys: dict[KeyPath, Where] = {}
        self.values: dict[KeyPath, Where] = {}

    def document(self) -> Read:
        self._expect(StreamStartEvent)
        start = self._expect(DocumentStartEvent)
        if start.version is not None or start.tags:
            raise _Declined  # a %YAML or %TAG directive
        root = self._next()
        if type(root) is not MappingStartEvent:
            raise _Declined  # not a mapping: the loader's own message
        data = self._collection(root)
        if not isinstance(data, dict):
            raise TypeError("data is not dict")
        self._fill(data, root)
        self._expect(DocumentEndEvent)
        self._expect(StreamEndEvent)  # a second document is the round-trip reader's to report
        return Read(data, self.keys, self.values)

    def _expect(self, kind: type) -> Any:
        event = self._next()
        if type(event) is not kind:
            raise _Declined
        return event

    def _fill(self, root: dict[str, Any], root_event: Any) -> None:
        """Every key and value of the document under ``root``, without recursion."""
        # (collection, its path, the open key of a mapping or None)
        stack: list[tuple[dict[str, Any] | list[Any], KeyPath]] = [(root, ())]
        while stack:
            container, path = stack[-1]
            event = self._next()
            kind = type(event)
            if kind in _ENDS:
                stack.pop()
                continue
            if isinstance(container, dict):
                key = self._key(event, container)
                where: KeyPath = (*path, key)
                self.keys[where] = _at(event)
                event = self._next()
                kind = type(event)
            else:
                where = (*path, len(container))
            self.values[where] = _at(event)
            if kind is ScalarEvent:
                value: Any = self._scalar(event)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                if len(stack) >= MAX_DEPTH:
                    raise _Declined
                value = self._collection(event)
                stack.append((value, where))
            else:
                raise _Declined  # an alias
            if isinstance(container, dict):
                container[where[-1]] = value  # type: ignore[index]
            else:
                container.append(value)
        self.values[()] = _at(root_event)

    def _collection(self, event: Any) -> dict[str, Any] | list[Any]:
        if event.anchor is not None or event.tag is not None:
            raise _Declined
        self._spend(0)
        return {} if type(event) is MappingStartEvent else []

    def _key(self, event: Any, mapping: dict[str, Any]) -> str:
        """A key written as a string, once; anything else is declined."""
        if type(event) is not ScalarEvent or event.anchor is not None or event.tag is not None:
            raise _Declined  # a collection or alias as key, an anchored or tagged key
        key = event.value
        if str(self._resolve(ScalarNode, key, event.implicit)) != _STR:
            raise _Declined  # a number, boolean, null or merge key (<<)
        if key in mapping or "\0" in key:
            raise _Declined
        self._spend(len(key))
        return str(key)

    def _scalar(self, event: Any) -> Any:
        if event.anchor is not None or event.tag is not None:
            raise _Declined
        raw = event.value
        if not raw and event.implicit[0]:
            # An empty value (``key:``): the readers place it differently at
            # the end of a document, and it is a schema error in a config anyway.
            raise _Declined
        tag = self._resolve(ScalarNode, raw, event.implicit)
        text = str(tag)
        if text == _STR:
            if "\0" in raw:
                raise _Declined
            self._spend(len(raw))
            return str(raw)
        self._spend(0)
        if text == _NULL:
            return None
        node = ScalarNode(tag, raw, event.start_mark, event.end_mark, style=event.style)
        value = plain_scalar(self._construct(node))
        if isinstance(value, int) and value.bit_length() > _MAX_BITS:
            raise _Declined  # the round-trip reader says where, and why
        return value

    def _spend(self, text: int) -> None:
        """Counted as the round-trip reader counts; at its limits, it takes over."""
        self._values_left -= 1
        self._text_left -= text
        if self._values_left < 0 or self._text_left < 0:
            raise _Declined


def _at(event: Any) -> Where:
    mark = event.start_mark
    return mark.line + 1, mark.column + 1


def plain_scalar(node: Any) -> Any:
    """A scalar ruamel constructed, as the plain value the checks want.

    ruamel subclasses int, float, str and bool to keep formatting; the checks
    downstream want the plain types (a ScalarBoolean is an int!).
    """
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
