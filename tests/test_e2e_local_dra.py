"""The DRA round of the local node (e2e/local/dra.sh), without the node.

What can be checked here: its config loads next to the e2e ones and its
hooks write where the overlay mounts a host directory; the overlay points
genericdp at the local kubelet's plugin directories (at their host paths: the
kubelet dials the path genericdp announces) and at the API server; the round
expects every deployed resource; and dra-inspect.py reads slices and the
kubelet's log as the real ones were seen (NOTES in docs/contributing/testing.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from genericdp.config import load
from tests.test_packaging import (
    BASE,
    LOCAL,
    OVERLAY,
    by_kind,
    kustomize,
    local_node_setting,
    needs_kubectl,
)

DRA_OVERLAY = LOCAL / "overlay-dra"
DRA_CONFIG = DRA_OVERLAY / "dra.yaml"
INSPECT = LOCAL / "dra-inspect.py"
DRA_SH = LOCAL / "dra.sh"


def test_dra_config_validates_next_to_the_e2e_ones_with_marker_hooks() -> None:
    """e2e-dra loads with the base's and the e2e resources; both hooks leave markers."""
    config = load([BASE / "config.yaml", OVERLAY / "e2e.yaml", DRA_CONFIG])
    (dra,) = (r for r in config.resources if r.name == "example.com/e2e-dra")
    for hook, marker in ((dra.hooks.init, "init-"), (dra.hooks.cleanup, "cleanup-")):
        assert hook is not None
        script = " ".join(hook.argv)
        assert f"/var/lib/genericdp-e2e/markers/{marker}" in script
        assert "IFS=," in script, "GENERICDP_DEVICE_PATHS is comma separated"


def test_dra_round_expects_every_deployed_resource() -> None:
    """dra.sh's EXPECTED lists every resource of the three files but the machine-dependent two."""
    text = DRA_SH.read_text()
    match = re.search(r"^EXPECTED=\((.*?)\)", text, re.DOTALL | re.MULTILINE)
    assert match, "EXPECTED=(...) not found in dra.sh"
    listed = {item.partition("=")[0] for item in match.group(1).split()}
    deployed = {
        r.name for r in load([BASE / "config.yaml", OVERLAY / "e2e.yaml", DRA_CONFIG]).resources
    }
    assert listed == deployed - {"example.com/loop", "example.com/fuse"}


def test_every_dra_check_is_defined_and_listed() -> None:
    """In dra.sh."""
    text = DRA_SH.read_text()
    match = re.search(r"^ALL_DRA_CHECKS=\((.*?)\)", text, re.DOTALL | re.MULTILINE)
    assert match
    listed = match.group(1).split()
    defined = re.findall(r"^check_(dra_\w+)\(\)", text, re.MULTILINE)
    assert sorted(listed) == sorted(defined)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@needs_kubectl
def test_dra_overlay_points_genericdp_at_the_local_kubelet_and_api_server() -> None:
    """The DRA component; the kubelet's DRA directories under --root-dir at their host paths."""
    docs = kustomize(DRA_OVERLAY)
    (ds,) = by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    assert env["GENERICDP_BACKEND"] == "dra"
    root = local_node_setting("KUBELET_ROOT")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    for variable, path in (
        ("GENERICDP_DRA_REGISTRATION_DIR", f"{root}/plugins_registry"),
        ("GENERICDP_DRA_PLUGINS_DIR", f"{root}/plugins"),
    ):
        assert env[variable] == path
        assert host[mounts[path]] == path, f"{path} must be mounted at its host path"
    assert not [m for m in mounts if m.startswith("/var/lib/kubelet/plugins")]
    assert env["KUBERNETES_SERVICE_HOST"] == local_node_setting("NODE_IP")
    assert pod["automountServiceAccountToken"] is True
    assert host[mounts["/var/lib/genericdp-e2e/markers"]] == "/var/lib/genericdp-e2e/markers"
    (config_map,) = by_kind(docs, "ConfigMap")
    assert sorted(config_map["data"]) == ["config.yaml", "dra.yaml", "e2e.yaml"]
    accounts = {a["metadata"]["name"]: a for a in by_kind(docs, "ServiceAccount")}
    assert sorted(accounts) == ["genericdp", "genericdp-deviceclasses"]  # the class reconciler's
    account = accounts["genericdp"]
    bindings = [
        b for b in by_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"] != "genericdp-deviceclasses"
    ]  # fmt: skip
    assert sorted(b["roleRef"]["name"] for b in bindings) == ["genericdp-dra", "genericdp-nodes"]
    for binding in bindings:
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": account["metadata"]["name"],
                "namespace": account["metadata"]["namespace"],
            }
        ]
    assert account["metadata"]["name"] == pod["serviceAccountName"]


