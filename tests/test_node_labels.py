"""Node labels from discovery: rendered over the healthy units, dropped when a value is
not a label value, and kept in a features.d file over a real file tree (atomic,
following hotplug, no write at idle or at a restart that changes nothing)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from genericdp.aio import TaskSet
from genericdp.config.model import ResourceDefinition
from genericdp.metrics import Metrics
from genericdp.nodelabels import healthy_units, resource_labels
from genericdp.nodelabels.featuresfile import FeaturesFile, parse_features
from genericdp.runtime.state import DeviceState
from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet
from tests.label_counts import CountingFollower
from tests.polling import eventually
from tests.runtime_harness import NO_PERIODIC, ScriptedDiscovery, config, running, unit
from tests.test_hotplug import CountingDiscovery

SERIAL = "example.com/serial"
CONFIG = f"""resources:
- name: {SERIAL}
  match: [udev: {{subsystem: tty, kernel: "ttyUSB*"}}]
  labels:
    example.com/serial.count: "{{{{ units | length }}}}"
    example.com/serial.first: "{{{{ units[0].properties.ID_SERIAL_SHORT }}}}"
    example.com/serial.model: "{{{{ units[0].properties.ID_MODEL_ENC }}}}"
"""
OTHER = "- name: example.com/other\n  match: [glob: /dev/nothing*]\n"


def _definition(labels: str) -> ResourceDefinition:
    text = f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n  labels:\n{labels}"
    return config(text).resources[0]


def test_labels_render_over_the_units_and_bad_values_are_dropped() -> None:
    """Templates see the units; a value that is not a label value and a template that
    fails are dropped with their reason; no units, no labels at all."""
    definition = _definition(
        "    example.com/serial.ids: \"{{ units | map(attribute='id') | join('.') }}\"\n"
        '    example.com/serial.node: "{{ node_name }}"\n'
        '    example.com/serial.bad: "{{ units[0].id }} and more"\n'
        '    example.com/serial.gone: "{{ units[0].attributes.nothing }}"\n'
    )
    labels, dropped = resource_labels(definition, [unit("a"), unit("b")], "node-1")
    assert labels == {
        "example.com/serial.ids": "a.b",
        "example.com/serial.node": "node-1",
        "example.com/serial.present": "true",
    }
    assert {(d.key, d.reason) for d in dropped} == {
        ("example.com/serial.bad", "invalid"),
        ("example.com/serial.gone", "render_failed"),
    }
    assert resource_labels(definition, [], "node-1") == ({}, [])


def test_only_healthy_units_are_labelled() -> None:
    """An Unhealthy unit is not among the units a label describes."""
    state = DeviceState(units=[unit("b"), unit("a"), unit("c")])
    state.set_unhealthy(["b"])
    assert [u.id for u in healthy_units(state)] == ["a", "c"]


async def test_the_feature_file_follows_hotplug_atomically_and_idle_writes_nothing(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dongle plugged in changes the file within a second, replaced by a rename (a new
    inode, no temporary left); rescans that change nothing write nothing; the bad value
    is logged once and counted; no units left removes the file."""
    caplog.set_level(logging.WARNING, logger="genericdp.nodelabels")
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    path = base / "features.d" / "genericdp"
    counting = CountingDiscovery()
    metrics = Metrics()
    async with running(base, config(CONFIG), discover=counting, **NO_PERIODIC) as rt:
        counting.bind()
        follower = CountingFollower(rt.supervisor, FeaturesFile(path), "node-1", metrics)
        tasks = TaskSet()
        tasks.spawn("node-features", follower.run)
        try:
            await eventually(lambda: follower.rounds == 1, "the labels published")
            assert path.read_text() == (
                "example.com/serial.count=1\n"
                "example.com/serial.first=OLD\n"
                "example.com/serial.present=true\n"
            )
            first = path.stat().st_ino
            assert follower.writes == 1

            # Idle: rescans find the same units; a reload adding a resource with no
            # units has the labels computed again, equal: nothing is written.
            calls = counting.calls
            for _ in range(3):
                rt.supervisor.rescan("test")
                await counting.wait_calls(calls + 1)
                calls = counting.calls
            rounds = follower.rounds
            await rt.supervisor.apply(config(CONFIG + OTHER))
            await eventually(lambda: follower.rounds > rounds, "the labels computed again")
            assert follower.writes == 1
            assert path.stat().st_ino == first

            loop = asyncio.get_running_loop()
            started = loop.time()
            host.add_usb_serial(port="1-3", serial="NEW", ttys=("ttyUSB1",))
            await eventually(lambda: follower.writes == 2, "the second dongle")
            took = loop.time() - started
            assert parse_features(path.read_text()) == {
                "example.com/serial.count": "2",
                "example.com/serial.first": "NEW",  # units in ID order: usb-NEW, usb-OLD
                "example.com/serial.present": "true",
            }
            assert took < 1.0, f"the file followed the hotplug after {took:.3f}s"
            assert follower.writes == 2
            assert path.stat().st_ino != first
            assert [p.name for p in path.parent.iterdir()] == ["genericdp"]

            drops = [r for r in caplog.records if "example.com/serial.model" in r.getMessage()]
            assert len(drops) == 1, [r.getMessage() for r in drops]
            assert "not published (invalid)" in drops[0].getMessage()
            dropped = metrics.registry.get_sample_value(
                "genericdp_node_labels_dropped_total", {"resource": SERIAL, "reason": "invalid"}
            )
            assert dropped == 1

            host.remove("/dev/ttyUSB0")
            host.remove("/dev/ttyUSB1")
            await eventually(lambda: follower.writes == 3, "the last unit unplugged")
            assert not path.exists()
        finally:
            await tasks.stop()


