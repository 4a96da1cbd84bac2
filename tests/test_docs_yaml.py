"""Every genericdp YAML block in the docs loads: docs/recipes.md and docs/config.md.

A block is a whole config, one resource (a mapping with ``name``), a list of
resources, or keys of one resource (``allocate:``, ``health:``, indented or
not), which get a name and, without ``match``, a glob of /dev/null; all but
the first are wrapped in ``version: v1`` / ``resources:``.
Blocks of other tools' formats start with ``# not genericdp:`` and are
skipped; the squat ones among them must still convert.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.config import load_text, schema
from genericdp.convert import convert_squat

DOCS = Path(__file__).resolve().parents[1] / "docs"
FOREIGN = "# not genericdp:"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks(name: str) -> list[tuple[int, str]]:
    text = (DOCS / name).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _as_config(block: str) -> str:
    block = textwrap.dedent(block)
    data: Any = YAML(typ="safe", pure=True).load(block)
    if isinstance(data, dict) and "version" in data:
        return block
    resource_keys = set(schema()["$defs"]["resource"]["properties"])
    if isinstance(data, dict) and "name" not in data and set(data) <= resource_keys:
        missing_match = "" if "match" in data else "match: [{glob: /dev/null}]\n"
        block = "name: example.com/docs-fragment\n" + missing_match + block
        data["name"] = "example.com/docs-fragment"
    if isinstance(data, dict) and "name" in data:
        block = "- " + block.rstrip("\n").replace("\n", "\n  ")
    elif not isinstance(data, list):
        pytest.fail("a YAML block must be a config, resources, or keys of one resource")
    return "version: v1\nresources:\n" + "".join(f"  {line}\n" for line in block.splitlines())


CASES = [
    pytest.param(name, line, block, id=f"{name}:{line}")
    for name in ("recipes.md", "config.md")
    for line, block in _blocks(name)
]


@pytest.mark.parametrize(("name", "line", "block"), CASES)
def test_every_yaml_block_in_the_docs_is_valid(name: str, line: int, block: str) -> None:
    """A genericdp block loads without issues; a squat block converts to a config that does."""
    if block.startswith(FOREIGN + " squat"):
        body = block.split("\n", 1)[1]
        load_text(convert_squat([body]).text, f"docs/{name}:{line} converted")
        return
    if block.startswith(FOREIGN):
        return
    load_text(_as_config(block), f"docs/{name}:{line}")


def test_the_recipes_cover_the_hardware_and_tools_they_promise() -> None:
    """Most blocks are genericdp configs, and each promised section is there."""
    blocks = [b for _line, b in _blocks("recipes.md")]
    ours = [b for b in blocks if not b.startswith(FOREIGN)]
    assert len(ours) >= 12
    text = (DOCS / "recipes.md").read_text(encoding="utf-8")
    for heading in (
        "USB serial",
        "Zigbee",
        "USB storage",
        "Coral",
        "Sound",
        "Video4Linux",
        "kvm, tun, fuse",
        "GPU render",
        "I2C, SPI and GPIO",
        "From squat",
        "From smarter-device-manager",
        "From Akri",
    ):
        assert f"## {heading}" in text or f"### {heading}" in text, heading
