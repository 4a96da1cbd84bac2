"""``genericdp simulate``: the real daemon code against the embedded kubelet.

The same ``Supervisor`` that ``serve`` runs registers every resource with an
``EmbeddedKubelet`` in a temporary directory; what it prints is what the node status and
a container would show. ``--backend dra`` runs the DRA backend against the embedded DRA
kubelet and API server (``dra/embedded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ruamel.yaml import YAML

from genericdp.aio import StopSignals
from genericdp.allocation.cdi import claim_spec_name, spec_path
from genericdp.allocation.devices import DeviceSpec
from genericdp.allocation.plan import Allocation, Mount
from genericdp.config import load
from genericdp.config.model import Config, frozen_map
from genericdp.errors import GenericdpError
from genericdp.exits import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_OK
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded import EmbeddedKubelet
from genericdp.kubelet.embedded.state import EventKind, ResourceSnapshot
from genericdp.nodelabels import source_lines
from genericdp.runtime.reconcile import LABELS_UNKNOWN
from genericdp.settings import Settings

if TYPE_CHECKING:
    from genericdp.dra.embedded import EmbeddedClaims, EmbeddedDraKubelet, EmbeddedSlices
    from genericdp.runtime.edge import PluginStatus


class SimulateUsageError(GenericdpError):
    """A malformed ``--allocate`` value."""


@dataclass(frozen=True)
class AllocationRequest:
    """``--allocate RESOURCE=N``: one container asking for N of RESOURCE."""

    resource: str
    count: int


def parse_allocations(values: Sequence[str]) -> tuple[AllocationRequest, ...]:
    """Parse ``RESOURCE=N`` values; N defaults to 1."""
    requests = []
    for value in values:
        resource, sep, count_text = value.partition("=")
        count_text = count_text if sep else "1"
        if not resource or not count_text.isdigit() or int(count_text) < 1:
            raise SimulateUsageError(
                f"--allocate {value!r}: expected RESOURCE=N with N a whole number >= 1, "
                "e.g. example.com/serial=1"
            )
        requests.append(AllocationRequest(resource, int(count_text)))
    return tuple(requests)


def _listed(kubelet: EmbeddedKubelet, name: str) -> bool:
    """Registered, connected, and the first device list after registering arrived."""
    snap = kubelet.resources.get(name)
    if snap is None or not snap.connected:
        return False
    kinds = [event.kind for event in kubelet.events if event.resource == name]
    if EventKind.REGISTERED not in kinds:
        return False
    return EventKind.DEVICES in kinds[kinds.index(EventKind.REGISTERED) :]


def _table(resources: Mapping[str, ResourceSnapshot], names: Sequence[str]) -> list[str]:
    width = max([len("RESOURCE"), *(len(n) for n in names)])
    lines = [f"  {'RESOURCE':<{width}}  CAPACITY  ALLOCATABLE  ENDPOINT"]
    for name in names:
        snap = resources.get(name)
        if snap is None:
            lines.append(f"  {name:<{width}}  -         -            not registered")
            continue
        endpoint = snap.endpoint if snap.connected else "(disconnected)"
        lines.append(f"  {name:<{width}}  {snap.capacity:<8}  {snap.allocatable:<11}  {endpoint}")
    return lines


def _not_served(name: str, why: str) -> str:
    hint = " (give them with --node-labels)" if why == LABELS_UNKNOWN else ""
    return f"  {name}: not served on this node: {why}{hint}"


async def _within(wait: Awaitable[None]) -> bool:
    """Whether ``wait`` (a ``wait_until``) ends before its timeout."""
    try:
        await wait
    except TimeoutError:
        return False
    return True


def _registrations(
    kubelet: EmbeddedKubelet,
    statuses: Mapping[str, PluginStatus],
    config: Config,
    settings: Settings,
    skipped: Mapping[str, str],
) -> list[str]:
    lines = []
    for definition in config.resources:
        name = definition.name
        if name in skipped:
            lines.append(_not_served(name, skipped[name]))
            continue
        snap = kubelet.resources.get(name)
        if snap is not None and snap.options is not None:
            lines.append(
                f"  {name}: registered "
                f"(preStartRequired={snap.options.pre_start_required}, "
                "getPreferredAllocationAvailable="
                f"{snap.options.get_preferred_allocation_available})"
            )
        else:
            status = statuses.get(name)
            error = status.last_error if status else None
            lines.append(f"  {name}: NOT registered: {error or 'no answer'}")
        if definition.allocate.cdi:
            spec = spec_path(settings.cdi_dir, name)
            shown = spec if spec.exists() else "not written: no units yet, or see the log"
            lines.append(f"    CDI spec {shown}")
    return lines


def _received(container: pb.ContainerAllocateResponse) -> Allocation:
    """What the kubelet passed on to the container, as our own type."""
    return Allocation(
        devices=tuple(
            DeviceSpec(d.container_path, d.host_path, d.permissions) for d in container.devices
        ),
        mounts=tuple(Mount(m.container_path, m.host_path, m.read_only) for m in container.mounts),
        env=frozen_map(container.envs),
        annotations=frozen_map(container.annotations),
        cdi_devices=tuple(c.name for c in container.cdi_devices),
    )


async def _allocate(
    kubelet: EmbeddedKubelet, requests: Sequence[AllocationRequest], out: TextIO
) -> bool:
    ok = True
    for index, request in enumerate(requests, start=1):
        pod = f"simulated-{index}"
        print(f"\nallocate {request.resource}={request.count} (pod default/{pod}):", file=out)
        if request.resource not in kubelet.resources:
            known = ", ".join(sorted(kubelet.resources)) or "none"
            print(f"  refused: unknown resource (registered: {known})", file=out)
            ok = False
            continue
        try:
            response = await kubelet.allocate(request.resource, request.count, pod=pod)
        except GenericdpError as exc:
            plain = getattr(exc, "plain", "")
            print(f"  refused: {plain or exc}", file=out)
            if plain:
                print(f"  (the kubelet's event: {exc})", file=out)
            ok = False
            continue
        allocated = next((p.device_ids for p in kubelet.pod_devices() if p.pod == pod), ())
        print(f"  device IDs: {', '.join(allocated)}", file=out)
        lines = [line for c in response.container_responses for line in _received(c).lines()]
        print("  the container receives:", *(lines or ["    (nothing)"]), sep="\n", file=out)
    return ok


def _config(path: Path, settings: Settings) -> Config | None:
    """The config at ``path``; None, said on stderr, when the device root is no directory."""
    config = load([path])
    if not settings.dev_root.is_dir():
        print(f"error: device root {settings.dev_root} is not a directory", file=sys.stderr)
        return None
    return config


def _more_events_than(count: int) -> Callable[[EmbeddedKubelet], bool]:
    return lambda kubelet: len(kubelet.events) > count


async def _watch(kubelet: EmbeddedKubelet, names: Sequence[str], out: TextIO) -> None:
    """Print every kubelet event and the node status when it changes, until cancelled."""
    seen = len(kubelet.events)
    last = {n: (s.capacity, s.allocatable) for n, s in kubelet.resources.items()}
    while True:
        await kubelet.wait_until(_more_events_than(seen), timeout=3600)
        events = kubelet.events
        for event in events[seen:]:
            if event.kind is not EventKind.DEVICES:
                print(f"  event: {event.kind.value} {event.resource}: {event.detail}", file=out)
        seen = len(events)
        now = {n: (s.capacity, s.allocatable) for n, s in kubelet.resources.items()}
        if now != last:
            print("node status:", *_table(kubelet.resources, names), sep="\n", file=out)
            last = now
        out.flush()


async def _watch_until_signal(kubelet: EmbeddedKubelet, names: Sequence[str], out: TextIO) -> None:
    signals = StopSignals()
    watcher = asyncio.create_task(_watch(kubelet, names, out), name="watch")
    try:
        await signals.wait()
    finally:
        signals.remove()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def simulate(
    path: Path,
    settings: Settings,
    *,
    requests: Sequence[AllocationRequest] = (),
    once: bool = False,
    timeout: float = 10.0,  # noqa: ASYNC109 - how long registration may take
    out: TextIO | None = None,
) -> int:
    """Run the daemon against an embedded kubelet; print what the kubelet sees."""
    from genericdp.deviceplugin.backend import DevicePluginBackend
    from genericdp.runtime.supervisor import Supervisor

    stream = out or sys.stdout
    config = _config(path, settings)
    if config is None:
        return EXIT_ENVIRONMENT
    names = [r.name for r in config.resources]
    # /tmp, not the CWD: a unix socket path must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="gdp-sim-", dir="/tmp") as tmp:
        plugin_dir = Path(tmp) / "device-plugins"
        run_settings = settings.model_copy(
            update={
                "config": path,
                "plugin_dir": plugin_dir,
                "pod_resources_socket": Path(tmp) / "pod-resources" / "kubelet.sock",
                # Never the host's /var/run/cdi: a runtime there would see simulated devices.
                "cdi_dir": Path(tmp) / "cdi",
                "node_name": settings.node_name or "simulated-node",
            }
        )
        print(
            f"genericdp simulate: {path} ({len(names)} resource(s)); "
            f"embedded kubelet in {plugin_dir}",
            file=stream,
        )
        async with EmbeddedKubelet(
            plugin_dir, pod_resources_socket=run_settings.pod_resources_socket
        ) as kubelet:
            supervisor = Supervisor(
                run_settings,
                DevicePluginBackend(run_settings),
                node_labels=run_settings.static_node_labels,
            )
            try:
                await supervisor.start(config)
                skipped = dict(supervisor.skipped)
                names = [n for n in names if n not in skipped]
                registered = await _within(
                    kubelet.wait_until(lambda k: all(_listed(k, n) for n in names), timeout)
                )
                lines = _registrations(kubelet, supervisor.status(), config, run_settings, skipped)
                print("\nregistrations:", *lines, sep="\n", file=stream)
                print("\nnode status:", *_table(kubelet.resources, names), sep="\n", file=stream)
                print("\nnode labels (published with GENERICDP_NODE_FEATURES):", file=stream)
                print(*source_lines(supervisor, run_settings.node_name), sep="\n", file=stream)
                # By default, show what one unit of every resource gives a container.
                wanted = requests or tuple(
                    AllocationRequest(n, 1)
                    for n in names
                    if n in kubelet.resources and kubelet.resources[n].allocatable > 0
                )
                ok = await _allocate(kubelet, wanted, stream) and registered
                if not once:
                    print("\nwatching (Ctrl-C to stop):", file=stream)
                    stream.flush()
                    await _watch_until_signal(kubelet, names, stream)
                stream.flush()
                return EXIT_OK if ok else EXIT_FAILED
            finally:
                await supervisor.stop()


# The UID of the claim ``simulate --backend dra`` prepares (it names its CDI devices).
SIMULATED_CLAIM_UID = "00000000-0000-0000-0000-000000000001"
SIMULATED_CLAIM_NAME = "simulated"  # in "default"


async def simulate_dra(
    path: Path,
    settings: Settings,
    *,
    driver: str,
    requests: Sequence[AllocationRequest] = (),
    timeout: float = 10.0,  # noqa: ASYNC109 - how long registration may take
    out: TextIO | None = None,
) -> int:
    """``simulate --backend dra``: print the ResourceSlices published, then, for each
    request, what prepare does with a claim allocated the first N untainted devices by
    name (the scheduler may pick any); the claim is unprepared before the next one."""
    from genericdp.dra.backend import DraBackend
    from genericdp.dra.embedded import (
        DraKubeletError,
        EmbeddedClaims,
        EmbeddedDraKubelet,
        EmbeddedSlices,
    )
    from genericdp.hooks import run_hook
    from genericdp.kubeletplugin.publisher import SlicePublisher
    from genericdp.runtime.supervisor import Supervisor

    stream = out or sys.stdout
    config = _config(path, settings)
    if config is None:
        return EXIT_ENVIRONMENT
    node = settings.node_name or "simulated-node"
    with tempfile.TemporaryDirectory(prefix="gdp-sim-", dir="/tmp") as tmp:
        run_settings = settings.model_copy(
            update={
                "config": path,
                "backend": "dra",
                "dra_driver_name": driver,
                "dra_registration_dir": Path(tmp) / "plugins_registry",
                "dra_plugins_dir": Path(tmp) / "plugins",
                "cdi_dir": Path(tmp) / "cdi",
                "node_name": node,
                "pod_uid": "",
            }
        )
        store = EmbeddedSlices(node=node, driver=driver)
        claims = EmbeddedClaims()
        publisher = SlicePublisher(store)
        kubelet = EmbeddedDraKubelet(run_settings.dra_registration_dir)
        try:
            await kubelet.start()
        except DraKubeletError as exc:
            print(f"error: embedded DRA kubelet: {exc}", file=sys.stderr)
            return EXIT_ENVIRONMENT
        try:
            backend = DraBackend(
                run_settings, claims=claims, publisher=publisher, run_hook=run_hook
            )
            supervisor = Supervisor(
                run_settings,
                backend,
                run_hook=run_hook,
                node_labels=run_settings.static_node_labels,
            )
            await publisher.start()
            try:
                await supervisor.start(config)
                registered = await _within(
                    kubelet.wait_until(lambda k: k.registered(driver), timeout=timeout)
                )
                await publisher.flush(timeout)
                served = _dra_report(config, supervisor.skipped, store, path, driver, stream)
                if not registered:
                    print(
                        f"\nthe driver did not register within {timeout:g}s: see the log",
                        file=stream,
                    )
                session = _DraSession(kubelet, claims, run_settings, settings, stream)
                ok = await session.claims(served, requests) and registered
            finally:
                await supervisor.stop()
                await backend.close()
                await publisher.close()
        finally:
            await kubelet.stop()
    return EXIT_OK if ok else EXIT_FAILED


def _dra_report(  # noqa: PLR0917 -- one call site, each argument a different kind
    config: Config,
    skipped: Mapping[str, str],
    store: EmbeddedSlices,
    path: Path,
    driver: str,
    stream: TextIO,
) -> dict[str, list[tuple[str, bool]]]:
    """Print the header, the resources not served and the slices; each served resource's
    devices by name, and whether tainted."""
    print(
        f"genericdp simulate --backend dra: {path} ({len(config.resources)} resource(s)); "
        f"driver {driver}, node {store.node}",
        file=stream,
    )
    for name, why in skipped.items():
        print(_not_served(name, why), file=stream)
    print(f"\nResourceSlices ({len(store.objects)}):", file=stream)
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    served: dict[str, list[tuple[str, bool]]] = {
        r.name: [] for r in config.resources if r.name not in skipped
    }
    for name in sorted(store.objects):
        obj = copy.deepcopy(store.objects[name])
        del obj["metadata"]["resourceVersion"]  # the embedded server's, not the cluster's
        print("---", file=stream)
        yaml.dump(obj, stream)
        for device in obj["spec"]["devices"]:
            resource = device["attributes"]["resource"]["string"]
            if resource in served:
                served[resource].append((device["name"], bool(device.get("taints"))))
    return {name: sorted(devices) for name, devices in served.items()}


@dataclass
class _DraSession:
    """Claims allocated in the embedded API server and prepared by the embedded kubelet."""

    kubelet: EmbeddedDraKubelet
    api: EmbeddedClaims
    settings: Settings  # the temporary directories it runs in
    shown: Settings  # the directories of the node it stands for, which the output names
    out: TextIO

    async def claims(
        self,
        served: Mapping[str, Sequence[tuple[str, bool]]],
        requests: Sequence[AllocationRequest],
    ) -> bool:
        """Prepare one claim per request (by default one device of every resource with an
        untainted one); whether every one was prepared."""
        usable = {r: [n for n, tainted in found if not tainted] for r, found in served.items()}
        wanted = requests or tuple(AllocationRequest(r, 1) for r, ok in usable.items() if ok)
        ok = True
        for request in wanted:
            print(f"\nclaim for {request.count} of {request.resource}:", file=self.out)
            devices = usable.get(request.resource)
            if devices is None:
                known = ", ".join(sorted(served)) or "none"
                print(f"  refused: unknown resource (served: {known})", file=self.out)
                ok = False
            elif len(devices) < request.count:
                published = len(served[request.resource])
                tainted = f", {published - len(devices)} of them tainted (unhealthy)"
                why = tainted if published > len(devices) else ""
                print(f"  unsatisfiable: {published} device(s) published{why}", file=self.out)
                ok = False
            else:
                ok = await self._prepare(devices[: request.count]) and ok
        return ok

    async def _prepare(self, devices: Sequence[str]) -> bool:
        """One claim of ``devices`` prepared, shown and unprepared; whether all went well."""
        from genericdp.dra import metadata
        from genericdp.dra.embedded import DraKubeletError, UnresolvableCdiError, resolve_cdi
        from genericdp.kubeletplugin.claims import AllocatedDevice, ClaimRef

        driver, node, request = self.settings.dra_driver_name, self.settings.node_name, "req"
        claim = ClaimRef("default", SIMULATED_CLAIM_NAME, SIMULATED_CLAIM_UID)
        self.api.allocate(claim, [AllocatedDevice(request, node, d) for d in devices])
        print("  allocated devices: " + ", ".join(f"{node}/{d}" for d in devices), file=self.out)
        try:
            given = await self.kubelet.prepare(driver, [claim])
            ids = list(dict.fromkeys(given))  # the claim's metadata device is each device's
            print("  prepare answers the CDI devices " + ", ".join(ids), file=self.out)
            resolve_cdi(self.settings.cdi_dir, ids)  # as the container runtime does
            spec = self.settings.cdi_dir / claim_spec_name(driver, claim.uid)
            print(f"  and writes this CDI spec (claim UID {claim.uid}):", file=self.out)
            self._indented(spec)
            where = metadata.container_path(driver, claim.name, "", request)
            print(
                f"  and this device metadata, which the container reads at {where}:", file=self.out
            )
            plugin_dir = self.settings.dra_plugins_dir / driver
            self._indented(metadata.host_path(plugin_dir, claim.namespace, claim.name, request))
            await self.kubelet.unprepare(driver, [claim])
        except (DraKubeletError, UnresolvableCdiError) as exc:
            print(f"  refused: {exc}", file=self.out)
            return False
        return True

    def _indented(self, path: Path) -> None:
        """The file at ``path``, indented, naming the node's plugins directory."""
        here, there = self.settings.dra_plugins_dir, self.shown.dra_plugins_dir
        for line in path.read_text().replace(str(here), str(there)).splitlines():
            print(f"    {line}", file=self.out)
