"""What a config and a node may cost: the limits of config/limits.py, at validation
and on the node (more units found than the node may serve)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from genericdp.config import load
from genericdp.config.limits import (
    MAX_IDS_PER_NODE,
    MAX_IDS_PER_RESOURCE,
    MAX_RESOURCES,
    MAX_UNITS_PER_NODE,
    MAX_UNITS_PER_RESOURCE,
    MEMORY_LIMIT_MIB,
)
from genericdp.config.model import ResourceDefinition
from genericdp.discovery import discover
from genericdp.discovery.model import Roots, Unit
from genericdp.errors import ConfigError
from genericdp.metrics import Metrics
from genericdp.probes import readiness
from genericdp.runtime.budget import Limits, NodeBudget
from tests.fakesys import can_mknod
from tests.polling import eventually
from tests.runtime_harness import config, running, unit


def _resources(counts: list[int | str]) -> str:
    lines = ["version: v1", "resources:"]
    for i, count in enumerate(counts):
        lines += [f"- name: example.com/r{i}", "  match: [glob: /dev/x*]", f"  count: {count}"]
    return "\n".join(lines) + "\n"


def test_a_config_whose_counts_add_up_past_the_node_s_ids_is_refused_at_the_count(
    tmp_path: Path,
) -> None:
    """Counts (one unit each) adding up past the node's ID limit: refused at the count
    of the resource that passes it, with both numbers."""
    over = MAX_IDS_PER_NODE // 1000 + 1
    path = tmp_path / "ids.yaml"
    path.write_text(_resources([1000] * over))
    with pytest.raises(ConfigError) as caught:
        load([path])
    (issue,) = caught.value.issues
    assert (issue.file, issue.line) == (str(path), 3 * over + 2)
    assert f"resources[{over - 1}].count" in str(issue)
    assert f"{over * 1000} device IDs" in str(issue)
    assert f"more than the {MAX_IDS_PER_NODE}" in str(issue)


def test_counts_up_to_the_node_s_ids_are_valid_and_unbounded_counts_its_free_ids(
    tmp_path: Path,
) -> None:
    """The limit itself is valid; an unbounded resource counts its freeIds."""
    at = tmp_path / "at.yaml"
    at.write_text(_resources([1000] * (MAX_IDS_PER_NODE // 1000)))
    assert len(load([at]).resources) == MAX_IDS_PER_NODE // 1000
    unbounded = tmp_path / "unbounded.yaml"
    text = _resources([1000] * (MAX_IDS_PER_NODE // 1000 - 1) + ["unbounded"])
    unbounded.write_text(text + "  freeIds: 1001\n")
    with pytest.raises(ConfigError, match=r"resources\[99\]\.freeIds"):
        load([unbounded])


def test_a_resource_keeps_the_first_units_by_id_within_its_own_and_the_node_s_limits() -> None:
    """Per resource, per node and per ID limits, the first units by ID, and release."""
    budget = NodeBudget(Limits(units_per_resource=4, units_per_node=6, ids_per_resource=9))
    found = [unit(f"u{i}") for i in (5, 1, 4, 0, 3, 2)]
    a = budget.keep("a", found, 1)
    assert [u.id for u in a.units] == ["u0", "u1", "u2", "u3"]
    assert (a.found, a.left_out, a.why) == (6, 2, "4 units per resource")
    b = budget.keep("b", found, 3)  # 9 IDs: three units; the node leaves two
    assert [u.id for u in b.units] == ["u0", "u1"]
    assert b.why == "6 units per node, 4 held by other resources"
    assert "serving the first 2 of 6 units found (by ID), 4 left out" in b.note("b")
    again = budget.keep("a", found, 1)  # a rescan keeps what it holds
    assert len(again.units) == 4
    budget.release("a")
    assert len(budget.keep("b", found, 3).units) == 3
    assert budget.keep("b", found, 3).why == "9 device IDs per resource (3 per unit)"
    assert budget.keep("c", found[:1], 1).note("c") == ""


def _device_nodes(dev: Path, n: int) -> None:
    dev.mkdir(parents=True)
    for i in range(n):
        os.mknod(dev / f"x{i:05d}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))


needs_mknod = pytest.mark.skipif(
    not can_mknod(Path(os.environ.get("TMPDIR", "/tmp"))), reason="needs CAP_MKNOD"
)


@needs_mknod
async def test_a_glob_finding_more_units_than_a_resource_may_serve_serves_the_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A glob over more device nodes than a resource may serve: the kubelet gets the
    first units by ID, the log says so once, the gauge and /readyz show it."""
    _device_nodes(tmp_path / "host" / "dev", MAX_UNITS_PER_RESOURCE + 3)
    for root in ("sys", "run/udev"):
        (tmp_path / "host" / root).mkdir(parents=True)
    name = "example.com/x"
    cfg = config(f"resources:\n- name: {name}\n  match: [glob: /dev/x*]\n")
    caplog.set_level(logging.INFO)
    scans: list[int] = []

    def counted(definition: ResourceDefinition, roots: Roots) -> Sequence[Unit]:
        scans.append(1)
        return discover(definition, roots)

    async with running(tmp_path, cfg, discover=counted) as run:
        await run.until(
            lambda k: name in k.resources and len(k.resources[name].devices) > 0, timeout=60
        )
        devices = run.kubelet.resources[name].devices
        assert len(devices) == MAX_UNITS_PER_RESOURCE
        assert max(devices) == f"x{MAX_UNITS_PER_RESOURCE - 1:05d}"
        status = run.supervisor.status()[name]
        assert status.left_out == 3
        metrics = Metrics(process=False)
        metrics.track(run.supervisor)
        sample = metrics.registry.get_sample_value
        assert sample("genericdp_units_left_out", {"resource": name}) == 3
        verdict = readiness(run.supervisor.status(), started=True)
        expected = f"serving the first {MAX_UNITS_PER_RESOURCE} of {MAX_UNITS_PER_RESOURCE + 3}"
        assert verdict.ok
        assert expected in verdict.text
        assert f"the limit of {MAX_UNITS_PER_RESOURCE} units per resource" in verdict.text
        first = len(scans)
        run.supervisor.rescan("test")
        await eventually(lambda: len(scans) > first, "a second scan", timeout=30)
        await eventually(lambda: run.supervisor.status()[name].left_out == 3, "still 3", timeout=5)
    said = [r for r in caplog.records if expected in r.getMessage()]
    assert len(said) == 1