# -- dra-inspect.py ---------------------------------------------------------------------


def inspect(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(INSPECT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def slice_doc(name: str, devices: list[dict[str, Any]], **pool: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "genericdp.io",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 2} | pool,
            "devices": devices,
        },
    }


def device(name: str, resource: str, unit: str, **extra: Any) -> dict[str, Any]:
    attributes = {"resource": {"string": resource}, "genericdp.io/unitID": {"string": unit}}
    return {"name": name, "attributes": attributes | extra.pop("attributes", {}), **extra}


TAINT = {"key": "genericdp.io/unhealthy", "value": "true", "effect": "NoSchedule"}
SLICES = {
    "items": [
        slice_doc(
            "a",
            [
                device("serial-u1", "example.com/serial", "u1"),
                device(
                    "serial-u2",
                    "example.com/serial",
                    "u2",
                    taints=[TAINT],
                    attributes={"healthy": {"bool": False}},
                ),
            ],
        ),
        slice_doc(
            "b",
            [
                device("gpu-g1", "example.com/gpu", "g1", attributes={"healthy": {"bool": False}}),
                device("gpu-g2", "example.com/gpu", "g2", taints=[TAINT]),
                device("gpu-g3", "example.com/gpu", "g3", attributes={"healthy": {"bool": True}}),
            ],
        ),
    ]
}


