"""``genericdp reconcile-classes`` as real processes against the real kube-apiserver: the
DeviceClasses follow the config, a class leaves only with the last slice publishing its
resource, classes without our labels are never touched, and of two replicas only the
Lease holder writes until it is killed."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from genericdp.config.names import device_class_name as class_name
from genericdp.deviceclasses import device_class
from tests.apiserver import ApiServer, free_port
from tests.polling import eventually

_runs = itertools.count()
TIMEOUT = 30.0  # seconds; a loaded machine is slow to start Python processes


class Reconciler:
    """One ``genericdp reconcile-classes`` process, its output gathered as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port
        self.output = ""
        self._reader = asyncio.create_task(self._read(), name="reconciler-output")

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.output += line.decode(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` of its endpoints: (status, body); (0, why) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def metric(self, line_start: str) -> float:
        _, body = self.get("/metrics")
        for line in body.splitlines():
            if line.startswith(line_start + " "):
                return float(line.rsplit(" ", 1)[1])
        return -1.0

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Signal it and wait; its output is printed (pytest shows it when the test fails)."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 15)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            await self._reader
            print(self.output)
        return code


class Cluster:
    """The API server, seen through kubectl, for one test's driver."""

    def __init__(self, apiserver: ApiServer, driver: str) -> None:
        self.api, self.driver = apiserver, driver

    def classes(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.api.kubectl("get", "deviceclasses", "-o", "json"))["items"]
        return {c["metadata"]["name"]: c for c in items}

    def apply(self, obj: dict[str, Any]) -> None:
        self.api.kubectl("apply", "-f", "-", input_text=json.dumps(obj))

    def slice_of(self, node: str, resources: list[str]) -> None:
        devices = [
            {"name": f"d{i}", "attributes": {"resource": {"string": r}}}
            for i, r in enumerate(resources)
        ]
        self.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{self.driver}"},
                "spec": {
                    "driver": self.driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )

    def lease_holder(self) -> str:
        name = f"genericdp-deviceclasses-{self.driver}"
        lease = json.loads(self.api.kubectl("get", "lease", "-n", "default", name, "-o", "json"))
        return str(lease["spec"].get("holderIdentity") or "")


def config_text(*resources: str) -> str:
    body = "".join(f"  - name: {r}\n    match: [glob: /dev/null]\n" for r in resources)
    return f"version: v1\nresources:\n{body}" if resources else "version: v1\nresources: []\n"


def write_config(directory: Path, text: str) -> None:
    """Replace the config as an editor saves it (a new file renamed over the old one)."""
    new = directory / ".config.yaml.new"
    new.write_text(text)
    new.rename(directory / "config.yaml")


@pytest.fixture
def run() -> tuple[str, str]:
    """(driver, domain) unique to one test: its classes, slices and Lease are its own."""
    n = next(_runs)
    return f"r{n}-{os.getpid()}.classes.test", f"c{n}-{os.getpid()}.test"


async def start(apiserver: ApiServer, config: Path, driver: str, name: str) -> Reconciler:
    port = free_port()
    argv = [
        "reconcile-classes", "--config", str(config), "--dra-driver-name", driver,
        "--kubeconfig", str(apiserver.kubeconfig), "--lease-namespace", "default",
        "--lease-duration", "3", "--identity", name, "--resync-interval", "600",
        "--metrics-address", f"127.0.0.1:{port}", "--reload-settle", "0.05",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "genericdp", *argv, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    return Reconciler(proc, port)


async def test_the_classes_follow_the_config_and_a_class_leaves_with_its_last_slice(
    apiserver: ApiServer, tmp_path: Path, run: tuple[str, str]
) -> None:
    """A resource added gets its class, one hand-deleted or hand-edited is restored, an
    invalid edit changes nothing, and a resource removed keeps its class until the last
    slice publishing it is gone."""
    driver, domain = run
    serial, audio = f"{domain}/serial", f"{domain}/audio"
    cluster = Cluster(apiserver, driver)
    (tmp_path / "config").mkdir()
    write_config(tmp_path / "config", config_text(serial))
    rec = await start(apiserver, tmp_path / "config", driver, "only")
    try:
        await eventually(
            lambda: class_name(serial) in cluster.classes(), "the class", timeout=TIMEOUT
        )
        made = cluster.classes()[class_name(serial)]
        want = device_class(serial, driver)
        assert made["spec"] == want["spec"]
        assert want["metadata"]["labels"].items() <= made["metadata"]["labels"].items()

        write_config(tmp_path / "config", config_text(serial, audio))
        await eventually(lambda: class_name(audio) in cluster.classes(), "the new resource's class")

        apiserver.kubectl("delete", "deviceclass", class_name(serial))
        await eventually(
            lambda: class_name(serial) in cluster.classes(), "the class deleted by hand"
        )
        edited = {**want, "spec": {**want["spec"], "extendedResourceName": f"{domain}/other"}}
        cluster.apply(edited)
        await eventually(
            lambda: cluster.classes()[class_name(serial)]["spec"] == want["spec"],
            "the class edited by hand restored",
        )

        write_config(tmp_path / "config", "version: v1\nresources: [{name: 1}]\n")
        await eventually(
            lambda: rec.metric('genericdp_config_reloads_total{result="refused"}') == 1,
            "the invalid edit refused",
        )
        assert {class_name(serial), class_name(audio)} <= cluster.classes().keys()

        cluster.slice_of("node-a", [audio])
        cluster.slice_of("node-b", [serial, audio])
        write_config(tmp_path / "config", config_text(serial))
        kept = f"{class_name(audio)}: out of the config, kept while a node publishes it"
        await eventually(lambda: kept in rec.get("/readyz")[1], "the class kept")
        assert class_name(audio) in cluster.classes()
        # Read before the change: the sync it starts may be done before kubectl returns.
        writes = rec.metric('genericdp_deviceclass_syncs_total{result="ok"}')
        cluster.slice_of("node-b", [serial])  # node-b no longer publishes audio
        await eventually(
            lambda: rec.metric('genericdp_deviceclass_syncs_total{result="ok"}') > writes,
            "a sync after the slice changed",
        )
        assert class_name(audio) in cluster.classes()  # node-a still publishes it
        apiserver.kubectl("delete", "resourceslice", f"node-a-{driver}")
        await eventually(
            lambda: class_name(audio) not in cluster.classes(), "the class of the last slice"
        )
        assert class_name(serial) in cluster.classes()
        assert rec.metric('genericdp_deviceclass_writes_total{action="delete",result="ok"}') == 1
    finally:
        assert await rec.stop() == 0, rec.output
        apiserver.kubectl("delete", "resourceslice", f"node-b-{driver}", "--ignore-not-found")


async def test_classes_without_our_labels_are_never_touched(
    apiserver: ApiServer, tmp_path: Path, run: tuple[str, str]
) -> None:
    """A class of the name we want but without our labels, and one of any other name with
    only some of them, keep their content while the reconciler runs; ours is made once
    the colliding one is gone."""
    driver, domain = run
    serial = f"{domain}/serial"
    cluster = Cluster(apiserver, driver)
    colliding = device_class(serial, driver)
    colliding["metadata"]["labels"] = {"team": "theirs"}
    colliding["spec"]["extendedResourceName"] = f"{domain}/theirs"
    other = device_class(f"{domain}/gone", driver)
    del other["metadata"]["labels"]["genericdp.io/driver"]  # managed-by alone is not ours
    cluster.apply(colliding)
    cluster.apply(other)
    before = cluster.classes()
    (tmp_path / "config").mkdir()
    write_config(tmp_path / "config", config_text(serial))
    rec = await start(apiserver, tmp_path / "config", driver, "only")
    try:
        said = f"{class_name(serial)}: held by a DeviceClass without our labels"
        await eventually(lambda: said in rec.get("/readyz")[1], "the collision", timeout=TIMEOUT)
        after = cluster.classes()
        for name in (class_name(serial), class_name(f"{domain}/gone")):
            assert (
                after[name]["metadata"]["resourceVersion"]
                == (before[name]["metadata"]["resourceVersion"])
            )
        assert rec.metric('genericdp_deviceclasses{state="foreign"}') == 1
        apiserver.kubectl("delete", "deviceclass", class_name(serial))
        await eventually(
            lambda: (
                cluster.classes().get(class_name(serial), {}).get("spec")
                == device_class(serial, driver)["spec"]
            ),
            "our class, once theirs is gone",
        )
        assert class_name(f"{domain}/gone") in cluster.classes()
    finally:
        assert await rec.stop() == 0, rec.output
        apiserver.kubectl("delete", "deviceclass", class_name(f"{domain}/gone"))


async def test_only_the_lease_holder_writes_and_another_takes_over_when_it_is_killed(
    apiserver: ApiServer, tmp_path: Path, run: tuple[str, str]
) -> None:
    """Two replicas: one holds the Lease and makes the class, the other writes nothing;
    killed (SIGKILL, no release), the first is replaced by the second, which restores a
    class deleted afterwards; stopped with SIGTERM, the second empties the Lease."""
    driver, domain = run
    serial = f"{domain}/serial"
    cluster = Cluster(apiserver, driver)
    (tmp_path / "config").mkdir()
    write_config(tmp_path / "config", config_text(serial))
    first = await start(apiserver, tmp_path / "config", driver, "first")
    second = await start(apiserver, tmp_path / "config", driver, "second")
    replicas = {"first": first, "second": second}
    try:
        await eventually(
            lambda: class_name(serial) in cluster.classes(), "the class", timeout=TIMEOUT
        )
        await eventually(
            lambda: all(r.get("/readyz")[0] == 200 for r in replicas.values()),
            "both ready",
            timeout=TIMEOUT,
        )
        holder = cluster.lease_holder()
        leader, standby = replicas[holder], replicas["second" if holder == "first" else "first"]
        assert "ready: leader" in leader.get("/readyz")[1]
        assert "ready: standby" in standby.get("/readyz")[1]
        apiserver.kubectl("delete", "deviceclass", class_name(serial))
        await eventually(lambda: class_name(serial) in cluster.classes(), "the class restored")
        created = 'genericdp_deviceclass_writes_total{action="create",result="ok"}'
        assert leader.metric(created) == 2
        assert standby.metric(created) == 0
        assert standby.metric("genericdp_deviceclass_leader") == 0

        await leader.stop(signal.SIGKILL)
        await eventually(lambda: "ready: leader" in standby.get("/readyz")[1], "the takeover")
        assert cluster.lease_holder() != holder
        apiserver.kubectl("delete", "deviceclass", class_name(serial))
        await eventually(lambda: class_name(serial) in cluster.classes(), "restored by the second")
        assert standby.metric(created) == 1
        assert await standby.stop() == 0, standby.output
        assert cluster.lease_holder() == ""
    finally:
        for replica in replicas.values():
            await replica.stop()