async def test_resources_share_the_node_s_units_first_come(tmp_path: Path) -> None:
    """Units past the node's total are left out of the resource that comes last."""
    per = MAX_UNITS_PER_RESOURCE
    names = [f"example.com/r{i}" for i in range(3)]
    units: dict[str, list[Unit]] = {
        n: [unit(f"{n[-2:]}-{j:05d}") for j in range(per)] for n in names
    }
    text = "resources:\n" + "".join(f"- name: {n}\n  match: [glob: /dev/x*]\n" for n in names)
    async with running(tmp_path, config(text), discover=lambda d, _r: units[d.name]) as run:
        await run.registered(names, timeout=60)
        await run.until(
            lambda k: sum(len(k.resources[n].devices) for n in names) >= MAX_UNITS_PER_NODE, 60
        )
        statuses = run.supervisor.status()
        assert sum(s.left_out for s in statuses.values()) == 3 * per - MAX_UNITS_PER_NODE
        served = sum(len(run.kubelet.resources[n].devices) for n in names)
        assert served == MAX_UNITS_PER_NODE


@needs_mknod
def test_discover_says_which_units_it_leaves_out(tmp_path: Path) -> None:
    """`discover` applies the same limits and says so on stderr."""
    _device_nodes(tmp_path / "dev", MAX_UNITS_PER_RESOURCE + 1)
    path = tmp_path / "c.yaml"
    path.write_text(_resources([1]))
    done = subprocess.run(
        [sys.executable, "-m", "genericdp", "discover", str(path), "--json",
         "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path),
         "--udev-root", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        f"warning: example.com/r0: serving the first {MAX_UNITS_PER_RESOURCE} of"
        f" {MAX_UNITS_PER_RESOURCE + 1} units found" in done.stderr
    )
    assert done.stdout.count('"id": "x') == MAX_UNITS_PER_RESOURCE


def test_the_docs_give_the_limits_the_code_enforces() -> None:
    """docs/config.md "Limits" states every limit of config/limits.py as it is, and the
    memory limit they derive from is the one the manifests ship."""
    repo = Path(__file__).resolve().parents[1]
    for manifest in ("deploy/kustomize/base/daemonset.yaml", "deploy/helm/genericdp/values.yaml"):
        assert f"memory: {MEMORY_LIMIT_MIB}Mi" in (repo / manifest).read_text(), manifest
    text = (repo / "docs" / "config.md").read_text()
    limits = text[text.index("## Limits") :]
    for number in (
        MAX_RESOURCES,
        MAX_IDS_PER_NODE,
        MAX_IDS_PER_RESOURCE,
        MAX_UNITS_PER_NODE,
        MAX_UNITS_PER_RESOURCE,
        MEMORY_LIMIT_MIB,
    ):
        assert f"{number:,}" in limits, number
