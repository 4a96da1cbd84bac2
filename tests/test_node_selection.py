"""Resources with a nodeSelector, served by the supervisor as the node's labels say.

The labels come from a static source (``Supervisor(node_labels=...)`` and
``set_node_labels``), as ``simulate`` and the embedded kubelet give them; the
Node watch against the real API server is in tests/test_nodewatch.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from genericdp.runtime.reconcile import LABELS_UNKNOWN, not_served, served
from tests.polling import eventually
from tests.runtime_harness import Running, ScriptedDiscovery, config, unit
from tests.test_cleanup import SERIAL, Hook, serving

OTHER = "example.com/other"
SELECTED = "  nodeSelector: {matchLabels: {example.com/serial: present}}\n"
PLAIN = f"- name: {OTHER}\n  match: [glob: /dev/other*]\n"


def _served(rt: Running) -> list[str]:
    return sorted(rt.supervisor.status())


def test_served_splits_resources_by_their_selector() -> None:
    """No selector: served everywhere; unknown labels: no selector matches; else the first
    unmet requirement is the reason."""
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n{SELECTED}{PLAIN}"
        "- name: example.com/any\n  match: [glob: /dev/any*]\n  nodeSelector: {}\n"
    )
    selected, plain, anywhere = cfg.resources
    assert not_served(plain, None) is None
    assert not_served(selected, None) == LABELS_UNKNOWN
    assert not_served(anywhere, None) == LABELS_UNKNOWN
    assert not_served(anywhere, {}) is None
    assert not_served(selected, {}) == "nodeSelector needs example.com/serial=present"
    kept, skipped = served(cfg.resources, {"example.com/serial": "present"})
    assert [d.name for d in kept] == [SERIAL, OTHER, "example.com/any"]
    assert skipped == {}
    kept, skipped = served(cfg.resources, {"example.com/serial": "absent"})
    assert [d.name for d in kept] == [OTHER, "example.com/any"]
    assert skipped == {SERIAL: "nodeSelector needs example.com/serial=present"}


async def test_a_label_starts_the_resource_and_its_removal_stops_it_as_a_removal_does(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not advertised until the node has the label; advertised once it has; when the label
    goes, the resource stops as one removed from the config does (its unit in use is
    cleaned once released, the neighbour is untouched)."""
    caplog.set_level(logging.INFO, logger="genericdp")
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")], OTHER: [unit("other0")]})
    cfg = hook.config(extra=SELECTED + PLAIN)
    async with serving(base, cfg, discovery, node_labels={"zone": "a"}) as rt:
        await rt.registered([OTHER])
        assert _served(rt) == [OTHER]
        assert SERIAL not in rt.kubelet.resources
        assert rt.supervisor.skipped == {SERIAL: "nodeSelector needs example.com/serial=present"}

        await rt.supervisor.set_node_labels({"zone": "a", "example.com/serial": "present"})
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        assert rt.supervisor.skipped == {}
        response = await rt.kubelet.allocate(SERIAL, 1, pod="p")
        assert response.container_responses[0].devices[0].host_path == "/dev/ttyUSB0"
        await eventually(lambda: rt.usage.listed(SERIAL) == {"ttyUSB0"})
        other_socket = rt.socket(OTHER)

        steps = await rt.supervisor.set_node_labels({"zone": "a"})
        assert steps.stop == (SERIAL,)
        assert _served(rt) == [OTHER]
        await rt.until(lambda k: not k.resources[SERIAL].connected)
        assert hook.lines("runs") == []
        rt.kubelet.release("default", "p")
        await eventually(lambda: hook.lines("done") == ["ttyUSB0"])
        assert rt.socket(OTHER) == other_socket
    lines = [r.getMessage() for r in caplog.records if "not serving on this node" in r.getMessage()]
    needs = f"{SERIAL} (nodeSelector needs example.com/serial=present)"
    assert lines == [f"not serving on this node: {needs}"] * 2


async def test_unknown_labels_serve_no_selected_resource_and_say_so_once(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without labels (no API access) a resource with a selector is not served, and a
    reload of the same config does not say so again."""
    caplog.set_level(logging.INFO, logger="genericdp")
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")], OTHER: [unit("other0")]})
    cfg = hook.config(extra=SELECTED + PLAIN)
    async with serving(base, cfg, discovery) as rt:
        await rt.registered([OTHER])
        await rt.supervisor.apply(hook.config(extra=SELECTED + PLAIN), if_changed=True)
        await rt.supervisor.set_node_labels(None)
        assert _served(rt) == [OTHER]
    lines = [r.getMessage() for r in caplog.records if "not serving on this node" in r.getMessage()]
    assert lines == [f"not serving on this node: {SERIAL} ({LABELS_UNKNOWN})"]


async def test_labels_that_change_nothing_selected_apply_nothing(base: Path) -> None:
    """A label change that leaves every selector's verdict as it was stops and starts nothing."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    labels = {"example.com/serial": "present"}
    async with serving(base, hook.config(extra=SELECTED), discovery, node_labels=labels) as rt:
        await rt.registered([SERIAL])
        socket = rt.socket(SERIAL)
        steps = await rt.supervisor.set_node_labels({**labels, "zone": "b"})
        assert steps.empty
        assert rt.socket(SERIAL) == socket
