"""Device strings are attacker-controlled: whoever made a USB stick wrote its descriptors.

Each case plugs a hostile device into a FakeHost and serves it through the
real supervisor and the embedded kubelet, then asserts the exact refusal and
that the daemon keeps serving everything else.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from genericdp.allocation.confine import confine_path
from genericdp.allocation.plan import plan_allocation
from genericdp.config.model import GlobMatcher, UdevMatcher
from genericdp.discovery import find_nodes
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import UnsafeAllocationError
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded.admission import AllocationError
from genericdp.metrics import Metrics
from tests.fakesys import FakeHost
from tests.runtime_harness import Running, allocate_request, config, plugin_stub, running

SERIAL = "example.com/serial"


@asynccontextmanager
async def serving(base: Path, text: str) -> AsyncIterator[tuple[Running, Metrics]]:
    """The supervisor with real discovery of ``base/host`` and metrics, against a kubelet."""
    metrics = Metrics(process=False)
    async with running(base, config(text), metrics=metrics) as rt:
        yield rt, metrics


def refused(metrics: Metrics, resource: str = SERIAL) -> float:
    sample = metrics.registry.get_sample_value(
        "genericdp_allocations_total", {"resource": resource, "result": "refused"}
    )
    return sample or 0.0


def dongles(base: Path, product: str) -> FakeHost:
    """A benign dongle (serial GOOD) and one whose USB product string is ``product``."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-1", serial="GOOD", ttys=("ttyUSB0",))
    host.add_usb_serial("1-2", serial="EVIL", ttys=("ttyUSB1",), model=product)
    return host


MOUNTED = """resources:
- name: example.com/serial
  match: [glob: /dev/ttyUSB*]
  groupBy: parent:usb
  allocate:
    mounts:
    - {hostPath: "/run/gdp/{{ units[0].attributes.product }}", containerPath: /data}
"""


@pytest.mark.parametrize(
    "product",
    ["../../../../etc", "x/../../../etc", "..", "a\nb", "a\x1bb"],
)
async def test_usb_string_cannot_escape_a_templated_host_path(base: Path, product: str) -> None:
    """A product string that would climb out of a templated hostPath is refused per allocation."""
    dongles(base, product)
    async with serving(base, MOUNTED) as (rt, metrics):
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 2)
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Allocate(allocate_request("usb-EVIL"))
            good = await stub.Allocate(allocate_request("usb-GOOD"))
        error = caught.value
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = error.details() or ""
        assert details.startswith(f"{SERIAL}: resource {SERIAL}: unit usb-EVIL:")
        assert "allocate.mounts[0].hostPath rendered" in details
        assert refused(metrics) == 1
        (mount,) = good.container_responses[0].mounts
        assert mount.host_path == "/run/gdp/FT232R USB UART"
        assert rt.kubelet.resources[SERIAL].connected


async def test_refused_allocation_fails_the_pod_through_the_kubelet(base: Path) -> None:
    """The kubelet sees the refusal as an admission error naming the path problem."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="EVIL", ttys=("ttyUSB1",), model="../../../../etc")
    async with serving(base, MOUNTED) as (rt, _metrics):
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        with pytest.raises(AllocationError, match=r"contains a '\.\.' component"):
            await rt.kubelet.allocate(SERIAL, 1, pod="p")


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        ("/run/gdp/{{ x }}", "/run/gdp/../../etc"),
        ("/run/gdp/{{ x }}", "/run/gdp/a/../../../etc"),
        ("/dev/tty{{ x }}", "/dev/tty/../../etc"),
        ("/run/gdp/{{ x }}", "/etc"),  # a filter could drop the prefix: checked, not assumed
        ("/dev/tty{{ x }}", "/dev/sda"),
        ("/run/gdp/{{ x }}", "/run/gdpx/y"),
        ("{{ x }}", "relative/path"),
        ("{{ x }}", "/a\x00b"),
        ("{{ x }}", "/" + "a" * 5000),
    ],
)
def test_confine_path_refuses(template: str, rendered: str) -> None:
    """Paths with '..', outside the template's literal prefix, relative, NUL or too long fail."""
    with pytest.raises(UnsafeAllocationError):
        confine_path(rendered, template, what="t")


@pytest.mark.parametrize(
    ("template", "rendered", "expected"),
    [
        ("/run/gdp/{{ x }}", "/run/gdp//a/./b", "/run/gdp/a/b"),
        ("/run/gdp/{{ x }}", "/run/gdp/", "/run/gdp"),
        ("/dev/tty{{ x }}", "/dev/ttyUSB0", "/dev/ttyUSB0"),
        ("/run/gdp/ {%- if 1 %}a{% endif %}", "/run/gdp/a", "/run/gdp/a"),
        ("{{ x }}", "/anywhere/the/author/allows", "/anywhere/the/author/allows"),
    ],
)
def test_confine_path_normalises(template: str, rendered: str, expected: str) -> None:
    """Confined paths come back normalised (no '//' or '.' components)."""
    assert confine_path(rendered, template, what="t") == expected


