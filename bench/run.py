"""The benchmark suite: speed and memory targets, measured (not asserted in tests).

Run with ``./dev bench`` (or ``.venv/bin/python -m bench.run``). Prints one
line per measurement with the median, min and max over the repetitions and
the machine it ran on, then the cases with budgets: the scale cases of
``bench/scale.py`` and the footprint of ``bench/footprint.py`` (memory,
Allocate handling, startup, idle CPU, and the image with ``--image-archive``).
The run exits 1 when one is over its budget. ``--short`` runs the footprint
in shorter runs and the fleet at N=10 (``bench/fleet.py``): what CI runs on
every push (``.ci/run``); the full run has the fleet at N=10, 30 and 100 and
draws docs/fleet-reconnect.svg from it. Targets
(DESIGN.md, docs/contributing/performance.md): re-registration after a kubelet restart
under 1 s; Allocate fast enough never to stall pod admission.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import fleet, footprint, scale  # noqa: E402
from bench.idle_cpu import daemon_env, serve_env  # noqa: E402
from genericdp.config import load, load_text  # noqa: E402
from genericdp.deviceplugin.backend import DevicePluginBackend  # noqa: E402
from genericdp.discovery import discover  # noqa: E402
from genericdp.kubelet.embedded import EmbeddedKubelet  # noqa: E402
from genericdp.runtime.supervisor import Supervisor, all_registered  # noqa: E402
from genericdp.settings import Settings  # noqa: E402
from tests.fakesys import FakeHost  # noqa: E402


def line(name: str, samples: list[float], unit: str = "ms", scale: float = 1000.0) -> None:
    values = [s * scale for s in samples]
    print(
        f"{name:<58} median {statistics.median(values):9.2f} {unit}"
        f"   min {min(values):9.2f}   max {max(values):9.2f}   n={len(values)}"
    )


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                cpu = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.node()}: {os.cpu_count()} cores, {cpu}, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def fake_host(root: Path, dongles: int) -> FakeHost:
    host = FakeHost(root)
    for i in range(dongles):
        host.add_usb_serial(
            port=f"1-{i + 1}", serial=f"SER{i:04d}", ttys=(f"ttyUSB{i}",), by_id=True
        )
    for card in range(4):
        host.add_drm_card(
            pci=f"0000:{card + 3:02x}:00.0", card=card, render=128 + card, numa_node=card % 2
        )
    return host


def bench_discovery(base: Path) -> None:
    host = fake_host(base / "host", 64)
    cfg = load_text(
        """\
version: v1
resources:
  - name: example.com/serial
    match: [{udev: {subsystem: tty, kernel: "ttyUSB*", attributes: {idVendor: "0403"}}}]
    groupBy: parent:usb
  - name: example.com/by-id
    match: [{glob: "/dev/serial/by-id/*"}]
  - name: example.com/gpu
    match: [{glob: "/dev/dri/card*"}, {glob: "/dev/dri/renderD*"}]
    groupBy: parent:pci
