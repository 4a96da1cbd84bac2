"""Go's ``path.Match`` globs, as squat reads them, written as genericdp (fnmatch) globs."""

from __future__ import annotations


def go_glob(pattern: str) -> str:
    """A Go ``path.Match`` pattern as a genericdp glob (fnmatch).

    Go escapes with ``\\`` and negates a class with ``^``; fnmatch has no
    escapes (``[*]`` is a literal star) and negates with ``!``, so Go's
    ``[!0]`` (the characters ``!`` and ``0``) is written ``[0!]``. A component
    ``**`` is one name in Go but any depth in genericdp, so it becomes ``*``.
    A trailing ``/`` goes: Go's glob names the same directory without it.
    """
    if len(pattern) > 1:
        pattern = pattern.rstrip("/")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(fnmatch_literal(pattern[i + 1]))
            i += 2
            continue
        if char == "[" and pattern.find("]", i + 2) > 0:
            text, i = _go_class(pattern, i)
            out.append(text)
            continue
        out.append(char)
        i += 1
    return "/".join("*" if part == "**" else part for part in "".join(out).split("/"))


def go_bang_class(pattern: str) -> bool:
    """Whether a class of ``pattern`` starts with ``!``: a negation in fnmatch and in
    shells, but the character ``!`` itself in Go, which is what squat reads."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern.startswith("[!", i):
            return True
        i += 1
    return False


def _go_class(pattern: str, start: int) -> tuple[str, int]:
    """The Go class at ``pattern[start] == "["`` as an fnmatch class; the index after it."""
    i = start + 1
    negated = pattern[i : i + 1] == "^"
    i += negated
    items: list[tuple[str, str]] = []  # (lo, hi) character ranges, a single character lo == hi
    while i < len(pattern) and (pattern[i] != "]" or not items):
        lo, i = _class_char(pattern, i)
        hi = lo
        if pattern[i : i + 1] == "-" and pattern[i + 1 : i + 2] not in ("", "]"):
            hi, i = _class_char(pattern, i + 1)
        items.append((lo, hi))
    i += 1  # the "]"
    # fnmatch reads "!" first as a negation and "]" first as a member: order the
    # members so that neither is misread ("-" last, a member in its own right).
    split: list[tuple[str, str]] = []
    for lo, hi in items:
        if lo == "!" and hi > "!":
            split += [("!", "!"), ('"', hi)]
        else:
            split.append((lo, hi))
    if not negated and all(item == ("!", "!") for item in split):
        return "!", i
    ordered = sorted(split, key=lambda item: (item[0] != "]", item == ("!", "!"), item[0] == "-"))
    body = "".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in ordered)
    return f"[{'!' if negated else ''}{body}]", i


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    if pattern[i] == "\\" and i + 1 < len(pattern):
        return pattern[i + 1], i + 2
    return pattern[i], i + 1


def fnmatch_literal(text: str) -> str:
    """``text`` as an fnmatch pattern matching only itself (squat compares serials exactly)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def go_pattern_problem(pattern: str) -> str | None:
    """Why Go's ``path.Match`` refuses ``pattern`` (ErrBadPattern), or None."""
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern):
                return "it ends with a '\\'"
            i += 2
            continue
        if char == "[":
            end = i + 1
            if pattern[end : end + 1] == "^":
                end += 1
            if pattern[end : end + 1] == "]":
                return "an empty '[]' class"
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            if end >= len(pattern):
                return "a '[' with no ']'"
            i = end + 1
            continue
        i += 1
    return None