# -- only character and block devices are devices ------------------------------------


def test_regular_files_sockets_and_fifos_under_dev_are_not_matched(host: FakeHost) -> None:
    """/dev/** finds device nodes only: not /dev/shm files, stray files, FIFOs or sockets."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_file("/dev/shm/sem.evil", "x")
    host.add_file("/dev/ttyUSB9")  # a regular file where no device stands behind
    host.add_file("/dev/mqueue/q")
    os.mkfifo(host.dev / "initctl")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(host.dev / "log"))
        found = find_nodes([GlobMatcher("/dev/**")], host.roots)
    assert {n.host_path for n, _ in found} == {"/dev/ttyUSB0", "/dev/bus/usb/001/002"}


def test_udev_match_whose_node_is_not_a_device_is_skipped(host: FakeHost) -> None:
    """A device sysfs knows whose /dev entry is a FIFO, a directory or a link is not a node."""
    host.add_misc("fuse")
    host.add_misc("kvm")
    host.add_misc("net/tun")
    (host.dev / "fuse").unlink()
    os.mkfifo(host.dev / "fuse")
    (host.dev / "kvm").unlink()
    (host.dev / "kvm").mkdir()
    (host.dev / "net" / "tun").unlink()
    host.add_file("/dev/shm/tun")
    (host.dev / "net" / "tun").symlink_to("../shm/tun")
    assert find_nodes([UdevMatcher(subsystem="misc")], host.roots) == []


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


# -- peer strings are cut before they reach a status or a log line -------------------


PLAIN = """resources:
- name: example.com/serial
  match: [glob: /dev/ttyUSB*]
  hooks:
    preStart: {exec: ["true"], timeout: 5s}
"""


async def test_huge_unknown_device_id_is_not_echoed(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1 MB unknown device ID gives a short status and short log lines, Allocate and PreStart."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    huge = "x" * 1_000_000
    caplog.set_level(logging.DEBUG)
    async with serving(base, PLAIN) as (rt, _metrics):
        await rt.registered([SERIAL])
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            for method, request in (
                (stub.Allocate, allocate_request(huge, "usb-A1")),
                (stub.PreStartContainer, pb.PreStartContainerRequest(devices_ids=[huge])),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await method(request)
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                details = caught.value.details() or ""
                assert "unknown device IDs: 'xxxx" in details
                assert len(details) <= 1100
    longest = max(len(r.getMessage()) for r in caplog.records)
    assert longest <= 2000


# -- values a runtime cannot pass on ---------------------------------------------------


async def test_nul_in_a_udev_property_is_refused_in_env(base: Path) -> None:
    """A NUL byte from the udev database never reaches a container's environment."""
    host = FakeHost(base / "host")
    (node,) = host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    database = next((host.udev_data).glob("c188:*"))
    database.write_text(database.read_text() + "E:EVIL=a\x00b\n")
    text = (
        "resources:\n- name: example.com/serial\n  match: [glob: /dev/ttyUSB*]\n"
        "  allocate:\n    env: {EVIL: '{{ units[0].properties.EVIL }}'}\n"
    )
    async with serving(base, text) as (rt, metrics):
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Allocate(allocate_request("usb-A1"))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "allocate.env.EVIL rendered a value containing NUL" in (caught.value.details() or "")
        assert refused(metrics) == 1
    assert node == "/dev/ttyUSB0"


@pytest.mark.parametrize(
    ("host_path", "container_path"),
    [
        ("/dev/../etc/shadow", "/dev/x"),
        ("/dev/x", "/etc/x"),
        ("/dev/x", "/dev//x"),
        ("/dev/x\n", "/dev/x"),
        ("/etc/passwd", "/dev/x"),
    ],
)
def test_device_paths_outside_dev_are_refused(host_path: str, container_path: str) -> None:
    """A device spec is handed out only for clean paths under /dev, host and container side."""
    definition = config(
        "resources:\n- name: example.com/serial\n  match: [glob: /dev/ttyUSB*]\n"
    ).resources[0]
    unit = Unit(id="u", nodes=(DeviceNode(host_path=host_path, container_path=container_path),))
    with pytest.raises(UnsafeAllocationError, match=r"example\.com/serial: unit u: device"):
        plan_allocation(definition, [unit])
