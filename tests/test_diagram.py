"""docs/diagrams: each SVG is rendered from the current source and shows every label."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tools import diagram

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]  # noqa: S314 -- our own SVG


def _labels(source: Path) -> list[str]:
    """Every line of every label in a dot source, as dot prints it."""
    lines = []
    for label in re.findall(r'label="((?:[^"\\]|\\.)*)"', source.read_text()):
        lines += [line.replace('\\"', '"') for line in label.split("\\n") if line]
    return lines


def test_there_is_a_diagram() -> None:
    assert [s.name for s in diagram.sources()] == ["paths.dot"]


def test_every_svg_is_rendered_from_its_current_source() -> None:
    assert diagram.stale() == []


@pytest.mark.parametrize("source", diagram.sources(), ids=lambda p: p.name)
def test_every_label_of_the_source_is_in_its_svg(source: Path) -> None:
    texts = _texts(source.with_suffix(".svg").read_text())
    assert [line for line in _labels(source) if line not in texts] == []


def test_an_edited_source_makes_its_svg_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for source in diagram.sources():
        shutil.copy(source, tmp_path)
        shutil.copy(source.with_suffix(".svg"), tmp_path)
    monkeypatch.setattr(diagram, "DIAGRAMS", tmp_path)
    assert diagram.stale() == []
    edited = tmp_path / "paths.dot"
    edited.write_text(edited.read_text().replace("kube-scheduler", "the scheduler"))
    assert diagram.stale() == ["paths.svg: not rendered from the current paths.dot"]
    (tmp_path / "paths.svg").unlink()
    assert diagram.stale() == ["paths.svg: missing"]
    assert diagram.main(["check"]) == 1


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_dot_renders_the_source_to_the_same_picture() -> None:
    """The layout depends on the fonts installed; what the picture says does not."""
    for source in diagram.sources():
        rendered = diagram.render(source)
        assert _texts(rendered) == _texts(source.with_suffix(".svg").read_text())
        assert diagram.digest(source) in rendered
