"""The error tree drawn in errors.py's docstring is the real one: every subclass
of GenericdpError in src/ appears, under its own parent."""

from __future__ import annotations

import importlib
import pkgutil
import re

import genericdp
from genericdp import errors
from genericdp.errors import GenericdpError

_NODE = re.compile(r"^(?P<indent>[ │├└─]*?)(?:[├└]── )?(?P<name>[A-Z]\w*Error)\b")


def _drawn() -> dict[str, str | None]:
    """Each class drawn, with the class drawn as its parent (None for the root)."""
    assert errors.__doc__ is not None
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name) of the open branches
    for line in errors.__doc__.splitlines():
        found = _NODE.match(line.strip("\n").removeprefix("    "))
        if found is None:
            continue
        column = found.start("name")
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[found.group("name")] = stack[-1][1] if stack else None
        stack.append((column, found.group("name")))
    return parents


def _subclasses(cls: type[Exception]) -> list[type[Exception]]:
    found: list[type[Exception]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_the_drawn_tree_is_every_error_under_its_parent() -> None:
    """Each GenericdpError subclass of every module is drawn once, below its base."""
    for module in pkgutil.walk_packages(genericdp.__path__, "genericdp."):
        if module.name != "genericdp.__main__":
            importlib.import_module(module.name)
    real = {
        sub.__name__: sub.__base__.__name__
        for sub in _subclasses(GenericdpError)
        if sub.__module__.startswith("genericdp.") and sub.__base__ is not None
    }
    assert _drawn() == {"GenericdpError": None, **real}
