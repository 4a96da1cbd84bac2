"""The template sandbox: no private attributes, no code, no files, bounded work."""

from __future__ import annotations

import time

import pytest

from genericdp.allocation.plan import plan_allocation
from genericdp.config import sandbox
from genericdp.config.model import AllocateSpec, GlobMatcher, ResourceDefinition, frozen_map
from genericdp.config.sandbox import MAX_RENDER_SECONDS
from genericdp.config.templates import TemplateSyntaxErrors, compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import TemplateRenderError

UNIT = Unit("u0", (DeviceNode("/dev/null", "/dev/null", 1, 3, "mem"),))


def render(source: str) -> str:
    allocate = AllocateSpec(env=frozen_map({"V": source}))
    definition = ResourceDefinition(
        name="example.com/null",
        match=(GlobMatcher("/dev/null"),),
        allocate=allocate,
        templates=compile_templates(allocate),
    )
    return plan_allocation(definition, [UNIT]).receives.env["V"]


def refused(source: str) -> str:
    """The message of whichever stage refuses ``source`` (compile or render)."""
    try:
        render(source)
    except TemplateSyntaxErrors as exc:
        return str(exc)
    except TemplateRenderError as exc:
        return str(exc)
    pytest.fail(f"{source!r} was not refused")


def reason(source: str) -> str:
    """Why ``source`` was refused, without the source the message quotes first."""
    return refused(source).rsplit(": ", 1)[-1]


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{ ''.__class__ }}", "'__class__' is private"),
        ("{{ ''['__class__'] }}", "'__class__' is private"),
        ("{{ cycler.__init__.__globals__ }}", "unknown name 'cycler'"),
        ("{{ joiner }}", "unknown name 'joiner'"),
        ("{{ lipsum(100000) }}", "unknown name 'lipsum'"),
        ("{{ namespace(a=1) }}", "unknown name 'namespace'"),
        ("{{ self._TemplateReference__context }}", "'_TemplateReference__context' is private"),
        ("{{ self }}", "unknown name 'self'"),
        ("{{ range(10 ** 9) | list }}", "unknown name 'range'"),
    ],
)
def test_escapes_are_refused_at_compile_time(source: str, fragment: str) -> None:
    """Known sandbox escapes never reach the renderer."""
    with pytest.raises(TemplateSyntaxErrors, match=fragment):
        render(source)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{ '{0.__class__}'.format(units) }}", "unsafe"),
        ("{{ '{id.__class__}'.format_map(units[0]) }}", "unsafe"),
        ("{{ [units[0]] | map(attribute='nope') | list }}", "no attribute 'nope'"),
        ("{% set a = '_' ~ '_class_' ~ '_' %}{{ units[a] }}", ""),
        ("{{ units | attr('__class__') }}", "unsafe"),
        ("{{ units | map(attribute='__class__') | list }}", "unsafe"),
        ("{{ units.append(1) }}", "unsafe"),
        ("{{ units[0].attributes.update({'a': 1}) }}", "unsafe"),
    ],
)
def test_escapes_are_refused_at_render_time(source: str, fragment: str) -> None:
    """Escapes built at run time fail with a render error naming the key."""
    message = refused(source)
    assert "allocate.env.V" in message
    assert fragment in message


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{% for i in 'x' * 60000 %}{% for j in 'y' * 60000 %}{% endfor %}{% endfor %}", "loop"),
        ("{{ resource * 10 ** 10 }}", "repetition"),  # constants: refused at validation
        ("{{ [0] * 10 ** 9 }}", "repetition"),
        ("{{ 9 ** 999999 }}", "exponent"),
        ("{{ (2 ** 1024) ** 1024 }}", "bits"),
        ("{{ 'a' | center(10 ** 9) }}", "exceeds"),
        ("{{ 'a' | indent(10 ** 9) }}", "exceeds"),
        ("{{ 'a'.ljust(10 ** 9) }}", "exceeds"),
        ("{{ (1).to_bytes(10 ** 8, 'big') }}", "exceeds"),
        ("{{ '%999999999s' % 1 }}", "format width"),
        ("{{ '%*s' % (999999999, 1) }}", "'*' widths"),
        ("{{ '%999999999s' | format(1) }}", "format width"),
        ("{{ '{0:>999999999}'.format(1) }}", "format width"),
        ("{{ '{0:>{1}}'.format(1, 999999999) }}", "nested fields"),
        ("{{ ('x' * 60000) | replace('x', 'yy') }}", "replace"),
        ("{{ ('x' * 60000).replace('x', 'yy') }}", "replace"),
        ("{{ ('x' * 60000) | list | join('x' * 1000) }}", "join"),
        ("{{ ('x' * 1000).join('y' * 60000) }}", "join"),
        ("{% set a = 'x' * 60000 %}{% set b = a ~ a ~ a %}{{ b ~ b }}", "exceeds"),
        ("{% for i in 'x' * 60000 %}{{ i }}{{ i }}{% endfor %}", "exceeds"),
    ],
)
def test_runaway_work_is_refused(source: str, fragment: str) -> None:
    """Loops, repetition, widths and output are capped so Allocate stays fast."""
    assert fragment in refused(source)


