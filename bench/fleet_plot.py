"""The reconnect plot: nodes whose slices are right, over time after the API server restart.

A small SVG written from the fleet benchmark's measured series
(``bench/fleet.py``), one step line per fleet size, as a share of its nodes,
so a page can show it without a plotting library.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 60, 130, 40, 50
MAX_TICKS = 8  # grid lines on the time axis, at most
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")

Series = Sequence[tuple[float, int]]  # (seconds after kube-apiserver's exec, nodes right)
Run = tuple[int, float, Series]  # (nodes, seconds from exec to ready, series)


def _ticks(top: float) -> list[float]:
    step = next(s for s in (0.5, 1, 2, 5, 10, 20, 30, 60) if top / s <= MAX_TICKS)
    return [i * step for i in range(int(top / step) + 1)]


def render(runs: Sequence[Run]) -> str:
    """The SVG text for ``runs``: ``(nodes, seconds to ready, series)`` each."""
    span = max((t for _, _, series in runs for t, _ in series), default=1.0)
    span = max(span * 1.1, 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * t / span

    def y(share: float) -> float:
        return TOP + plot_h * (1.0 - share)

    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"'
            f' viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        (
            f'<text x="{LEFT}" y="22" font-size="14">Nodes whose ResourceSlices are right,'
            " after the API server restart</text>"
        ),
    ]
    for t in _ticks(span):
        out.append(
            f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{x(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{t:g}</text>'
        )
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(
            f'<line x1="{LEFT}" y1="{y(share):.1f}" x2="{LEFT + plot_w}" y2="{y(share):.1f}"'
            ' stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{LEFT - 6}" y="{y(share) + 4:.1f}" text-anchor="end">{share:.0%}</text>'
        )
    out.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 12}" text-anchor="middle">'
        "seconds after kube-apiserver is started again (dashed: it is ready)</text>"
    )
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>'
    )
    for i, (nodes, ready, series) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        out.append(
            f'<line x1="{x(ready):.1f}" y1="{TOP}" x2="{x(ready):.1f}" y2="{TOP + plot_h}"'
            f' stroke="{colour}" stroke-dasharray="4 3"/>'
        )
        points = [f"{x(0):.1f},{y(0):.1f}"]
        last = 0.0
        for t, right in series:
            share = right / nodes
            if share != last:  # a step: along at the old share, then up
                points.append(f"{x(t):.1f},{y(last):.1f}")
                points.append(f"{x(t):.1f},{y(share):.1f}")
                last = share
        points.append(f"{x(span):.1f},{y(last):.1f}")
        out.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}"'
            ' stroke-width="2"/>'
        )
        ly = TOP + 16 + 20 * i
        out.append(
            f'<line x1="{LEFT + plot_w + 12}" y1="{ly}" x2="{LEFT + plot_w + 32}" y2="{ly}"'
            f' stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{LEFT + plot_w + 38}" y="{ly + 4}">{escape(f"{nodes} nodes")}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(path: Path, runs: Sequence[Run]) -> None:
    path.write_text(render(runs))