""",
        "bench.yaml",
    )
    for definition in cfg.resources:
        samples = []
        for _ in range(30):
            start = time.perf_counter()
            units = discover(definition, host.roots)
            samples.append(time.perf_counter() - start)
        line(f"discover {definition.name} ({len(units)} units)", samples)


def bench_config_load() -> None:
    examples = sorted((REPO / "configs" / "examples").glob("*.yaml"))
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        for path in examples:
            load([path])
        samples.append(time.perf_counter() - start)
    line(f"load + validate all {len(examples)} example configs", samples)


def resources_config(n: int) -> str:
    text = "version: v1\nresources:\n"
    for i in range(n):
        text += (
            f"  - name: example.com/r{i}\n"
            "    match: [{glob: /dev/null}]\n"
            "    count: 4\n"
            "    allocate:\n"
            "      env: {DEVS: \"{{ devices | map(attribute='path') | join(',') }}\"}\n"
        )
    return text


async def restart_trials(base: Path, n: int, trials: int) -> tuple[list[float], list[float]]:
    """(time to first registration of all, time from new kubelet.sock to all re-registered)."""
    plugin_dir = base / "dp"
    settings = Settings(plugin_dir=plugin_dir, dev_root=Path("/dev"), rescan_interval=3600.0)  # type: ignore[call-arg]
    cfg = load_text(resources_config(n), f"bench-{n}.yaml")
    names = [r.name for r in cfg.resources]
    first: list[float] = []
    again: list[float] = []

    def all_connected(k: EmbeddedKubelet, gen: dict[str, int]) -> bool:
        res = k.resources
        return all(
            nm in res and res[nm].connected and res[nm].registrations > gen.get(nm, 0)
            for nm in names
        )

    async with EmbeddedKubelet(plugin_dir) as kubelet:
        supervisor = Supervisor(settings, DevicePluginBackend(settings))
        start = time.perf_counter()
        await supervisor.start(cfg)
        await kubelet.wait_until(functools.partial(all_connected, gen={}), 30)
        first.append(time.perf_counter() - start)
        await supervisor.wait_for(all_registered(), timeout=30)
        for _ in range(trials):
            gen = {nm: s.registrations for nm, s in kubelet.resources.items()}
            await kubelet.stop()
            await kubelet.start()  # kubelet.sock exists from here on
            start = time.perf_counter()
            await kubelet.wait_until(functools.partial(all_connected, gen=gen), 30)
            again.append(time.perf_counter() - start)
        await supervisor.stop()
    return first, again


async def allocate_trials(base: Path, trials: int) -> list[float]:
    plugin_dir = base / "dp2"
    settings = Settings(plugin_dir=plugin_dir, dev_root=Path("/dev"))  # type: ignore[call-arg]
    cfg = load_text(
        resources_config(1).replace("count: 4", f"count: {trials + 1}"), "bench-alloc.yaml"
    )
    samples = []
    async with EmbeddedKubelet(plugin_dir) as kubelet:
        supervisor = Supervisor(settings, DevicePluginBackend(settings))
        await supervisor.start(cfg)
        await kubelet.wait_until(
            lambda k: (
                "example.com/r0" in k.resources and k.resources["example.com/r0"].allocatable > 0
            ),
            30,
        )
        for i in range(trials):
            start = time.perf_counter()
            await kubelet.allocate("example.com/r0", 1, pod=f"p{i}")
            samples.append(time.perf_counter() - start)
        await supervisor.stop()
    return samples


def bench_hotplug(base: Path, trials: int = 20) -> None:
    """Plug (then unplug) a USB serial dongle: time until the kubelet's capacity changes."""
    host = FakeHost(base / "hp" / "host")
    settings = Settings(  # type: ignore[call-arg]
        plugin_dir=base / "hp" / "dp",
        dev_root=host.dev,
        sys_root=host.sys,
        udev_root=host.udev,
        rescan_interval=3600.0,  # only the inotify watch can explain a change
    )
    cfg = load_text(
        "version: v1\nresources:\n- name: example.com/serial\n"
        "  match: [{udev: {subsystem: tty, kernel: 'ttyUSB*'}}]\n  groupBy: parent:usb\n",
        "bench-hotplug.yaml",
    )

    def capacity_is(k: EmbeddedKubelet, n: int) -> bool:
        res = k.resources.get("example.com/serial")
        return res is not None and res.capacity == n

    def has(count: int) -> functools.partial[bool]:
        return functools.partial(capacity_is, n=count)

    async def run() -> tuple[list[float], list[float]]:
        plugged: list[float] = []
        unplugged: list[float] = []
        async with EmbeddedKubelet(settings.plugin_dir) as kubelet:
            supervisor = Supervisor(settings, DevicePluginBackend(settings))
            await supervisor.start(cfg)
            await kubelet.wait_until(has(0), 30)
            for i in range(trials):
                start = time.perf_counter()
                host.add_usb_serial(port=f"1-{i + 1}", serial=f"S{i}", ttys=(f"ttyUSB{i}",))
                await kubelet.wait_until(has(i + 1), 30)
                plugged.append(time.perf_counter() - start)
            for i in range(trials):
                start = time.perf_counter()
                host.remove(f"/dev/ttyUSB{i}")
                await kubelet.wait_until(has(trials - i - 1), 30)
                unplugged.append(time.perf_counter() - start)
            await supervisor.stop()
        return plugged, unplugged

    plugged, unplugged = asyncio.run(run())
    settle = settings.hotplug_settle
    line(f"hotplug (settle {settle:g}s): plug -> kubelet capacity", plugged)
    line(f"hotplug (settle {settle:g}s): unplug -> kubelet capacity", unplugged)


