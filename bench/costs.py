"""What a resource, a unit and a device ID cost a serving daemon, in resident memory.

Run with ``.venv/bin/python -m bench.costs`` (a few minutes): a real
``genericdp serve`` process (run as the image runs it, bench/idle_cpu.py
``daemon_env``) against the embedded kubelet, its device root a temporary
tree of character devices (``mknod``: needs CAP_MKNOD), once per case. Each
case waits until the kubelet lists every device of every resource, then for
two quiet seconds, and reads ``VmRSS`` and ``VmHWM`` (the peak) from
/proc. The cost of one resource, unit or ID is the difference to the
baseline (one resource, one unit) divided by how many more there are.

The figures (and the per-node limits derived from them) are in
docs/config.md "Limits"; the limits themselves are ``config/limits.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.idle_cpu import daemon_env, memory_mib, serve_env  # noqa: E402
from genericdp.kubelet.embedded import EmbeddedKubelet  # noqa: E402

WAIT = 120.0  # seconds a case may take to be fully listed on a loaded machine


@dataclass(frozen=True)
class Case:
    """``resources`` resources, each with ``units`` units of ``count`` IDs."""

    name: str
    resources: int
    units: int
    count: int

    @property
    def ids(self) -> int:
        return self.resources * self.units * self.count


BASELINE = Case("baseline", 1, 1, 1)


def cases(scale: float) -> list[Case]:
    """The baseline and one case per dimension, ``scale`` times the full sizes."""
    return [
        BASELINE,
        Case("resources", max(2, round(200 * scale)), 1, 1),
        Case("units", 1, max(2, round(20_000 * scale)), 1),
        Case("ids", 1, 100, max(2, round(1_000 * scale))),
    ]


def config_text(case: Case) -> str:
    lines = ["version: v1", "resources:"]
    for r in range(case.resources):
        lines += [f"- name: example.com/r{r}", f"  match: [glob: /dev/r{r}/x*]"]
        if case.count > 1:
            lines.append(f"  count: {case.count}")
    return "\n".join(lines) + "\n"


def device_tree(dev: Path, case: Case) -> None:
    for r in range(case.resources):
        (dev / f"r{r}").mkdir(parents=True)
        for u in range(case.units):
            os.mknod(dev / f"r{r}" / f"x{u}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))


async def measure(case: Case) -> tuple[float, float]:
    """(RSS, peak RSS) in MiB of a daemon serving ``case``, once fully listed."""
    with tempfile.TemporaryDirectory(prefix="gdp-costs-", dir="/tmp") as tmp:
        base = Path(tmp)
        device_tree(base / "dev", case)
        (base / "sys").mkdir()
        (base / "udev").mkdir()
        config = base / "config.yaml"
        config.write_text(config_text(case))
        plugin_dir, pod_resources = base / "dp", base / "pr" / "kubelet.sock"
        names = [f"example.com/r{r}" for r in range(case.resources)]
        per_resource = case.units * case.count
        env = serve_env(base) | daemon_env()
        async with EmbeddedKubelet(plugin_dir, pod_resources_socket=pod_resources) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "genericdp", "serve",
                "--config", str(config),
                "--plugin-dir", str(plugin_dir),
                "--pod-resources-socket", str(pod_resources),
                "--dev-root", str(base / "dev"),
                "--sys-root", str(base / "sys"),
                "--udev-root", str(base / "udev"),
                "--log-level", "error",
                env=env,
            )  # fmt: skip
            try:
                await kubelet.wait_until(
                    lambda k: all(
                        n in k.resources
                        and k.resources[n].connected
                        and len(k.resources[n].devices) == per_resource
                        for n in names
                    ),
                    WAIT,
                )
                await asyncio.sleep(2.0)  # settle: the first PodResources polls and rescans
                return memory_mib(proc.pid, "VmRSS"), memory_mib(proc.pid, "VmHWM")
            finally:
                proc.terminate()
                await proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="case sizes, times the full ones")
    args = parser.parse_args()
    results = {case: asyncio.run(measure(case)) for case in cases(args.scale)}
    base_rss, base_peak = results[BASELINE]
    print(f"{'case':<10} {'resources':>9} {'units':>7} {'IDs':>8} {'RSS':>8} {'peak':>8}  cost")
    for case, (rss, peak) in results.items():
        extra = {
            "resources": case.resources - 1,
            "units": case.units - 1,
            "ids": case.ids - BASELINE.ids,
        }.get(case.name)
        cost = f"{(peak - base_peak) * 1024 / extra:.2f} KiB each (peak)" if extra else ""
        print(
            f"{case.name:<10} {case.resources:>9} {case.units:>7} {case.ids:>8}"
            f" {rss:7.1f}M {peak:7.1f}M  {cost}"
        )
    del base_rss


if __name__ == "__main__":
    main()
