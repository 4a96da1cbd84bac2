"""The sandbox templates render in, and the limits it enforces while they render.

Jinja2's immutable sandbox with no globals but the documented names and limits on
every value as it is built, so that a slip in a config, or a ConfigMap written to hurt,
cannot stall the kubelet's Allocate (which has no deadline) or exhaust the node's
memory. The limits keep the daemon serving; they are no boundary against the config
author's choice of devices.

Every value built is measured before use: its length, its size as printed with shared
parts counted in full (``[[x] * 9] * 9`` nine levels deep is as large as its
``tojson``), an integer's bits. Operations that multiply are checked before they run.
One allocation's work is bounded, and its time: the rendering thread's CPU time (what
renders on an idle node renders on a busy one) and, however busy, the wall clock. No
checked step takes long, so the deadline holds to within milliseconds.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from jinja2 import StrictUndefined, Undefined
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_VALUE_CHARS = 65_536  # one rendered value; a kubelet response must stay far below 4 MiB
# One rendered value in UTF-8: NAME=value must fit the kernel's 128 KiB for one
# string of a process's environment (MAX_ARG_STRLEN), or the container cannot start.
MAX_VALUE_BYTES = 65_536
# Everything one allocation renders (env and annotation names and values, mount
# paths), in UTF-8: half the 2 MiB a process's environment and arguments may take
# together (ARG_MAX), a quarter of the kubelet's 4 MiB answer.
MAX_ALLOCATION_BYTES = 1_048_576
MAX_TEMPLATE_CHARS = 16_384  # one template source (or literal value) in the config
MAX_VALUE_SIZE = 1_048_576  # any value a template builds, as printed, shared parts in full
MAX_WORK = 8 * MAX_VALUE_SIZE  # per allocation: the sizes of every value built, and loop steps
MAX_RENDER_SECONDS = 0.5  # per allocation, CPU time of the thread rendering it
MAX_RENDER_WALL_SECONDS = 5.0  # per allocation, wall clock, however busy the machine
MAX_LOOP_ITERATIONS = 100_000  # per allocation, across every template and nested loop
MAX_WIDTH = 4_096  # widths and counts handed to filters, methods and format specs
MAX_EXPONENT = 1_024
MAX_INT_BITS = 8_192

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_DIGITS = re.compile(r"\d+")
_WIDTH_FILTERS = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice"})
_BANNED_FILTERS = frozenset({"random"})  # an allocation must be deterministic
# Filters that print their whole input (``pprint`` slowly) before any cap could look at
# the result.
_PRINTING_FILTERS = frozenset(
    {"tojson", "pprint", "string", "urlencode", "xmlattr", "e", "escape", "forceescape"}
)
# str methods that multiply their input by an argument; a template never needs them.
_REFUSED_METHODS = frozenset({"expandtabs", "translate", "maketrans"})


class SliceSpent(SecurityError):  # noqa: N818 -- not an error: a signal to render again
    """A render given a short slice of time (on the event loop) needs longer: it
    is given up and done again with the whole budget, in a worker thread."""


class _Budget:
    """What the allocation being rendered may still spend, and sizes measured so far:
    ``with allocation_budget():`` every template rendered inside shares one (past
    ``slice_seconds``, SliceSpent). A class: a ``contextlib`` generator cost more than
    the plain templates it is around."""

    _token: contextvars.Token[_Budget | None]  # set on entering

    def __init__(self, slice_seconds: float | None = None) -> None:
        self.iterations = MAX_LOOP_ITERATIONS
        self.work = MAX_WORK
        now = time.monotonic()
        # Past ``deadline`` (wall clock, cheap to read) the thread's CPU time
        # (a system call) is read: the CPU budget cannot run out sooner.
        self.deadline = now + MAX_RENDER_SECONDS
        self.wall_deadline = now + MAX_RENDER_WALL_SECONDS
        self.cpu_started = time.thread_time()
        self.slice_seconds = slice_seconds
        self.slice_end = self.deadline if slice_seconds is None else now + slice_seconds
        # id -> (the value, kept alive so its id is not reused; its size). Values
        # a template sees never change: the sandbox is immutable.
        self._sizes: dict[int, tuple[Any, int]] = {}

    def __enter__(self) -> None:
        self._token = _BUDGET.set(self)

    def __exit__(self, *exc_info: object) -> None:
        _BUDGET.reset(self._token)

    def spend(self, units: int) -> None:
        self.work -= units
        if self.work < 0:
            raise SecurityError(
                f"the templates of one allocation built more than {MAX_WORK} characters in all"
            )
        now = time.monotonic()
        if now > self.slice_end:
            if self.slice_end < self.deadline:
                raise SliceSpent(f"rendering needs more than its slice of {self.slice_seconds}s")
            self._check_time(now)

    def _check_time(self, now: float) -> None:
        cpu_left = MAX_RENDER_SECONDS - (time.thread_time() - self.cpu_started)
        if cpu_left <= 0:
            raise SecurityError(f"rendering one allocation took longer than {MAX_RENDER_SECONDS}s")
        if now > self.wall_deadline:
            raise SecurityError(
                "rendering one allocation took longer than"
                f" {MAX_RENDER_WALL_SECONDS}s on a busy machine"
            )
        self.deadline = min(now + cpu_left, self.wall_deadline)
        self.slice_end = self.deadline

    def size(self, value: Any, limit: int = MAX_VALUE_SIZE) -> int:
        """About how many characters ``value`` prints as, up to about ``limit``."""
        scalar = _scalar_size(value)
        if scalar is not None:
            return scalar
        known = self._sizes.get(id(value))
        if known is not None:
            return known[1]
        items: Iterable[Any]
        if isinstance(value, list | tuple | set | frozenset):
            items = value
        elif type(value) is dict or isinstance(value, Mapping):  # dict first: ABCs are slow
            items = itertools.chain.from_iterable(value.items())
        else:
            return 1  # iterators and Jinja's own objects: measured when consumed
        total = 2
        for item in items:
            total += self.size(item, limit - total) + 2
            if total > limit:
                return total  # partial: not remembered
        self._sizes[id(value)] = (value, total)
        return total


def _scalar_size(value: Any) -> int | None:
    if isinstance(value, str | bytes):
        return len(value)
    if value is None or isinstance(value, bool | float):
        return 8
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    return None


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "genericdp_render_budget", default=None
)


allocation_budget = _Budget


def _budget() -> _Budget:
    """The current allocation's budget; outside ``allocation_budget()`` a fresh one per use."""
    return _BUDGET.get() or _Budget()