def test_loop_budget_is_per_allocation() -> None:
    """The iteration budget is fresh for each allocation, so sane loops keep working."""
    source = "{% for i in 'x' * 50000 %}{% endfor %}ok"
    assert render(source) == "ok"
    assert render(source) == "ok"


def test_ordinary_formatting_still_works() -> None:
    """Small % and str.format widths, replace and join remain usable."""
    source = (
        "{{ '%03d' % units[0].nodes[0].minor }} {{ '{:>4}'.format(units[0].id) }} "
        "{{ '%d:%d' | format(1, 3) }} {{ 'a-b' | replace('-', '_') }} {{ 2 ** 10 }}"
    )
    assert render(source) == "003   u0 1:3 a_b 1024"


LAUGHS = (
    "{% set a = ['xxxxxxxxxx', 'xxxxxxxxxx', 'xxxxxxxxxx', 'xxxxxxxxxx'] %}"
    "{% set b = [a, a, a, a, a, a, a, a] %}{% set c = [b, b, b, b, b, b, b, b] %}"
    "{% set d = [c, c, c, c, c, c, c, c] %}{% set e = [d, d, d, d, d, d, d, d] %}"
    "{% set f = [e, e, e, e, e, e, e, e] %}{% set g = [f, f, f, f, f, f, f, f] %}"
)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{ ([devices * 600] * 600) | tojson }}", "repetition"),
        ("{{ ([devices * 600] * 600) | pprint }}", "repetition"),
        ("{{ ([devices * 60000] * 60000) | join(',') }}", "repetition"),
        ("{{ [units * 600] * 600 == [units * 600] * 600 }}", "repetition"),
        (LAUGHS + "{{ g == g[:] }}", "as printed"),
        (LAUGHS[: LAUGHS.index("{% set f")] + "{{ e | tojson }}", "tojson"),
        (LAUGHS[: LAUGHS.index("{% set f")] + "{{ e }}", "output"),
        (LAUGHS[: LAUGHS.index("{% set f")] + "{{ e ~ '' }}", "'~'"),
        ("{{ (['xx'] * 65536) | pprint }}", "pprint"),
        ("{{ ('%(a)s' * 2000) % {'a': 'x' * 6000} }}", "% formatting"),
        ("{{ ('%s' * 2000) | format('x' * 6000) }}", "% formatting"),
        ("{{ ('{0}' * 20000).format('x' * 60000) }}", "format()"),
        ("{{ ('{a}' * 20000).format_map({'a': 'x' * 60000}) }}", "format()"),
        ("{{ ('a\\n' * 30000) | indent(4000) }}", "indent"),
        ("{{ ('\\t' * 60000).expandtabs(4000) }}", "unsafe"),
        ("{{ ('a' * 60000).translate({97: 'x' * 60000}) }}", "unsafe"),
        ("{{ ([units, units]) | sum(start=[]) }}", "sum adds numbers"),
        ("{% set a = 2 ** 1024 %}{{ a * a * a * a * a * a * a * a * a }}", "bits"),
    ],
)
def test_values_are_measured_while_they_are_built(source: str, fragment: str) -> None:
    """Nothing a template builds (shared and nested parts counted) grows past the caps
    before a check sees it: repetition, literals, format fields, indent, printing filters."""
    assert fragment in reason(source)


