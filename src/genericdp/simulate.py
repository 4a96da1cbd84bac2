"""``genericdp simulate``: the real daemon code against the embedded kubelet.

Nothing here is a mock of the daemon: the same ``Supervisor`` that ``serve``
runs registers every resource with an ``EmbeddedKubelet`` serving in a
temporary directory, which dials back, watches ListAndWatch and admits
containers as the real kubelet's device manager does. What it prints is what
the node status and a container would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ruamel.yaml import YAML

from genericdp.aio import StopSignals
from genericdp.allocation.cdi import claim_device_id, spec_path
from genericdp.allocation.devices import DeviceSpec
from genericdp.allocation.plan import Allocation, Mount
from genericdp.config import load
from genericdp.config.model import Config, ResourceDefinition, frozen_map
from genericdp.discovery.model import Unit
from genericdp.errors import GenericdpError
from genericdp.exits import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_OK
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded import EmbeddedKubelet
from genericdp.kubelet.embedded.state import EventKind, ResourceSnapshot
from genericdp.runtime.nodelabels import source_lines
from genericdp.runtime.reconcile import LABELS_UNKNOWN
from genericdp.settings import Settings

if TYPE_CHECKING:
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
    registered_at = -1
    for index, event in enumerate(kubelet.events):
        if event.resource != name:
            continue
        if event.kind is EventKind.REGISTERED:
            registered_at = index
        elif event.kind is EventKind.DEVICES and registered_at >= 0:
            return True
    return False


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
            hint = " (give them with --node-labels)" if skipped[name] == LABELS_UNKNOWN else ""
            lines.append(f"  {name}: not served on this node: {skipped[name]}{hint}")
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


def _describe_response(response: pb.AllocateResponse) -> list[str]:
    lines = [line for c in response.container_responses for line in _received(c).lines()]
    return lines or ["    (nothing)"]


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
        print("  the container receives:", file=out)
        for line in _describe_response(response):
            print(line, file=out)
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
            print("node status:", file=out)
            for line in _table(kubelet.resources, names):
                print(line, file=out)
            last = now
        out.flush()


async def _until_signal() -> None:
    signals = StopSignals()
    try:
        await signals.wait()
    finally:
        signals.remove()


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
            plugin_dir,
            pod_resources_socket=run_settings.pod_resources_socket,
            node_name=run_settings.node_name,
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
                registered = True
                try:
                    await kubelet.wait_until(
                        lambda k: all(_listed(k, n) for n in names), timeout=timeout
                    )
                except TimeoutError:
                    registered = False
                print("\nregistrations:", file=stream)
                statuses = supervisor.status()
                for line in _registrations(kubelet, statuses, config, run_settings, skipped):
                    print(line, file=stream)
                print("\nnode status:", file=stream)
                for line in _table(kubelet.resources, names):
                    print(line, file=stream)
                print("\nnode labels (published with GENERICDP_NODE_FEATURES):", file=stream)
                print(*source_lines(supervisor, run_settings.node_name), sep="\n", file=stream)
                # By default, show what one unit of every resource gives a container.
                wanted = requests or tuple(
                    AllocationRequest(n, 1)
                    for n in names
                    if n in kubelet.resources and kubelet.resources[n].allocatable > 0
                )
                ok = await _allocate(kubelet, wanted, stream) and registered
                stream.flush()
                if once:
                    return EXIT_OK if ok else EXIT_FAILED
                print("\nwatching (Ctrl-C to stop):", file=stream)
                stream.flush()
                watcher = asyncio.create_task(_watch(kubelet, names, stream), name="watch")
                try:
                    await _until_signal()
                finally:
                    watcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watcher
                return EXIT_OK if ok else EXIT_FAILED
            finally:
                await supervisor.stop()


# The UID of the claim ``simulate --backend dra`` prepares (it names its CDI devices).
SIMULATED_CLAIM_UID = "00000000-0000-0000-0000-000000000001"
SIMULATED_CLAIM_NAME, SIMULATED_REQUEST = "simulated", "req"  # its name, in "default"


def simulate_dra(
    path: Path,
    settings: Settings,
    *,
    driver: str,
    requests: Sequence[AllocationRequest] = (),
    out: TextIO | None = None,
) -> int:
    """``simulate --backend dra``: the ResourceSlices this node would publish for ``path``,
    and what a claim for N units of a resource would get at prepare: the CDI
    spec prepare writes and the IDs it answers, made as prepare makes them
    (``allocation.plan``, ``dra/cdispec.py``). No cluster, no kubelet.

    Every unit counts as healthy (no probe runs); the devices a claim gets are
    the first N by name, as the scheduler may pick any.
    """
    from genericdp.discovery import discover
    from genericdp.discovery.model import Roots
    from genericdp.dra.publisher import first_pool

    stream = out or sys.stdout
    config = _config(path, settings)
    if config is None:
        return EXIT_ENVIRONMENT
    roots = Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)
    node = settings.node_name or "simulated-node"
    units = {r.name: discover(r, roots) for r in config.resources}
    served = [(r, units[r.name]) for r in config.resources]
    published = first_pool(served, node=node, driver=driver)
    print(
        f"genericdp simulate --backend dra: {path} ({len(config.resources)} resource(s)); "
        f"driver {driver}, node {node}",
        file=stream,
    )
    print(f"\nResourceSlices ({len(published)}):", file=stream)
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    for obj in published.values():
        print("---", file=stream)
        yaml.dump(obj, stream)
    ok = True
    definitions = {r.name: r for r in config.resources}
    wanted = requests or tuple(AllocationRequest(n, 1) for n in units if units[n])
    for request in wanted:
        print(f"\nclaim for {request.count} of {request.resource}:", file=stream)
        definition = definitions.get(request.resource)
        if definition is None:
            known = ", ".join(sorted(definitions)) or "none"
            print(f"  refused: unknown resource (served: {known})", file=stream)
            ok = False
            continue
        lines, claimed = _prepared_claim(
            definition,
            units[request.resource],
            request.count,
            node,
            driver,
            settings.dra_plugins_dir / driver,
        )
        for line in lines:
            print(line, file=stream)
        ok = ok and claimed
    return EXIT_OK if ok else EXIT_FAILED


def _prepared_claim(  # noqa: PLR0917 -- one call site, each argument a different kind
    definition: ResourceDefinition,
    units: Sequence[Unit],
    count: int,
    node: str,
    driver: str,
    plugin_dir: Path,
) -> tuple[list[str], bool]:
    """What prepare would do with a claim for the first ``count`` of ``units`` by
    device name: the lines saying so, and whether it would succeed."""
    from genericdp.allocation.plan import plan_allocation
    from genericdp.dra import metadata
    from genericdp.dra.cdispec import claim_spec, undelivered
    from genericdp.dra.checkpoint import PREPARED, PreparedClaim, PreparedDevice
    from genericdp.dra.claims import ClaimRef
    from genericdp.dra.naming import device_name

    resource = definition.name
    by_name = sorted(units, key=lambda u: device_name(resource, u.id))
    if len(by_name) < count:
        return [f"  unsatisfiable: {len(by_name)} device(s) published"], False
    chosen = by_name[:count]
    names = [device_name(resource, u.id) for u in chosen]
    lines = ["  allocated devices: " + ", ".join(f"{node}/{n}" for n in names)]
    try:
        plan = plan_allocation(definition, chosen, names, node_name=node)
    except GenericdpError as exc:
        return [*lines, f"  prepare fails: {exc}"], False
    uid, request = SIMULATED_CLAIM_UID, SIMULATED_REQUEST
    prepared = PreparedClaim(
        ClaimRef("default", SIMULATED_CLAIM_NAME, uid),
        PREPARED,
        tuple(
            PreparedDevice(
                request,
                node,
                name,
                definition.name,
                unit.id,
                (),
                (),
                metadata.attributes(definition, unit, driver, [n.container_path for n in nodes]),
            )
            for unit, name, nodes in zip(chosen, names, plan.nodes, strict=True)
        ),
    )
    ids = [claim_device_id(driver, uid, n) for n in names]
    lines.append(
        "  prepare answers the CDI devices "
        + ", ".join([*ids, metadata.cdi_id(driver, uid, request)])
    )
    if warning := undelivered(plan):
        lines.append(f"  warning: {warning}")
    lines.append(f"  and writes this CDI spec (claim UID {uid}):")
    mounts = metadata.cdi_devices(plugin_dir, driver, prepared)
    spec = json.dumps(claim_spec(driver, uid, [plan], mounts), indent=2)
    lines.extend(f"    {line}" for line in spec.splitlines())
    where = metadata.container_path(driver, SIMULATED_CLAIM_NAME, "", request)
    lines.append(f"  and this device metadata, which the container reads at {where}:")
    shown = metadata.stream(driver, prepared, request, prepared.devices).decode()
    lines.extend(f"    {line}" for line in shown.splitlines())
    return lines, True
