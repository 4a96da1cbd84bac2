"""The fleet benchmark's own parts: counting requests from the audit log, and its plot."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.fleet_api import AuditLog, Request, peak_rate
from bench.fleet_plot import render


def audit_line(audit_id: str, stage: str, at: str, verb: str = "list", code: int = 200) -> str:
    event = {
        "auditID": audit_id,
        "stage": stage,
        "requestReceivedTimestamp": at,
        "user": {"username": "fleet:n1"},
        "verb": verb,
        "objectRef": {"resource": "resourceslices"},
        "responseStatus": {"code": code},
    }
    if stage == "ResponseStarted":
        del event["responseStatus"]
    return json.dumps(event) + "\n"


def test_a_request_is_counted_once_and_a_watch_is_open_until_it_completes(tmp_path: Path) -> None:
    """Stages of one auditID are one request; a watch started and not complete is open;
    a line still being written is read once it is whole."""
    path = tmp_path / "audit.log"
    half = audit_line("b", "ResponseStarted", "2026-01-01T00:00:01.5Z", verb="watch")
    path.write_text(audit_line("a", "ResponseComplete", "2026-01-01T00:00:01Z") + half[:20])
    log = AuditLog(path)
    assert [r.id for r in log.requests()] == ["a"]
    with path.open("a") as out:
        out.write(half[20:])
    (first, watch) = log.requests()
    assert (first.verb, first.code, first.open) == ("list", 200, False)
    assert (watch.verb, watch.open) == ("watch", True)
    with path.open("a") as out:
        out.write(audit_line("b", "ResponseComplete", "2026-01-01T00:00:01.5Z", verb="watch"))
    assert [r.open for r in log.requests()] == [False, False]
    assert watch.at - first.at == 0.5


def test_the_peak_rate_is_the_busiest_second() -> None:
    """Three requests within a second and one long after: a peak of 3 a second."""
    requests = [
        Request(str(t), t, "fleet:n1", "list", "nodes", 200) for t in (10, 10.2, 10.9, 12.5)
    ]
    assert peak_rate(requests) == 3.0
    assert peak_rate([]) == 0.0


def test_the_plot_has_a_line_per_fleet_that_ends_at_every_node() -> None:
    """One polyline per run, each ending at the top (every node right), in valid SVG."""
    svg = render([(10, 2.0, [(1.0, 0), (2.5, 6), (3.0, 10)]), (30, 3.0, [(4.0, 30)])])
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    tops = {line.get("points", "").split()[-1].split(",")[1] for line in lines}
    assert tops == {"40.0"}  # the plot's top edge: 100%
    assert "10 nodes" in svg
    assert "30 nodes" in svg