def bench_serve_memory(base: Path, n: int) -> None:
    """Peak RSS of a real `genericdp serve` process with n resources, registered."""
    cfg = base / "mem.yaml"
    cfg.write_text(resources_config(n))
    plugin_dir = base / "dpm"

    async def main() -> float:
        async with EmbeddedKubelet(plugin_dir) as kubelet:
            env = serve_env(base) | daemon_env()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "genericdp",
                "serve",
                "--config",
                str(cfg),
                "--plugin-dir",
                str(plugin_dir),
                "--log-level",
                "error",
                env=env,
            )
            names = [f"example.com/r{i}" for i in range(n)]
            await kubelet.wait_until(
                lambda k: all(nm in k.resources and k.resources[nm].connected for nm in names), 60
            )
            status = await asyncio.to_thread(Path(f"/proc/{proc.pid}/status").read_text)
            rss_kb = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM:"))
            proc.terminate()
            await proc.wait()
            return rss_kb / 1024

    mib = asyncio.run(main())
    print(
        f"{'peak RSS of genericdp serve, ' + str(n) + ' resources registered':<58} {mib:9.1f} MiB"
    )


def _connected(kubelet: EmbeddedKubelet, name: str) -> bool:
    return name in kubelet.resources and kubelet.resources[name].connected


def bench_reload(base: Path, trials: int = 10) -> None:
    """ConfigMap ``..data`` swap adding a resource -> the kubelet sees it registered."""
    from genericdp.aio import TaskSet
    from genericdp.runtime.configwatch import ConfigWatcher
    from tests.test_configwatch import ConfigMapVolume

    async def run(settle: float) -> list[float]:
        plugin_dir = base / f"dpr{settle}"
        settings = Settings(plugin_dir=plugin_dir, dev_root=Path("/dev"), rescan_interval=3600.0)  # type: ignore[call-arg]
        volume = ConfigMapVolume(base / f"cm{settle}")
        volume.write({"gdp.yaml": resources_config(1)})
        samples = []
        async with EmbeddedKubelet(plugin_dir) as kubelet:
            supervisor = Supervisor(settings, DevicePluginBackend(settings))
            await supervisor.start(load([volume.target]))
            watcher = ConfigWatcher(volume.target, supervisor, settle=settle)
            tasks = TaskSet()
            tasks.spawn("config-watch", watcher.run)
            await watcher.ready.wait()
            for i in range(1, trials + 1):
                name = f"example.com/r{i}"
                start = time.perf_counter()
                volume.write({"gdp.yaml": resources_config(i + 1)})
                await kubelet.wait_until(functools.partial(_connected, name=name), 30)
                samples.append(time.perf_counter() - start)
            await tasks.stop()
            await supervisor.stop()
        return samples

    default = Settings.model_fields["reload_settle"].default
    for settle in (default, 0.0):
        line(
            f"ConfigMap swap -> new resource registered (settle {settle}s)",
            asyncio.run(run(settle)),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--short", action="store_true", help="the footprint and fleet budgets only, shorter"
    )
    parser.add_argument(
        "--image-archive", type=Path, help="an OCI archive of the image (e2e/local/images.sh)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # measure, do not print plugin logs
    print(f"machine: {machine()}")
    if args.short:
        over_budget = footprint.report(footprint.SHORT, args.image_archive)
        sys.exit(fleet.report(fleet.SHORT) | over_budget)
    base = Path(tempfile.mkdtemp(prefix="gdp-bench-", dir="/tmp"))
    try:
        bench_config_load()
        bench_discovery(base)
        for n in (1, 10, 50):
            first, again = asyncio.run(restart_trials(base / f"r{n}", n, 15))
            line(f"{n} resource(s): start -> all registered", first)
            line(f"{n} resource(s): kubelet restart -> all re-registered", again)
        line(
            "Allocate through the embedded kubelet (gRPC, templates)",
            asyncio.run(allocate_trials(base, 200)),
        )
        bench_hotplug(base)
        bench_serve_memory(base, 1)
        bench_serve_memory(base, 50)
        bench_reload(base)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"this benchmark process max RSS: {peak:.1f} MiB")
        over_budget = scale.main()  # the cases with budgets (bench/scale.py)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    over_budget |= footprint.report(footprint.FULL, args.image_archive)
    over_budget |= fleet.report(fleet.FULL, REPO / "docs" / "fleet-reconnect.svg")
    sys.exit(over_budget)


if __name__ == "__main__":
    main()
