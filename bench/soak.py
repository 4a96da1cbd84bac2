"""The soak: one real ``genericdp serve`` process under every kind of churn at once.

Run on demand (not in the default test run)::

    ./dev soak                      # 10,000 reloads and Allocates, 1,000 restarts and hotplugs,
                                    # 300 flapped hand-outs
    ./dev soak --scale 0.01         # the same mix, a hundredth of it (a quick look)

The driver holds an embedded kubelet (device manager and PodResources) and a
fake host tree; the daemon is a subprocess, configured as a DaemonSet would
configure it, on a ConfigMap-shaped directory. Four phases run one after the
other against the same process:

- reloads: the ConfigMap's ``..data`` swapped between two valid configs, one
  with an extra resource; each swap waits for the kubelet to see it;
- Allocates: a pod admitted (GetPreferredAllocation, Allocate, templates) and
  released, again and again;
- kubelet restarts, crash-style (``EmbeddedKubelet.crash``: connections and
  Registers in flight dropped, sockets deleted by the next start) at random
  moments, many while a Register is in flight; a quarter wait until every
  resource is back and record how long that took;
- hotplug: a USB serial dongle plugged and unplugged; each waits for the
  kubelet's capacity to follow;
- flaps: the dongle handed out with a ``cleanup`` hook, and while the pod
  holds it its resource's ``nodeSelector`` stops and starts matching (a
  reload, the path a Node label change takes), the dongle is unplugged and
  plugged back, or both; then the pod goes. Every hand-out must be cleaned
  exactly once, with the unit it was handed out as: checked at each next
  Allocate (the one before must be cleaned by then, once) and at the end.
  About 0.2 s a hand-out: a minute at scale 1 on 2 shared cores at load 8.

Before and after each phase it prints the daemon's RSS, open fds and threads,
and at the end the registration invariants (the embedded kubelet's
``problems()``: nothing stale, one stream per resource; one Register per
resource per kubelet life; none refused or failing its dial-back),
``/healthz`` answering, and SIGTERM leaving with exit 0 within 5 s. Exits 1
when an invariant fails or a wait times out.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# gRPC's core logs every GOAWAY of a crashed kubelet's dial-back at INFO.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from genericdp.kubelet.api import deviceplugin_pb2 as pb  # noqa: E402
from genericdp.kubelet.embedded import EmbeddedKubelet  # noqa: E402
from genericdp.kubelet.embedded.admission import AllocationError  # noqa: E402
from genericdp.kubelet.embedded.state import EventKind  # noqa: E402
from tests.fakesys import FakeHost  # noqa: E402
from tests.test_configwatch import ConfigMapVolume  # noqa: E402

SERIAL = "example.com/serial"
LOOP = "example.com/loop"
TOGGLE = "example.com/toggle"
WAIT = 30.0  # seconds any one step may take before the soak calls it a failure
BACK_WITHIN = 1.0  # seconds from a new kubelet.sock to every resource registered (DESIGN.md)
PHASES = frozenset({"reloads", "allocates", "restarts", "hotplug", "flaps"})
FLAP_LABEL = "soak.example.com/serial"  # the daemon's node labels: {FLAP_LABEL: "on"}

BASE_CONFIG = f"""\
version: v1
resources:
  - name: {SERIAL}
    match: [{{udev: {{subsystem: tty, kernel: "ttyUSB*"}}}}]
    groupBy: parent:usb
  - name: {LOOP}
    match: [{{glob: "/dev/loop*"}}]
    count: 4
    allocate:
      env:
        LOOPS: "{{{{ devices | map(attribute='path') | join(',') }}}}"
        UNITS: "{{{{ device_ids | join(',') }}}}"
        NODE: "{{{{ node_name }}}}"
"""

TOGGLE_RESOURCE = f"""\
  - name: {TOGGLE}
    match: [{{glob: "/dev/loop0"}}]
