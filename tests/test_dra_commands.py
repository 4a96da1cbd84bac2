"""`genericdp deviceclasses` and `genericdp simulate --backend dra`, and what the real
API server makes of their output (server-side dry run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.config.names import device_class_name as class_name
from genericdp.deviceclasses import selector
from genericdp.discovery import discover
from genericdp.discovery.model import Roots
from genericdp.exits import EXIT_FAILED
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.slices import DeviceOptions, discovered_attributes, pool_slices
from genericdp.kubeletplugin.slices import devices as slice_devices
from tests.apiserver import ApiServer
from tests.fakesys import FakeHost

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "configs" / "examples").glob("*.yaml"))
CONFIG = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - udev: {subsystem: tty, kernel: "ttyUSB*"}
    allocate:
      env:
        PORT: "{{ devices[0].path }}"
    dra:
      attributes:
        model: FT232R
        vendor: overridden
        ports: 1
        rugged: true
        firmware: {version: 1.2.3}
  - name: example.com/gpu
    match:
      - glob: /dev/dri/renderD*
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genericdp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",), numa_node=0)
    host.add_usb_serial(port="1-3", serial="BBB222", ttys=("ttyUSB1",))
    host.add_drm_card()
    return host


def _json_documents(text: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON object per created object, one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
        while at < len(text) and text[at].isspace():
            at += 1
    return found


def test_deviceclasses_prints_one_class_per_resource(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    done = run("deviceclasses", str(cfg), "--driver", "dp.example.org")
    assert done.returncode == 0, done.stderr
    classes = list(YAML(typ="safe", pure=True).load_all(done.stdout))
    assert [c["metadata"]["name"] for c in classes] == ["serial.example.com", "gpu.example.com"]
    assert classes[0]["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.driver == "dp.example.org" && '
                    'device.attributes["dp.example.org"].resource == "example.com/serial"'
                }
            }
        ],
        "extendedResourceName": "example.com/serial",
    }


def test_class_names_are_dns_subdomains_even_for_odd_resource_names() -> None:
    assert class_name("example.com/serial") == "serial.example.com"
    odd = class_name("Example.com/Serial_Port")
    assert odd.startswith("serial-port.example.com-")
    assert odd != class_name("example.com/serial-port")


def test_every_examples_classes_pass_the_real_api_server(apiserver: ApiServer) -> None:
    """Every example's classes pass a server-side dry run; the server keeps extendedResourceName."""
    for example in EXAMPLES:
        done = run("deviceclasses", str(example))
        assert done.returncode == 0, f"{example.name}: {done.stderr}"
        answer = apiserver.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input_text=done.stdout
        )
        items = _json_documents(answer)
        assert items, example.name
        for item in items:
            assert item["spec"]["extendedResourceName"], f"{example.name}: dropped by the server"