def built(value: Any) -> Any:
    """Every value a template builds passes here before it is used."""
    if isinstance(value, str | bytes | list | tuple) and len(value) > MAX_VALUE_CHARS:
        raise SecurityError(f"a value of {len(value)} items exceeds {MAX_VALUE_CHARS}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError(f"an integer of more than {MAX_INT_BITS} bits")
    budget = _budget()
    size = budget.size(value)
    if size > MAX_VALUE_SIZE:
        raise SecurityError(f"a value exceeds {MAX_VALUE_SIZE} characters as printed")
    budget.spend(size)
    return value


def _fits(what: str, size: int, limit: int = MAX_VALUE_SIZE) -> None:
    if size > limit:
        raise SecurityError(f"{what} of about {size} characters exceeds {limit}")


def counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """Every ``{% for %}`` iterates through this (see ``_Harden``)."""
    budget = _budget()
    for item in iterable:
        budget.iterations -= 1
        if budget.iterations < 0:
            raise SecurityError(f"more than {MAX_LOOP_ITERATIONS} loop iterations")
        budget.spend(1)
        yield item


def concat(*parts: Any) -> str:
    """The ``~`` operator, with the size cap (``_Harden`` routes it here)."""
    budget = _budget()
    _fits("'~'", sum(budget.size(p) for p in parts), MAX_VALUE_CHARS)
    return cast("str", built("".join(str(p) for p in parts)))


_INTERNAL_CALLABLES = (counted, concat, built)


def _check_width(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WIDTH:
        raise SecurityError(f"{what} {value} exceeds {MAX_WIDTH}")


def _check_percent_format(fmt: str, args: Any) -> None:
    """Refuse ``%`` formats whose widths, or whose fields times their arguments,
    could build a huge string (``'%(a)s' * 9999 % {'a': long}`` reuses one)."""
    fields = 0
    for match in _PERCENT_SPEC.finditer(fmt):
        fields += 1
        for number in match.groups():
            if number == "*":
                raise SecurityError("'*' widths are not allowed in % formats")
            if number is not None:
                _check_width(int(number), "format width")
    _fits("% formatting", len(fmt) + fields * _budget().size(args))


def _check_brace_format(fmt: str, args: Any) -> None:
    fields = 0
    for _, name, spec, _ in string.Formatter().parse(fmt):
        fields += name is not None
        if not spec:
            continue
        if "{" in spec:
            raise SecurityError("nested fields in format specs are not allowed")
        for number in _DIGITS.findall(spec):
            _check_width(int(number), "format width")
    _fits("format()", len(fmt) + fields * _budget().size(args))


def _check_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple) and isinstance(times, int):
            if len(seq) * times > MAX_VALUE_CHARS:
                raise SecurityError(f"repetition would exceed {MAX_VALUE_CHARS} items")
            _fits("repetition", _budget().size(seq) * times)


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(exponent, int | float) and abs(exponent) > MAX_EXPONENT:
        raise SecurityError(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    # (2 ** 1024) ** 1024 passes the exponent check but is a megabit integer.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and base.bit_length() * exponent > MAX_INT_BITS
    ):
        raise SecurityError(f"the result of ** would exceed {MAX_INT_BITS} bits")


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = len(text) + 1 if old == "" else text.count(old)
        if len(text) + hits * (len(new) - len(old)) > MAX_VALUE_CHARS:
            raise SecurityError(f"replace would exceed {MAX_VALUE_CHARS} characters")


def check_join(separator: Any, items: list[Any]) -> None:
    if isinstance(separator, str) and len(separator) * max(len(items) - 1, 0) > MAX_VALUE_CHARS:
        raise SecurityError(f"join would exceed {MAX_VALUE_CHARS} characters")
    _fits("join", _budget().size(items))


def _check_indent(text: Any, width: Any) -> None:
    lines = text.count("\n") + 1 if isinstance(text, str) else 0
    size = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    if lines * size > MAX_VALUE_CHARS:
        raise SecurityError(f"indent would exceed {MAX_VALUE_CHARS} characters")


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in filter with the width and size caps (``wraps`` keeps ``pass_*`` markers)."""
    passes_first = hasattr(func, "jinja_pass_arg")

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        head, rest = (args[:1], list(args[1:])) if passes_first else ((), list(args))
        value, params = (rest[0], rest[1:]) if rest else (None, [])
        if name in _WIDTH_FILTERS:
            for param in (*params, *kwargs.values()):
                _check_width(param, f"{name} argument")
        if name == "indent":
            _check_indent(value, params[0] if params else kwargs.get("width", 4))
        elif name == "format" and isinstance(value, str):
            _check_percent_format(value, (params, kwargs))
        elif name == "replace" and len(params) >= 2:  # noqa: PLR2004 -- str.replace(old, new)
            _check_replace(value, params[0], params[1])
        elif name == "join" and value is not None:
            value = list(value)
            check_join(params[0] if params else kwargs.get("d", ""), value)
        elif name == "sum":
            start = params[1] if len(params) > 1 else kwargs.get("start", 0)
            if not isinstance(start, int | float):
                raise SecurityError("sum adds numbers; its start must be a number")
        elif name in _PRINTING_FILTERS:
            _fits(name, _budget().size(value), MAX_VALUE_CHARS)
        return built(func(*head, value, *params, **kwargs))

    return guarded


class _Sandbox(ImmutableSandboxedEnvironment):
    # Intercepting also stops the optimizer folding `9 ** 9 ** 9` at compile time.
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        super().__init__(
            undefined=StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
            finalize=finalize,
        )
        # range, cycler, joiner, lipsum, namespace, dict: none is documented and
        # some are ways to spend time or memory; templates see TEMPLATE_NAMES only.
        self.globals.clear()
        self.filters = {
            name: _guard_filter(name, func)
            for name, func in self.filters.items()
            if name not in _BANNED_FILTERS
        }

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "%" and isinstance(left, str):
            _check_percent_format(left, right)
        return built(super().call_binop(context, operator, left, right))

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr in _REFUSED_METHODS and isinstance(obj, str | bytes):
            return False
        return super().is_safe_attribute(obj, attr, value)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        @functools.wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> str:
            _check_brace_format(fmt, (args, kwargs))
            return cast("str", built(wrapped(*args, **kwargs)))

        return checked

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        if any(obj is internal for internal in _INTERNAL_CALLABLES):
            return obj(*args)  # Jinja adds `_loop_vars` inside loops; ours need none
        name = getattr(obj, "__name__", "")
        owner = getattr(obj, "__self__", None)
        if name not in ("format", "format_map"):  # sandboxed by wrap_str_format
            for arg in (*args, *kwargs.values()):
                _check_width(arg, f"argument of {name or 'call'}()")
        if isinstance(owner, str) and name == "replace" and len(args) >= 2:  # noqa: PLR2004 -- str.replace(old, new)
            _check_replace(owner, args[0], args[1])
        if isinstance(owner, str) and name == "join" and args:
            args = (list(args[0]), *args[1:])
            check_join(owner, args[0])
        return built(super().call(context, obj, *args, **kwargs))


def finalize(value: Any) -> Any:
    """``{{ x }}`` of a missing NUMA node or major renders empty, not ``None``;
    a list holding undefined values fails like the value itself would
    (``str()`` of a list would print ``Undefined`` instead). What is printed is
    measured first: ``str()`` of a large nested value is built whole."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, Undefined):
                str(item)  # StrictUndefined raises the usual "has no attribute" error
    _fits("output", _budget().size(value), MAX_VALUE_CHARS)
    return value


SANDBOX = _Sandbox()
