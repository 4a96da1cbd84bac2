"""The key that tells squat's groups of paths apart, for ``groupBy: {pathRegex: ...}``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from genericdp.config.regex import compile_regex


def group_regex(groups: Sequence[Sequence[str]]) -> str | None:
    """A pathRegex whose key is the same for the paths of one group and differs between
    groups, or None when there is none this simple search finds. The regex is the
    alternation of the keys, checked against every path (leftmost match) before use.
    """
    keys: list[str] = []
    for i, paths in enumerate(groups):
        others = [p for j, g in enumerate(groups) if j != i for p in g]
        key = _distinct_common(paths, others)
        if key is None:
            return None
        keys.append(key)
    ordered = sorted(set(keys), key=lambda k: (-len(k), k))
    regex = "(" + "|".join(re.escape(k) for k in ordered) + ")"
    try:
        compiled = compile_regex(regex)
    except ValueError:
        return None
    for key, paths in zip(keys, groups, strict=True):
        for path in paths:
            found = compiled.search(path)
            if found is None or found[1] != key:
                return None
    return regex


def _distinct_common(paths: Sequence[str], others: Sequence[str]) -> str | None:
    """The longest substring of every one of ``paths`` found in none of ``others``
    (the leftmost in ``paths[0]`` of those as long), or None; linear in the total
    length, by a suffix automaton of ``paths[0]``."""
    sam = _Automaton(paths[0])
    common = list(sam.length)
    for path in paths[1:]:
        common = [min(c, m) for c, m in zip(common, sam.matched(path), strict=True)]
    seen = [0] * len(sam.length)
    for other in others:
        seen = [max(s, m) for s, m in zip(seen, sam.matched(other), strict=True)]
    found = [  # (-length, start): the longest first, then the leftmost
        (-common[state], sam.first_end[state] - common[state] + 1)
        for state in range(1, len(sam.length))
        if common[state] > max(sam.length[sam.link[state]], seen[state])
    ]
    if not found:
        return None
    negative_length, start = min(found)
    return paths[0][start : start - negative_length]


class _Automaton:
    """The suffix automaton of one string: a state per class of substrings that end
    at the same positions (``length``: the longest; ``link``: the suffix link)."""

    def __init__(self, text: str) -> None:
        self.length = [0]
        self.link = [-1]
        self.next: list[dict[str, int]] = [{}]
        self.first_end = [-1]  # where the state's substrings first end in ``text``
        last = 0
        for index, char in enumerate(text):
            current = self._add(self.length[last] + 1, index)
            state = last
            while state != -1 and char not in self.next[state]:
                self.next[state][char] = current
                state = self.link[state]
            if state == -1:
                self.link[current] = 0
            else:
                target = self.next[state][char]
                if self.length[state] + 1 == self.length[target]:
                    self.link[current] = target
                else:
                    clone = self._add(self.length[state] + 1, self.first_end[target])
                    self.next[clone] = dict(self.next[target])
                    self.link[clone] = self.link[target]
                    while state != -1 and self.next[state].get(char) == target:
                        self.next[state][char] = clone
                        state = self.link[state]
                    self.link[target] = self.link[current] = clone
            last = current
        self._by_length = sorted(range(len(self.length)), key=self.length.__getitem__)

    def _add(self, length: int, first_end: int) -> int:
        self.length.append(length)
        self.link.append(-1)
        self.next.append({})
        self.first_end.append(first_end)
        return len(self.length) - 1

    def matched(self, other: str) -> list[int]:
        """Per state, the length of the longest of its substrings found in ``other``."""
        best = [0] * len(self.length)
        state = length = 0
        for char in other:
            while state and char not in self.next[state]:
                state = self.link[state]
                length = self.length[state]
            if char in self.next[state]:
                state = self.next[state][char]
                length += 1
            best[state] = max(best[state], length)
        for state in reversed(self._by_length):  # longest first: a suffix is found too
            parent = self.link[state]
            if best[state] and parent > 0:
                best[parent] = self.length[parent]
        return best