def test_inspect_lists_the_devices_of_a_resource_with_their_health() -> None:
    result = inspect("devices", "example.com/serial", stdin=json.dumps(SLICES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["serial-u1 u1 healthy", "serial-u2 u2 unhealthy"]
    result = inspect("devices", "example.com/gpu", stdin=json.dumps(SLICES))
    assert result.stdout.splitlines() == [
        "gpu-g1 g1 inconsistent(taint=False,healthy-attribute-false=True)",
        "gpu-g2 g2 inconsistent(taint=True,healthy-attribute-false=False)",
        "gpu-g3 g3 healthy",
    ]
    assert inspect("devices", "example.com/none", stdin=json.dumps(SLICES)).stdout.strip() == ""


def test_inspect_prints_attributes_by_qualified_name_and_taints_with_effects() -> None:
    """`attributes` keeps the domain (resource.kubernetes.io/pcieRoot); `taints` the effect."""
    slices = json.loads(json.dumps(SLICES))
    slices["items"][0]["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pcieRoot"] = {
        "string": "pci0000:00"
    }
    result = inspect("attributes", "example.com/serial", stdin=json.dumps(slices))
    assert result.returncode == 0, result.stderr
    assert "serial-u1 resource.kubernetes.io/pcieRoot=pci0000:00" in result.stdout.splitlines()
    assert "serial-u2 genericdp.io/unitID=u2" in result.stdout.splitlines()
    result = inspect("taints", "example.com/serial", stdin=json.dumps(slices))
    assert result.stdout.splitlines() == [
        "serial-u1 -",
        "serial-u2 genericdp.io/unhealthy=true:NoSchedule",
    ]


def test_inspect_counts_the_devices_of_several_resources_in_one_go() -> None:
    """`counts RESOURCE=N...`: exit 0 when every count holds, else 1 naming each that does not."""
    slices = json.dumps(SLICES)
    ok = inspect(
        "counts", "example.com/serial=2", "example.com/gpu=3", "a.com/none=0", stdin=slices
    )
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    bad = inspect("counts", "example.com/serial=1", "example.com/gpu=3", "a.com/x=1", stdin=slices)
    assert bad.returncode == 1
    assert "2 devices of example.com/serial, not 1" in bad.stderr
    assert "0 devices of a.com/x, not 1" in bad.stderr
    assert "gpu" not in bad.stderr
    assert inspect("counts", "example.com/serial", stdin=slices).returncode == 1


def test_inspect_accepts_one_pool_and_says_what_breaks_it() -> None:
    result = inspect("pool", "node-a", "genericdp.io", stdin=json.dumps(SLICES))
    assert (result.returncode, result.stdout.split()) == (0, ["2", "5", "3"])
    broken = json.loads(json.dumps(SLICES))
    broken["items"][1]["spec"]["pool"]["generation"] = 4
    broken["items"][0]["spec"]["pool"]["resourceSliceCount"] = 1
    result = inspect("pool", "node-a", "genericdp.io", stdin=json.dumps(broken))
    assert result.returncode == 1
    assert "several generations" in result.stderr
    assert "resourceSliceCount" in result.stderr
    result = inspect("pool", "node-b", "genericdp.io", stdin=json.dumps(SLICES))
    assert "nodeName 'node-a', not 'node-b'" in result.stderr
    assert "no ResourceSlice" in inspect("pool", "n", "d", stdin='{"items": []}').stderr


# Lines as the 1.36.2 kubelet wrote them at -v=4 (trimmed), and one of another driver.
KUBELET_LOG = "\n".join(  # noqa: FLY002 -- one log line per item, as the kubelet wrote them
    [
        (
            '{"ts":1796123828737.9517,"logger":"dra-plugin","caller":"plugin/dra_plugin.go:80",'
            '"msg":"Calling NodePrepareResources rpc","driverName":"genericdp.io",'
            '"endpoint":"/p/dra.sock","v":4,'
            '"request":"claims:{namespace:\\"dra\\" uid:\\"39117078\\" '
            'name:\\"claim-pod-dev-gl4lj\\"}"}'
        ),
        (
            '{"ts":1796123828800.0,"logger":"dra-plugin","msg":"Calling NodePrepareResources rpc",'
            '"driverName":"other.io","request":"claims:{name:\\"x\\"}"}'
        ),
        (
            '{"ts":1796123829008.4312,"logger":"dra-plugin","caller":"plugin/dra_plugin.go:99",'
            '"msg":"Done calling NodePrepareResources rpc","driverName":"genericdp.io","v":4,'
            '"response":"claims:{}","err":null}'
        ),
        "not json at all NodePrepareResources",
    ]
)


def test_inspect_times_the_kubelets_prepare_calls(tmp_path: Path) -> None:
    log = tmp_path / "kubelet.log"
    log.write_text(KUBELET_LOG + "\n")
    result = inspect("prepares", str(log), "genericdp.io")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0.270", "claim-pod-dev-gl4lj"]
    assert inspect("prepares", str(log), "genericdp.io", "1796123829").stdout.strip() == ""


def _call(ts: float, msg: str, endpoint: str, **fields: str | None) -> str:
    entry = {"ts": ts * 1000, "logger": "dra-plugin", "msg": msg, "driverName": "genericdp.io"}
    return json.dumps(entry | {"endpoint": endpoint, "v": 4} | fields)


def _claims(key: str, *uids: str) -> str:
    """The kubelet's text form of a request (key uid) or a response (key key)."""
    return " ".join(f'claims:{{{key}:"{uid}"}}' for uid in uids)


def test_inspect_pairs_the_calls_of_two_endpoints_by_claim(tmp_path: Path) -> None:
    """`calls`: overlapping calls on two sockets (a rolling update) end where they began."""
    old, new = "/p/genericdp.io/dra-old.sock", "/p/genericdp.io/dra-new.sock"
    prep, done = "Calling NodePrepareResources rpc", "Done calling NodePrepareResources rpc"
    unprep = "Calling NodeUnprepareResource rpc"  # sic, the 1.36 kubelet's
    lines = [
        _call(100.0, prep, old, request=_claims("uid", "a")),
        _call(100.1, prep, old, request=_claims("uid", "b")),
        _call(100.2, prep, new, request=_claims("uid", "c")),
        _call(100.3, done, old, response=_claims("key", "b"), err=None),
        _call(100.5, done, new, response=_claims("key", "c"), err=None),
        _call(100.9, done, old, response="", err="rpc error: connection refused"),
        _call(101.0, unprep, new, request=_claims("uid", "c")),
        _call(101.5, "Done calling NodeUnprepareResources rpc", new, response=_claims("key", "c")),
        _call(102.0, prep, new, request=_claims("uid", "d")),
    ]
    log = tmp_path / "kubelet.log"
    log.write_text("\n".join([*lines, "plain text Resources rpc"]) + "\n")
    result = inspect("calls", str(log), "genericdp.io", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Prepare 0.200 dra-old.sock ok 100.300",
        "Prepare 0.300 dra-new.sock ok 100.500",
        "Prepare 0.900 dra-old.sock error 100.900",
        "Unprepare 0.500 dra-new.sock ok 101.500",
    ]
    since = inspect("calls", str(log), "genericdp.io", "100.4", "101")
    assert since.stdout.splitlines() == [
        "Prepare 0.300 dra-new.sock ok 100.500",
        "Prepare 0.900 dra-old.sock error 100.900",
    ], "ended after SINCE, began before UNTIL"


def test_inspect_names_the_events_of_a_watch() -> None:
    """`watch-events`: kubectl's pretty-printed event documents, one after another."""
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "s-1"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "s-2"}}},
    ]
    stream = "".join(json.dumps(e, indent=4) + "\n" for e in events)
    result = inspect("watch-events", stdin=stream)
    assert (result.returncode, result.stdout.splitlines()) == (0, ["ADDED s-1", "DELETED s-2"])
    assert inspect("watch-events", stdin="").stdout.strip() == ""


