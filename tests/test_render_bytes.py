"""What templates may render, in bytes: a value at most 64 KiB and an allocation at most
1 MiB. What must exceed it whatever the units is refused at validation with its position
and the number; the rest fails that Allocate, naming resource, key and limit, while the
daemon keeps serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from genericdp import config as configuration
from genericdp.allocation.plan import plan_allocation
from genericdp.config.model import AllocateSpec, GlobMatcher, ResourceDefinition, frozen_map
from genericdp.config.sandbox import MAX_ALLOCATION_BYTES, MAX_VALUE_BYTES
from genericdp.config.templates import compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import ConfigError, TemplateRenderError
from genericdp.kubelet.embedded import AllocationError
from tests.runtime_harness import ScriptedDiscovery, config, running, unit

NAME = "example.com/big"
UNIT = Unit("u0", (DeviceNode("/dev/null", "/dev/null", 1, 3, "mem"),))


def issues(tmp_path: Path, env: str) -> list[str]:
    """Where and what validation says of a resource with ``env`` (YAML flow mapping)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"version: v1\nresources:\n- name: {NAME}\n  match: [{{glob: /dev/null}}]\n"
        f"  allocate:\n    env: {env}\n"
    )
    with pytest.raises(ConfigError) as caught:
        configuration.load([path])
    return [str(issue) for issue in caught.value.issues]


def planned(env: dict[str, str]) -> dict[str, str]:
    allocate = AllocateSpec(env=frozen_map(env))
    definition = ResourceDefinition(
        name=NAME,
        match=(GlobMatcher("/dev/null"),),
        allocate=allocate,
        templates=compile_templates(allocate),
    )
    return dict(plan_allocation(definition, [UNIT]).receives.env)


@pytest.mark.parametrize(
    ("template", "size"),
    [
        ("{{ 'x' * 10 ** 8 }}", 10**8),
        ("{{ '-' ~ '=' * 70000 }}", 70_001),
        ("{{ 'é' * 40000 }}", 80_000),
        ("{{ 2 * 'ab' * 20000 + 'x' * 30000 }}", 110_000),
    ],
)
def test_a_value_of_constants_over_the_limit_is_refused_at_validation(
    tmp_path: Path, template: str, size: int
) -> None:
    """A value whose constants alone render past 64 KiB: refused at its position, with
    the bytes it renders at least and the limit."""
    found = issues(tmp_path, f'{{BIG: "{template}"}}')
    expected = (
        f"{tmp_path / 'config.yaml'}:6:16: resources[0].allocate.env.BIG: renders at least"
        f" {size} bytes whatever it is given, more than the {MAX_VALUE_BYTES} bytes a"
        " rendered value may have"
    )
    assert found == [expected]


def test_the_line_within_a_block_template_is_the_line_of_the_constant(tmp_path: Path) -> None:
    """In a block scalar, the position is the template line holding the constant."""
    found = issues(tmp_path, "\n      BIG: |\n        {{ resource }}\n        {{ 'x' * 100000 }}")
    assert len(found) == 1
    assert found[0].startswith(f"{tmp_path / 'config.yaml'}:9:")
    assert "renders at least 100001 bytes" in found[0]  # the newline before it, and it


def test_values_that_together_pass_the_allocation_limit_are_refused_at_validation(
    tmp_path: Path,
) -> None:
    """Twenty values of 60,000 bytes each: refused at the one that passes 1 MiB."""
    env = ", ".join(f"V{i:02}: \"{{{{ 'x' * 60000 }}}}\"" for i in range(20))
    found = issues(tmp_path, f"{{{env}}}")
    assert len(found) == 1
    assert (
        "resources[0].allocate.env.V17: the allocate values of this resource render at"
        in (found[0])
    )
    assert f"at least {18 * 60_003} bytes in all" in found[0]
    assert f"more than the {MAX_ALLOCATION_BYTES} bytes one allocation may render" in found[0]


def test_values_under_the_limits_compile_and_render() -> None:
    """Just under each limit is compiled and rendered as written."""
    env = {f"V{i:02}": "{{ 'x' * 60000 }}" for i in range(16)}
    env["LAST"] = "{{ 'é' * 32768 }}"
    rendered = planned(env)
    assert rendered["LAST"] == "é" * 32768
    assert sum(len(k) + len(v.encode()) for k, v in rendered.items()) <= MAX_ALLOCATION_BYTES


def test_a_rendered_value_over_the_byte_limit_fails_the_allocation() -> None:
    """A value of 40,000 characters of two bytes each is 80,000 bytes: refused, naming
    resource, key, size and limit."""
    with pytest.raises(TemplateRenderError) as caught:
        planned({"WIDE": "{% set s = 'é' * 40000 %}{{ s }}"})
    message = str(caught.value)
    assert message.startswith(f"resource {NAME}: allocate.env.WIDE ")
    assert f"rendered 80000 bytes, more than the {MAX_VALUE_BYTES} bytes" in message


def test_an_allocation_over_the_byte_limit_fails_naming_the_key_that_passes_it() -> None:
    """Twenty values of 60,000 bytes built at render time: the allocation is refused at
    the value that passes 1 MiB."""
    env = {f"V{i:02}": "{% set s = 'x' * 60000 %}{{ s }}" for i in range(20)}
    with pytest.raises(TemplateRenderError) as caught:
        planned(env)
    message = str(caught.value)
    assert message.startswith(f"resource {NAME}: unit u0: allocate.env.V17: the allocation")
    assert f"renders {18 * 60_003} bytes by here" in message
    assert f"more than the {MAX_ALLOCATION_BYTES} bytes one allocation may render" in message


async def test_an_allocation_over_the_limit_fails_and_the_daemon_keeps_serving(
    base: Path,
) -> None:
    """Through the kubelet: that Allocate fails with the reason, the next one of a
    neighbour resource is served."""
    env = ", ".join(f"V{i:02}: \"{{% set s = 'x' * 60000 %}}{{{{ s }}}}\"" for i in range(20))
    cfg = config(
        f"resources:\n- name: {NAME}\n  match: [{{glob: /dev/u0}}]\n"
        f"  allocate:\n    env: {{{env}}}\n"
        "- name: example.com/small\n  match: [{glob: /dev/u1}]\n"
    )
    discovery = ScriptedDiscovery({NAME: [unit("u0")], "example.com/small": [unit("u1")]})
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: all(k.resources.get(n) for n in (NAME, "example.com/small")))
        await rt.until(lambda k: k.resources[NAME].allocatable == 1)
        with pytest.raises(AllocationError, match="more than the 1048576 bytes one allocation"):
            await rt.kubelet.allocate(NAME, 1, pod="p")
        await rt.until(lambda k: k.resources["example.com/small"].allocatable == 1)
        answer = await rt.kubelet.allocate("example.com/small", 1, pod="q")
        assert len(answer.container_responses) == 1