async def _published(base: Path, path: Path) -> tuple[int, int]:
    """Run a daemon until its labels are published; its writes and the file's inode."""
    async with running(base, config(CONFIG), **NO_PERIODIC) as rt:
        follower = CountingFollower(rt.supervisor, FeaturesFile(path), "node-1")
        tasks = TaskSet()
        tasks.spawn("node-features", follower.run)
        try:
            await eventually(lambda: follower.rounds > 0, "the labels published")
            return follower.writes, path.stat().st_ino  # noqa: ASYNC240 -- a test's file
        finally:
            await tasks.stop()


async def test_a_restart_that_changes_nothing_writes_nothing(base: Path) -> None:
    """A new daemon finding the labels already in the file leaves the file as it is; its
    first scan is awaited, so no transient empty set is written meanwhile."""
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    path = base / "features.d" / "genericdp"
    writes, inode = await _published(base, path)
    assert writes == 1
    assert await _published(base, path) == (0, inode)


@pytest.mark.parametrize("fifo", [False, True], ids=["file", "fifo-in-its-place"])
async def test_serve_keeps_the_feature_file_and_leaves_it_at_exit(base: Path, fifo: bool) -> None:
    """``serve --node-features file`` writes the labels of what it found; they stay after
    SIGTERM (a pod's restart must not remove the node's labels). A FIFO at the path
    (opening it for reading waited for a writer for ever: no labels, and SIGTERM hung)
    is said, replaced by the file, and SIGTERM ends serve at once."""
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    cfg = base / "config.yaml"
    cfg.write_text("version: v1\n" + CONFIG)
    path = base / "features.d" / "genericdp"
    if fifo:
        path.parent.mkdir(parents=True)
        os.mkfifo(path)
    plugin_dir = base / "dp"
    argv = [
        "-m", "genericdp", "serve",
        "--config", str(cfg),
        "--plugin-dir", str(plugin_dir),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--state-dir", "",
        *host.root_flags(),
        "--metrics-address", "",
        "--node-features", "file",
        "--node-features-file", str(path),
    ]  # fmt: skip
    env = own_env()
    async with EmbeddedKubelet(plugin_dir):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        written = f"node labels: feature file {path} holds 3 label(s)"
        seen: list[str] = []
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(60):  # a start on a loaded machine; the file follows at once
                while not seen or written not in seen[-1]:
                    line = await proc.stdout.readline()
                    assert line, "serve exited: " + "".join(seen)
                    seen.append(line.decode())
            proc.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, "".join(seen) + output.decode()
    assert parse_features(path.read_text())["example.com/serial.first"] == "OLD"
    refused = f"feature file {path} is a FIFO, not a regular file: not read, replaced by one"
    assert any(refused in line for line in seen) == fifo, "".join(seen)