"""


def flap_config(*, served: bool, cleanups: Path) -> str:
    """BASE_CONFIG with a nodeSelector (matching the node's labels or not), the unit's
    ID in the container's env, and a cleanup hook that appends it to ``cleanups``."""
    return BASE_CONFIG.replace(
        "    groupBy: parent:usb\n",
        "    groupBy: parent:usb\n"
        f"    nodeSelector: {{matchLabels: {{{FLAP_LABEL}: {'on' if served else 'off'}}}}}\n"
        "    allocate: {env: {UNIT: \"{{ device_ids | join(',') }}\"}}\n"
        "    hooks:\n"
        f"      cleanup: {{exec: [/bin/sh, -c, 'echo \"$GENERICDP_UNIT_ID\" >> {cleanups}']}}\n",
    )


@dataclass(frozen=True)
class Sample:
    rss_kib: int
    hwm_kib: int
    fds: int
    threads: int

    def __str__(self) -> str:
        return (
            f"RSS {self.rss_kib / 1024:6.1f} MiB (peak {self.hwm_kib / 1024:6.1f})"
            f"   fds {self.fds:4d}   threads {self.threads:3d}"
        )


def sample(pid: int) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = {k: v.split() for k, _, v in (x.partition(":") for x in status.splitlines())}
    return Sample(
        rss_kib=int(fields["VmRSS"][0]),
        hwm_kib=int(fields["VmHWM"][0]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(fields["Threads"][0]),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def timing(name: str, samples: list[float]) -> None:
    if not samples:
        return
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"  {name:<44} n={len(ms):<6d} median {statistics.median(ms):8.1f} ms"
        f"   p99 {p99:8.1f} ms   max {ms[-1]:8.1f} ms",
        flush=True,
    )


class SoakError(Exception):
    """An invariant broke or a wait timed out."""


class Soak:
    def __init__(
        self, base: Path, scale: float, *, verbose: bool, phases: frozenset[str] = PHASES
    ) -> None:
        self.base = base
        self.scale = scale
        self.verbose = verbose
        self.phases = phases
        self.host = FakeHost(base / "host")
        for n in range(4):
            self.host.add_loop(n)
        self.volume = ConfigMapVolume(base / "config")
        self.volume.write({"resources.yaml": BASE_CONFIG})
        self.plugin_dir = base / "dp"
        self.pod_resources = base / "pr" / "kubelet.sock"
        self.port = free_port()
        self.failures: list[str] = []
        self.resources = {SERIAL, LOOP}

    def count(self, full: int) -> int:
        return max(1, round(full * self.scale))

    # -- the daemon ------------------------------------------------------------------

    async def start_daemon(self) -> asyncio.subprocess.Process:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
        env.update(
            GENERICDP_CONFIG=str(self.volume.target),
            GENERICDP_PLUGIN_DIR=str(self.plugin_dir),
            GENERICDP_POD_RESOURCES_SOCKET=str(self.pod_resources),
            GENERICDP_DEV_ROOT=str(self.host.dev),
            GENERICDP_SYS_ROOT=str(self.host.sys),
            GENERICDP_UDEV_ROOT=str(self.host.udev),
            GENERICDP_CDI_DIR=str(self.base / "cdi"),
            GENERICDP_STATE_DIR=str(self.base / "state"),
            GENERICDP_NODE_NAME="soak-node",
            GENERICDP_NODE_LABELS=f"{FLAP_LABEL}=on",
            GENERICDP_POD_RESOURCES_POLL_INTERVAL="0.05",
            GENERICDP_METRICS_ADDRESS=f"127.0.0.1:{self.port}",
            GENERICDP_RELOAD_SETTLE="0.01",
            GENERICDP_HOTPLUG_SETTLE="0.02",
            GENERICDP_LOG_LEVEL="info" if self.verbose else "error",
        )
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "genericdp", "serve", env=env
        )

    def healthz(self) -> int:
        url = f"http://127.0.0.1:{self.port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as response:
            status: int = response.status
            return status

    # -- waiting ---------------------------------------------------------------------

    async def until(
        self, kubelet: EmbeddedKubelet, what: str, predicate: Callable[[EmbeddedKubelet], bool]
    ) -> None:
        try:
            await kubelet.wait_until(predicate, WAIT)
        except TimeoutError as exc:
            raise SoakError(f"{what}: not within {WAIT:g}s\n{exc}") from None

    @staticmethod
    def connected(kubelet: EmbeddedKubelet, names: frozenset[str]) -> bool:
        res = kubelet.resources
        return all(n in res and res[n].connected for n in names)

    # -- phases ----------------------------------------------------------------------

    async def reloads(self, kubelet: EmbeddedKubelet) -> list[float]:
        samples = []
        for i in range(self.count(10_000)):
            add = i % 2 == 0
            text = BASE_CONFIG + (TOGGLE_RESOURCE if add else "")
            start = time.perf_counter()
            self.volume.write({"resources.yaml": text})
            if add:
                await self.until(kubelet, f"reload {i}: {TOGGLE} registered", _toggle_on)
            else:
                await self.until(kubelet, f"reload {i}: {TOGGLE} removed", _toggle_off)
            samples.append(time.perf_counter() - start)
        self.volume.write({"resources.yaml": BASE_CONFIG})
        await self.until(kubelet, f"{TOGGLE} removed at the end", _toggle_off)
        return samples

    async def allocates(self, kubelet: EmbeddedKubelet) -> list[float]:
        samples = []
        for i in range(self.count(10_000)):
            start = time.perf_counter()
            answer = await kubelet.allocate(LOOP, 1 + i % 3, pod=f"soak-{i}")
            samples.append(time.perf_counter() - start)
            envs = answer.container_responses[0].envs
            if envs.get("NODE") != "soak-node" or not envs.get("LOOPS"):
                raise SoakError(f"Allocate {i}: unexpected env {dict(envs)}")
            kubelet.release("default", f"soak-{i}")
        return samples

    async def restarts(self, kubelet: EmbeddedKubelet) -> list[float]:
        """Crash-style restarts at random moments; a quarter waited out and timed.

        As in tests/test_registration_races.py: half of the new kubelets come up
        to 80 ms after the crash (the daemon meanwhile tries the dead socket);
        the next crash comes once every resource is back (timed), at once
        (Registers in flight), or a few milliseconds later.
        """
        rng = random.Random(11)  # noqa: S311 -- a reproducible schedule, not a secret
        samples = []
        names = frozenset(self.resources)
        count = self.count(1_000)
        mark = len(kubelet.events)
        for i in range(count):
            await kubelet.crash()
            if rng.random() < 0.5:  # noqa: PLR2004 -- half of the moves
                await asyncio.sleep(rng.uniform(0, 0.08))
            start = time.perf_counter()
            await kubelet.start()
            moment = rng.randrange(4) if i < count - 1 else 0
            if moment == 0:
                await self.until(kubelet, f"restart {i}: every resource back", _sound(names))
                took = time.perf_counter() - start
                samples.append(took)
                if took > BACK_WITHIN:
                    self.failures.append(f"restart {i}: back after {took:.2f} s")
                self.failures.extend(f"restart {i}: {p}" for p in kubelet.problems())
            elif moment == 1:
                await asyncio.sleep(rng.uniform(0, 0.01))  # a random moment, not a wait
        await asyncio.to_thread(self.ready)
        self.check_registrations(kubelet, mark)
        return samples

    def check_registrations(self, kubelet: EmbeddedKubelet, mark: int) -> None:
        """Nothing stale, nothing refused, one Register per resource per kubelet life.

        Refusals by a kubelet that is going down (a Register in flight at a
        crash) are the crash, not a fault of the daemon.
        """
        self.failures.extend(kubelet.problems())
        per_life: dict[str, int] = {}
        for event in kubelet.events[mark:]:
            if event.kind is EventKind.STARTED:
                per_life = {}
            elif event.kind is EventKind.REGISTERED:
                per_life[event.resource] = per_life.get(event.resource, 0) + 1
                if per_life[event.resource] > 1:
                    self.failures.append(f"registered twice with one kubelet: {event}")
            elif "failed to dial" in event.detail or (
                event.kind is EventKind.REJECTED and "shutting down" not in event.detail
            ):
                self.failures.append(f"the kubelet refused or could not dial: {event}")

    def ready(self) -> None:
        url = f"http://127.0.0.1:{self.port}/readyz"
        deadline = time.monotonic() + WAIT
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == HTTPStatus.OK:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SoakError("/readyz did not answer 200 in time")
            time.sleep(0.01)  # polling an HTTP endpoint: no event to wait on

    async def hotplugs(self, kubelet: EmbeddedKubelet) -> list[float]:
        samples = []
        for i in range(self.count(1_000)):
            plug = i % 2 == 0
            start = time.perf_counter()
            if plug:
                self.host.add_usb_serial(port="3-1", serial=f"SOAK{i}", ttys=("ttyUSB9",))
            else:
                self.host.remove("/dev/ttyUSB9")
            want = 1 if plug else 0
            await self.until(
                kubelet, f"hotplug {i}: capacity {want}", functools.partial(_capacity, n=want)
            )
            samples.append(time.perf_counter() - start)
        return samples

    async def flaps(self, kubelet: EmbeddedKubelet) -> list[float]:
        """Hand-outs whose resource flaps (nodeSelector) and whose device is unplugged
        and plugged back while held: each cleaned exactly once (module doc)."""
        rng = random.Random(7)  # noqa: S311 -- a reproducible schedule, not a secret
        log = self.base / "cleanups"
        handed: list[str] = []
        samples = []

        def cleaned() -> list[str]:
            return log.read_text().split() if log.exists() else []

        def check(i: int) -> None:
            if cleaned() != handed[:i]:
                raise SoakError(
                    f"flap {i}: {i} hand-outs ({handed[:i][-3:]} last), {len(cleaned())}"
                    f" cleanups ({cleaned()[-3:]} last): not one cleanup each"
                )

        async def serve(*, on: bool, i: int) -> None:
            self.volume.write({"resources.yaml": flap_config(served=on, cleanups=log)})
            what = f"flap {i}: {SERIAL} {'served' if on else 'withdrawn'}"
            await self.until(kubelet, what, _toggle(SERIAL, on=on))

        async def plug(unit: str, *, on: bool, i: int) -> None:
            if on:
                self.host.add_usb_serial(port="3-1", serial="FLAP", ttys=("ttyUSB9",))
            else:
                self.host.remove("/dev/ttyUSB9")
            health = "Healthy" if on else "Unhealthy"
            await self.until(kubelet, f"flap {i}: {unit} {health}", _health(unit, health))

        self.host.add_usb_serial(port="3-1", serial="FLAP", ttys=("ttyUSB9",))
        await serve(on=False, i=0)  # BASE_CONFIG serves it too: withdrawn, it is the new config
        await serve(on=True, i=0)
        for i in range(self.count(300)):
            start = time.perf_counter()
            answer = await self.admit(kubelet, i)
            check(i)  # the one before is cleaned by now (at the latest by this Allocate)
            unit = answer.container_responses[0].envs["UNIT"]
            handed.append(unit)
            action = rng.choice(("selector", "unplug", "both", "none"))
            if action in {"selector", "both"}:
                await serve(on=False, i=i)
                if action == "both":
                    self.host.remove("/dev/ttyUSB9")
                    await asyncio.sleep(0.05)  # a hotplug nobody serves: nothing to wait for
                    self.host.add_usb_serial(port="3-1", serial="FLAP", ttys=("ttyUSB9",))
                await serve(on=True, i=i)
            if action == "unplug":
                await plug(unit, on=False, i=i)
                await plug(unit, on=True, i=i)
            kubelet.release("default", f"flap-{i}")
            samples.append(time.perf_counter() - start)
        # One more Allocate: the last pod may have gone before any List showed it (a
        # pod shorter than a poll), and then the next Allocate is what cleans it.
        n = len(handed)
        await self.admit(kubelet, n)
        check(n)
        kubelet.release("default", f"flap-{n}")
        self.volume.write({"resources.yaml": BASE_CONFIG})
        await self.until(kubelet, f"{SERIAL} back as it was", _toggle(SERIAL, on=True))
        self.host.remove("/dev/ttyUSB9")
        await self.until(kubelet, f"{SERIAL} without the dongle", _capacity_of(SERIAL, 0))
        print(f"  flaps: {n} hand-outs, each cleaned exactly once")
        return samples

    async def admit(self, kubelet: EmbeddedKubelet, i: int) -> pb.AllocateResponse:
        """Allocate the dongle to pod ``flap-<i>``; again while it is refused because the
        kubelet's list lags the daemon's (a release seen, so the unit is being cleaned,
        or a rescan amid a hotplug, between the kubelet's pick and the Allocate)."""
        deadline = time.monotonic() + WAIT
        while True:
            await self.until(kubelet, f"flap {i}: {SERIAL} free", _allocatable(SERIAL, 1))
            try:
                return await kubelet.allocate(SERIAL, 1, pod=f"flap-{i}")
            except AllocationError as exc:
                if time.monotonic() > deadline:
                    raise SoakError(f"flap {i}: {exc}") from None

    # -- the run ---------------------------------------------------------------------

    async def run(self) -> int:
        async with EmbeddedKubelet(
            self.plugin_dir, pod_resources_socket=self.pod_resources
        ) as kubelet:
            proc = await self.start_daemon()
            try:
                return await self._phases(kubelet, proc)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    async def _phases(self, kubelet: EmbeddedKubelet, proc: asyncio.subprocess.Process) -> int:
        names = frozenset(self.resources)
        await self.until(kubelet, "first registration", lambda k: self.connected(k, names))
        await asyncio.to_thread(self.ready)
        first = sample(proc.pid)
        print(f"start                    {first}", flush=True)
        phases: list[tuple[str, str, Callable[[EmbeddedKubelet], Awaitable[list[float]]]]] = [
            ("reloads", "reloads (..data swap)", self.reloads),
            ("allocates", "Allocates (admit + release)", self.allocates),
            ("restarts", "kubelet restarts (crash-style)", self.restarts),
            ("hotplug", "hotplug (plug / unplug)", self.hotplugs),
            ("flaps", "flaps (selector, hotplug, held)", self.flaps),
        ]
        for key, title, phase in phases:
            if key not in self.phases:
                continue
            started = time.perf_counter()
            samples = await phase(kubelet)
            took = time.perf_counter() - started
            print(f"after {title:<30} {sample(proc.pid)}   ({took:.0f} s)", flush=True)
            timing(title, samples)
        last = sample(proc.pid)
        code = await asyncio.to_thread(self.healthz)
        if code != HTTPStatus.OK:
            self.failures.append(f"/healthz answered {code}")
        proc.send_signal(signal.SIGTERM)
        start = time.perf_counter()
        try:
            async with asyncio.timeout(5):
                returncode = await proc.wait()
        except TimeoutError:
            self.failures.append("SIGTERM: still running after 5 s")
        else:
            if returncode != 0:
                self.failures.append(f"SIGTERM: exit {returncode}")
            print(f"SIGTERM -> exit {returncode} in {time.perf_counter() - start:.2f} s")
        print(
            f"growth over the soak: RSS {(last.rss_kib - first.rss_kib) / 1024:+.1f} MiB,"
            f" fds {last.fds - first.fds:+d}, threads {last.threads - first.threads:+d}"
        )
        if last.fds > first.fds + 8:
            self.failures.append(f"fds grew from {first.fds} to {last.fds}")
        if last.threads > first.threads + 4:
            self.failures.append(f"threads grew from {first.threads} to {last.threads}")
        for failure in self.failures:
            print(f"FAIL {failure}")
        if not self.failures:
            print("invariants: no stale or duplicate registration, one Register per resource")
            print("            per kubelet life, none refused, /healthz 200, SIGTERM exit 0 < 5 s")
        return 1 if self.failures else 0


def _toggle_on(kubelet: EmbeddedKubelet) -> bool:
    res = kubelet.resources.get(TOGGLE)
    return res is not None and res.connected


def _toggle_off(kubelet: EmbeddedKubelet) -> bool:
    res = kubelet.resources.get(TOGGLE)
    return res is None or not res.connected


def _sound(names: frozenset[str]) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        res = kubelet.resources
        ok = all(n in res and res[n].connected and res[n].streams == 1 for n in names)
        return ok and not kubelet.problems()

    return check


def _toggle(name: str, *, on: bool) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        res = kubelet.resources.get(name)
        return (res is not None and res.connected) == on

    return check


def _allocatable(name: str, n: int) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        res = kubelet.resources.get(name)
        return res is not None and res.connected and res.allocatable == n

    return check


def _capacity_of(name: str, n: int) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        res = kubelet.resources.get(name)
        return res is not None and res.connected and res.capacity == n

    return check


def _health(unit: str, health: str) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        res = kubelet.resources.get(SERIAL)
        device = res.devices.get(unit) if res is not None and res.connected else None
        return device is not None and device.health == health

    return check


def _capacity(kubelet: EmbeddedKubelet, n: int) -> bool:
    res = kubelet.resources.get(SERIAL)
    return res is not None and res.connected and res.capacity == n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev soak", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of the full counts (default 1)"
    )
    parser.add_argument("--verbose", action="store_true", help="the daemon logs at info")
    parser.add_argument(
        "--phases",
        default=",".join(sorted(PHASES)),
        help=f"comma-separated subset of {', '.join(sorted(PHASES))} (default: all)",
    )
    args = parser.parse_args(argv)
    phases = frozenset(p.strip() for p in args.phases.split(",") if p.strip())
    if not phases or not phases <= PHASES:
        parser.error(f"--phases takes a subset of {', '.join(sorted(PHASES))}")
    if not 0 < args.scale <= 10:  # noqa: PLR2004 -- the documented range of --scale
        parser.error("--scale must be in (0, 10]")
    base = Path(tempfile.mkdtemp(prefix="gdp-soak-", dir="/tmp"))
    soak = Soak(base, args.scale, verbose=args.verbose, phases=phases)
    print(f"soak in {base}, scale {args.scale:g}", flush=True)
    try:
        return asyncio.run(soak.run())
    except SoakError as exc:
        print(f"FAIL {exc}")
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