def _claim(uid: str, name: str, *, pool: str = "node-a", reserved: bool = True) -> dict[str, Any]:
    result = {"driver": "genericdp.io", "pool": pool, "device": "d", "request": "r"}
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p1"}]
    return {"metadata": {"uid": uid, "namespace": "ns", "name": name}, "status": status}


def _node_state(tmp_path: Path, recorded: dict[str, str], specs: list[str]) -> list[str]:
    checkpoint, cdi = tmp_path / "checkpoint.json", tmp_path / "cdi"
    cdi.mkdir(exist_ok=True)
    entries = {
        uid: {"namespace": "ns", "name": f"c-{uid}", "state": state,
              "spec": f"gdp-claim-genericdp.io_{uid}.json"}
        for uid, state in recorded.items()
    }  # fmt: skip
    checkpoint.write_text(json.dumps({"version": 1, "claims": entries}))
    for uid in specs:
        (cdi / f"gdp-claim-genericdp.io_{uid}.json").write_text("{}")
    (cdi / "gdp-claim-other.io_x.json").write_text("{}")  # another driver's
    return [str(checkpoint), str(cdi), "node-a", "genericdp.io"]


def test_inspect_checks_the_checkpoint_and_specs_against_the_held_claims(tmp_path: Path) -> None:
    """`held`: prepared in the checkpoint and a CDI spec for exactly the reserved claims."""
    claims = json.dumps(
        {
            "items": [
                _claim("u1", "held-1"),
                _claim("u2", "held-2"),
                _claim("u3", "free", reserved=False),
                _claim("u4", "elsewhere", pool="node-b"),
            ]
        }
    )
    args = _node_state(tmp_path, {"u1": "prepared", "u2": "prepared"}, ["u1", "u2"])
    result = inspect("held", *args, stdin=claims)
    assert (result.returncode, result.stdout.splitlines()) == (0, ["ns/held-1 u1", "ns/held-2 u2"])

    wrong = tmp_path / "wrong"
    wrong.mkdir()
    args = _node_state(wrong, {"u1": "preparing", "u3": "prepared"}, ["u3"])
    result = inspect("held", *args, stdin=claims)
    assert result.returncode == 1
    for said in (
        "ns/held-2 (u2) is held but not in the checkpoint",
        "the checkpoint lists ns/c-u3 (u3), which nothing holds",
        "ns/held-1 is 'preparing' in the checkpoint",
        "no CDI spec gdp-claim-genericdp.io_u1.json for ns/held-1",
        "the CDI spec gdp-claim-genericdp.io_u3.json is of no held claim",
    ):
        assert said in result.stderr


@pytest.mark.parametrize("args", [[], ["devices"], ["pool", "n"], ["nonsense", "a"]])
def test_inspect_usage(args: list[str]) -> None:
    result = inspect(*args)
    assert result.returncode == 2
    assert "dra-inspect.py devices RESOURCE" in result.stderr


def test_inspect_says_which_file_it_cannot_read(tmp_path: Path) -> None:
    result = inspect("prepares", str(tmp_path / "absent.log"), "genericdp.io")
    assert result.returncode == 1
    assert "absent.log" in result.stderr