async def test_a_resource_whose_discovery_fails_keeps_its_labels_and_holds_back_none(
    base: Path,
) -> None:
    """A resource never scanned keeps the labels published under its keys; the others'
    labels are published meanwhile; a resource removed from the config loses its own."""
    path = base / "features.d" / "genericdp"
    path.parent.mkdir(parents=True)
    path.write_text("example.com/broken.present=true\nexample.com/gone.present=true\n")
    cfg = (
        "resources:\n- name: example.com/broken\n  match: [glob: /dev/b*]\n"
        "- name: example.com/ok\n  match: [glob: /dev/o*]\n"
    )
    scripted = ScriptedDiscovery(
        units={"example.com/ok": [unit("o1")]}, broken={"example.com/broken"}
    )
    async with running(base, config(cfg), discover=scripted, **NO_PERIODIC) as rt:
        follower = CountingFollower(rt.supervisor, FeaturesFile(path), "node-1")
        tasks = TaskSet()
        tasks.spawn("node-features", follower.run)
        try:
            await eventually(lambda: follower.writes == 1, "the working resource's labels")
            assert parse_features(path.read_text()) == {
                "example.com/broken.present": "true",
                "example.com/ok.present": "true",
            }
        finally:
            await tasks.stop()


async def test_a_unit_turning_unhealthy_leaves_the_labels_and_comes_back(base: Path) -> None:
    """The labels describe healthy units: a failing probe takes its unit out, and the
    resource's labels with it when it was the last; passing again brings them back."""
    bad = base / "bad"
    cfg = (
        "resources:\n- name: example.com/probed\n  match: [glob: /dev/p*]\n"
        "  health:\n    exec: [/bin/sh, -c, 'test ! -e " + str(bad) + "-$GENERICDP_UNIT_ID']\n"
        "    interval: 1s\n    timeout: 500ms\n    failureThreshold: 1\n"
        "  labels:\n    example.com/probed.count: '{{ units | length }}'\n"
    )
    scripted = ScriptedDiscovery(units={"example.com/probed": [unit("p1"), unit("p2")]})
    path = base / "features.d" / "genericdp"
    async with running(base, config(cfg), discover=scripted, **NO_PERIODIC) as rt:
        follower = CountingFollower(rt.supervisor, FeaturesFile(path), "node-1")
        tasks = TaskSet()
        tasks.spawn("node-features", follower.run)
        try:
            await eventually(lambda: follower.writes == 1, "both units probed and published")
            assert parse_features(path.read_text())["example.com/probed.count"] == "2"
            (base / "bad-p1").touch()
            await eventually(lambda: follower.writes == 2, "p1 unhealthy")
            assert parse_features(path.read_text())["example.com/probed.count"] == "1"
            (base / "bad-p2").touch()
            await eventually(lambda: not path.exists(), "no healthy unit: no labels")
            (base / "bad-p1").unlink()
            (base / "bad-p2").unlink()
            await eventually(
                lambda: path.exists() and "count=2" in path.read_text(), "both healthy again"
            )
            assert parse_features(path.read_text()) == {
                "example.com/probed.count": "2",
                "example.com/probed.present": "true",
            }
        finally:
            await tasks.stop()