def test_a_selector_compiles_in_the_real_api_server(apiserver: ApiServer) -> None:
    """A CEL typo would be refused at create: a class with a broken selector is, ours is not."""
    good = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "probe.example.com"},
        "spec": {"selectors": [{"cel": {"expression": selector("genericdp.io", "a.b/c")}}]},
    }
    apiserver.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(good))
    bad = json.loads(json.dumps(good))
    bad["spec"]["selectors"][0]["cel"]["expression"] = "device.driver =="
    done = subprocess.run(
        [str(apiserver.bin_dir / "kubectl"), f"--kubeconfig={apiserver.kubeconfig}", "create",
         "--dry-run=server", "-f", "-"],
        input=json.dumps(bad), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "compil" in done.stderr.lower() or "syntax" in done.stderr.lower(), done.stderr


def test_discovered_attributes_of_a_usb_serial_adapter(tmp_path: Path) -> None:
    host = _host(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    from genericdp.config import load

    config = load([cfg])
    roots = Roots(dev=host.dev, sys=host.sys, udev=host.udev)
    units = discover(config.resources[0], roots)
    found = {u.id: discovered_attributes(u) for u in units}
    first = next(a for a in found.values() if a.get("serial") == {"string": "AAA111"})
    assert first["vendor"] == {"string": "0403"}
    assert first["product"] == {"string": "6001"}
    assert first["subsystem"] == {"string": "tty"}
    assert first["pciAddress"] == {"string": "0000:00:14.0"}
    assert first["numaNode"] == {"int": 0}
    gpu = discover(config.resources[1], roots)
    assert discovered_attributes(gpu[0])["pciAddress"]["string"].count(":") == 2


def test_simulated_slices_pass_the_real_api_server(tmp_path: Path, apiserver: ApiServer) -> None:
    """What simulate shows is what the publisher writes, and the server accepts it as is."""
    host = _host(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    from genericdp.config import load

    config = load([cfg])
    roots = Roots(dev=host.dev, sys=host.sys, udev=host.udev)
    by_resource = {
        r.name: slice_devices(
            r.name,
            discover(r, roots),
            {"x"},
            driver="genericdp.io",
            options=DeviceOptions(attributes=r.dra.attributes),
        )
        for r in config.resources
    }
    objs: dict[str, Any] = pool_slices(
        by_resource, node="sim-node", driver="genericdp.io", generation=1
    )
    for obj in objs.values():
        apiserver.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(obj))
    serial = next(o for o in objs.values() if "serial" in o["metadata"]["generateName"])
    kept = json.loads(
        apiserver.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input_text=json.dumps(serial)
        )
    )
    attributes = kept["spec"]["devices"][0]["attributes"]
    assert attributes["model"] == {"string": "FT232R"}
    assert attributes["vendor"] == {"string": "overridden"}  # the definition's own win
    assert attributes["ports"] == {"int": 1}
    assert attributes["rugged"] == {"bool": True}
    assert attributes["firmware"] == {"version": "1.2.3"}


def test_simulate_backend_dra_shows_slices_and_a_claims_prepare(tmp_path: Path) -> None:
    host = _host(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    done = run(
        "simulate", str(cfg), "--backend", "dra", "--node-name", "n1",
        "--allocate", "example.com/serial=2", *host.root_flags(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ResourceSlices (2):" in out
    slices = [
        doc
        for doc in YAML(typ="safe", pure=True).load_all(
            out.split("ResourceSlices (2):\n", 1)[1].split("\nclaim for", 1)[0]
        )
        if doc
    ]
    assert {s["spec"]["pool"]["name"] for s in slices} == {"n1"}
    assert "claim for 2 of example.com/serial:" in out
    assert "allocated devices: n1/serial-" in out
    assert "PORT=/dev/ttyUSB" in out
    assert device_name("example.com/serial", "x") not in out


def test_simulate_backend_dra_refuses_what_cannot_be_had(tmp_path: Path) -> None:
    host = _host(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    done = run(
        "simulate", str(cfg), "--backend", "dra", "--allocate", "example.com/serial=3",
        "--allocate", "example.com/nope=1", *host.root_flags(),
    )  # fmt: skip
    assert done.returncode == EXIT_FAILED
    assert "unsatisfiable: 2 device(s) published" in done.stdout
    assert "refused: unknown resource" in done.stdout


SELECTED = """\
version: v1
resources:
  - name: example.com/shared
    match: [glob: /dev/kvm*]
    count: 4
  - name: example.com/zigbee
    match: [glob: /dev/ttyUSB*]
    nodeSelector:
      matchLabels: {example.com/zigbee: "true"}
"""


@pytest.mark.parametrize(
    ("labels", "zigbee"), [([], "not served"), (["--node-labels", "example.com/zigbee=true"], "")]
)
def test_simulate_backend_dra_runs_the_driver_serve_runs(
    tmp_path: Path, labels: list[str], zigbee: str
) -> None:
    """The driver's own publisher and prepare, through the embedded DRA kubelet: a
    ``count: 4`` device is published shared and a claim for it is prepared, its
    device node in the CDI spec; a resource whose ``nodeSelector`` the node's
    labels fail is not served, as under ``serve``."""
    host = _host(tmp_path)
    host.add_plain("/dev/kvm0")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SELECTED)
    done = run(
        "simulate", str(cfg), "--backend", "dra", "--allocate", "example.com/shared=1",
        *labels, *host.root_flags(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    head, claimed = out.split("\nclaim for 1 of example.com/shared:\n", 1)
    printed = head.split("\nResourceSlices (", 1)[1].split(":\n", 1)[1]
    found = [s for s in YAML(typ="safe", pure=True).load_all(printed) if s]
    by_resource = {
        d["attributes"]["resource"]["string"]: d for s in found for d in s["spec"]["devices"]
    }
    shared = by_resource["example.com/shared"]
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"]["shares"]["value"] == "4"
    assert f"  allocated devices: simulated-node/{shared['name']}\n" in claimed
    assert '"path": "/dev/kvm0"' in claimed
    if zigbee:
        assert "example.com/zigbee: not served on this node" in head
        assert "example.com/zigbee" not in by_resource
    else:
        assert "not served" not in head
        assert "example.com/zigbee" in by_resource


def test_simulate_backend_dra_allocates_no_tainted_device(tmp_path: Path) -> None:
    """A unit whose health probe fails is published tainted, as serve publishes it, and
    no simulated claim gets it."""
    host = _host(tmp_path)
    host.add_plain("/dev/kvm0")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/broken\n    match: [glob: /dev/kvm*]\n"
        "    health: {exec: [/bin/false]}\n"
    )
    done = run("simulate", str(cfg), "--backend", "dra", "--allocate", "example.com/broken=1",
               *host.root_flags())  # fmt: skip
    assert done.returncode == EXIT_FAILED, done.stderr
    assert "effect: NoSchedule" in done.stdout
    assert "unsatisfiable: 1 device(s) published, 1 of them tainted (unhealthy)" in done.stdout
    assert "first probe failed" in done.stderr


def test_simulate_backend_dra_runs_the_init_hook_at_prepare(tmp_path: Path) -> None:
    """Prepare runs the resource's init hook, as under serve; its failure is the claim's."""
    host = _host(tmp_path)
    host.add_plain("/dev/kvm0")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/hooked\n    match: [glob: /dev/kvm*]\n"
        '    hooks: {init: {exec: [/bin/sh, -c, "echo no such firmware >&2; exit 3"]}}\n'
    )
    done = run("simulate", str(cfg), "--backend", "dra", *host.root_flags())
    assert done.returncode == EXIT_FAILED, done.stderr
    assert "  refused: NodePrepareResources failed for claim default/simulated: " in done.stdout
    assert "exited 3: no such firmware" in done.stdout


@pytest.mark.parametrize(
    ("attributes", "complaint"),
    [
        ("{resource: x}", "resource"),
        ("{pci-address: x}", "pci-address"),
        ("{firmware: {version: '1.2'}}", "firmware"),
        ("{name: " + "x" * 65 + "}", "name"),
    ],
)
def test_bad_dra_attributes_are_config_errors(
    tmp_path: Path, attributes: str, complaint: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/a\n    match: [{glob: /dev/null}]\n"
        f"    dra:\n      attributes: {attributes}\n"
    )
    done = run("validate", str(cfg))
    assert done.returncode != 0
    assert "c.yaml:6" in done.stderr, done.stderr
    assert complaint in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["validate", "deviceclasses"])
def test_two_resources_deriving_one_deviceclass_name_are_refused(
    tmp_path: Path, command: str
) -> None:
    """``a.com/x.y`` and ``y.a.com/x`` both derive DeviceClass ``x.y.a.com``: refused
    with both names and where the other is, never one class silently replaced."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n"
        "  - name: a.com/x.y\n    match: [glob: /dev/null]\n"
        "  - name: y.a.com/x\n    match: [glob: /dev/null]\n"
    )
    result = run(command, str(cfg))
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    assert "'a.com/x.y' and 'y.a.com/x' both name DeviceClass 'x.y.a.com'" in result.stderr
    assert f"{cfg}:5" in result.stderr, result.stderr


def _run_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genericdp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), **env},
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "flags"),
    [({}, ["--dra-driver-name", "b.example"]), ({"GENERICDP_DRA_DRIVER_NAME": "b.example"}, [])],
)
def test_simulate_dra_publishes_the_driver_name_of_the_setting(
    tmp_path: Path, env: dict[str, str], flags: list[str]
) -> None:
    """The documented setting (flag or variable) names the driver of the simulated slices."""
    host = _host(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    done = _run_with(env, "simulate", str(cfg), "--backend", "dra", *flags, *host.root_flags())
    assert done.returncode == 0, done.stderr
    assert "driver: b.example" in done.stdout
    # genericdp.io/slice, the label that finds a slice again, is not the driver's name.
    assert "genericdp.io" not in done.stdout.replace("genericdp.io/slice:", "")


@pytest.mark.parametrize(
    ("env", "flags"),
    [
        ({}, ["--dra-driver-name", "b.example"]),
        ({}, ["--driver", "b.example"]),
        ({"GENERICDP_DRA_DRIVER_NAME": "b.example"}, []),
    ],
)
def test_deviceclasses_select_the_driver_name_of_the_setting(
    tmp_path: Path, env: dict[str, str], flags: list[str]
) -> None:
    """A renamed driver gets classes that match its slices, by flag or variable."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    done = _run_with(env, "deviceclasses", str(cfg), *flags)
    assert done.returncode == 0, done.stderr
    assert 'device.driver == "b.example"' in done.stdout
    assert "genericdp.io/driver: b.example" in done.stdout  # the label the reconciler owns
    assert "genericdp.io" not in done.stdout.replace("genericdp.io/driver:", "")


def test_deviceclasses_read_several_paths_as_one_config(tmp_path: Path) -> None:
    """Like validate: each path's resources get their class; a bad driver name is exit 2."""
    (tmp_path / "a.yaml").write_text(CONFIG)
    (tmp_path / "b.yaml").write_text(
        "version: v1\nresources:\n  - name: example.com/kvm\n    match:\n      - glob: /dev/kvm\n"
    )
    done = run("deviceclasses", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"))
    assert done.returncode == 0, done.stderr
    names = [c["metadata"]["name"] for c in YAML(typ="safe", pure=True).load_all(done.stdout)]
    assert names == ["serial.example.com", "gpu.example.com", "kvm.example.com"]
    bad = run("deviceclasses", str(tmp_path / "a.yaml"), "--driver", "Not_A_Name")
    assert bad.returncode == 2
    assert "--dra-driver-name" in bad.stderr
