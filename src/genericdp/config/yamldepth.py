"""How deeply a YAML text nests, found before and after ruamel reads it.

ruamel's work per token grows with flow nesting depth (ten thousand "[" take minutes),
so ``flow_too_deep`` checks it first, with a scan that knows just enough YAML (quotes,
comments). Block nesting costs ruamel nothing until its recursion fails;
``too_deep_for_parser`` then locates it from the event stream.
"""

from __future__ import annotations

import contextlib
import re

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.reader import ReaderError

from genericdp.errors import ConfigIssue

MAX_FLOW_DEPTH = 64
# ruamel scans a comment in time quadratic in its length: one comment line of
# 1 MiB took 16-20 s of CPU on every node at every reload. A comment is prose.
MAX_COMMENT_CHARS = 4096
_FLOW_SIGNIFICANT = re.compile(r"[\[\]{}'\"#]")
# What may precede a "[", "{" or quote that starts a node: in block context
# whitespace only (else it is inside a plain scalar), in a flow collection also these.
_BLOCK_NODE_AFTER = " \t\n"
_FLOW_NODE_AFTER = " \t\n[{,:"
_TOO_DEEP = f"collections nested more than {MAX_FLOW_DEPTH} deep here; a config needs a handful"


def flow_too_deep(text: str, file: str) -> ConfigIssue | None:
    """An issue at the first "[" or "{" nested deeper than MAX_FLOW_DEPTH, or at the
    first comment longer than MAX_COMMENT_CHARS, if any."""
    depth = 0
    pos = 0
    while (found := _FLOW_SIGNIFICANT.search(text, pos)) is not None:
        at = found.start()
        char = text[at]
        starts_node = at == 0 or text[at - 1] in (_FLOW_NODE_AFTER if depth else _BLOCK_NODE_AFTER)
        pos = at + 1
        if char == "#" and (at == 0 or text[at - 1] in " \t\n"):
            end = text.find("\n", at + 1)
            pos = len(text) if end < 0 else end + 1
            if pos - at - 1 > MAX_COMMENT_CHARS:
                message = f"a comment of {pos - at - 1} characters; at most {MAX_COMMENT_CHARS}"
                return issue_at(text, at, file, message + " (split it over lines)")
        elif char in "'\"" and starts_node:
            pos = _after_quoted(text, at)
        elif char in "[{" and starts_node:
            depth += 1
            if depth > MAX_FLOW_DEPTH:
                return issue_at(text, at, file, _TOO_DEEP)
        elif char in "]}" and depth:
            depth -= 1
    return None


def issue_at(text: str, at: int, file: str, message: str) -> ConfigIssue:
    """An issue at offset ``at`` of ``text``."""
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return ConfigIssue(file, line, column, "", message)


def _after_quoted(text: str, start: int) -> int:
    """Just after the quoted scalar starting at ``start`` ('' and \\" are escapes)."""
    quote = text[start]
    pos = start + 1
    while True:
        end = text.find(quote, pos)
        if end < 0:
            return len(text)
        if quote == "'" and text.startswith("''", end):
            pos = end + 2
        elif quote == '"' and _escaped(text, end):
            pos = end + 1
        else:
            return end + 1


def _escaped(text: str, at: int) -> bool:
    before = at
    while before > 0 and text[before - 1] == "\\":
        before -= 1
    return (at - before) % 2 == 1


def too_deep_for_parser(text: str, file: str) -> ConfigIssue:
    """Where block nesting got too deep for the parser's recursion."""
    depth = 0
    with contextlib.suppress(MarkedYAMLError, ReaderError, RecursionError):
        for event in YAML(typ="rt", pure=True).parse(text):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_FLOW_DEPTH:
                    mark = event.start_mark
                    return ConfigIssue(file, mark.line + 1, mark.column + 1, "", _TOO_DEEP)
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    return ConfigIssue(file, 1, 1, "", "is nested too deeply for a config")