def test_work_of_one_allocation_is_bounded() -> None:
    """Many values each under the caps still add up to a bounded amount per allocation."""
    source = "{% for i in 'x' * 60000 %}{% set s = ('a' * 60000).replace('a', 'b') %}{% endfor %}"
    assert "built more than" in reason(source)


# Over a second of small steps on any machine.
SLOW_STEPS = (
    "{% for i in 'x' * 300 %}{% for j in 'x' * 300 %}"
    "{% if (j ~ ' a b c d e f g h i j k l m n o p q r s t u v w x y z') | wordwrap(1) %}"
    "{% endif %}"
    "{% endfor %}{% endfor %}"
)


def test_rendering_has_a_deadline() -> None:
    """A template slow in small steps is stopped at the deadline, so Allocate stays short."""
    source = SLOW_STEPS
    started, cpu_started = time.monotonic(), time.thread_time()
    message = reason(source)
    cpu = time.thread_time() - cpu_started
    assert f"took longer than {MAX_RENDER_SECONDS}s" in message
    assert MAX_RENDER_SECONDS <= cpu < MAX_RENDER_SECONDS + 0.1
    assert time.monotonic() - started < sandbox.MAX_RENDER_WALL_SECONDS + 1.0


class _BusyClock:
    """``time`` as the sandbox reads it on a machine where the rendering
    thread gets a share of the CPU: the wall clock advances ``factor`` times
    as fast as the thread's CPU time; with ``cpu=False`` the thread never runs
    as far as its CPU clock knows, and the wall clock is real."""

    def __init__(self, factor: float, *, cpu: bool = True) -> None:
        self._factor = factor
        self._cpu = cpu
        self._wall = time.monotonic()
        self._cpu_started = time.thread_time()

    def monotonic(self) -> float:
        if not self._cpu:
            return time.monotonic()
        return self._wall + (time.thread_time() - self._cpu_started) * self._factor

    def thread_time(self) -> float:
        return time.thread_time() if self._cpu else 0.0


# Some tens of milliseconds of CPU time on a machine of CI's kind.
MODERATE = (
    "{% for i in 'x' * 60 %}{% for j in 'x' * 50 %}"
    "{{ (j ~ ' a b c') | wordwrap(1) | length }}{% endfor %}{% endfor %}"
)


def test_a_busy_machine_does_not_refuse_what_an_idle_one_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline counts the rendering thread's CPU time: with a wall clock
    twenty times as fast (the thread given a twentieth of a core) the wall
    time is past the budget, and nothing is refused."""
    cpu_started = time.thread_time()
    assert render(MODERATE)
    cpu = time.thread_time() - cpu_started
    assert MAX_RENDER_SECONDS / 20 < cpu < MAX_RENDER_SECONDS / 2
    monkeypatch.setattr(sandbox, "time", _BusyClock(20.0))
    assert render(MODERATE)


def test_however_busy_the_machine_the_wall_clock_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread that never gets the CPU still stops at the wall-clock bound."""
    monkeypatch.setattr(sandbox, "MAX_RENDER_WALL_SECONDS", 0.3)
    monkeypatch.setattr(sandbox, "time", _BusyClock(1.0, cpu=False))
    started = time.monotonic()
    assert "took longer than 0.3s on a busy machine" in reason(SLOW_STEPS)
    assert time.monotonic() - started < 0.3 + 0.5


def test_sane_templates_render_well_within_the_limits() -> None:
    """Ordinary templates (joins, maps, loops over units) render in milliseconds."""
    source = (
        "{{ devices | map(attribute='path') | join(',') }};"
        "{% for u in units %}{{ u.id }}={{ u.nodes | length }}{% endfor %};"
        "{{ devices | tojson }};{{ '%s-%s' | format(resource, node_name) }}"
    )
    started = time.monotonic()
    for _ in range(100):
        render(source)
    assert (time.monotonic() - started) / 100 < 0.05
