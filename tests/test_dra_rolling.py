"""Rolling updates of the DRA driver: two instances on one node, each on sockets carrying its
pod UID, registered side by side with the embedded DRA kubelet, their calls taking turns
over one checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from genericdp.config.model import Hooks
from genericdp.dra.checkpoint import FILE_NAME
from genericdp.dra.driver import DraDriver
from genericdp.dra.turns import TurnError, Turns
from genericdp.kubeletplugin.socketnames import dra_socket, registration_socket
from genericdp.unixgrpc import MAX_UNIX_PATH_BYTES
from tests.dra_drivers import new_driver, started
from tests.dra_fakes import (
    DRIVER,
    HOOK,
    SERIAL,
    MemoryClaims,
    RecordedHooks,
    allocated,
    claim,
    definition,
    unit,
)
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet

UID_OLD = "11111111-2222-3333-4444-555555555555"
UID_NEW = "66666666-7777-8888-9999-000000000000"
REGISTERED, DEREGISTERED = DraEventKind.REGISTERED, DraEventKind.DEREGISTERED


def test_socket_names_carry_the_pod_uid_as_the_helper_names_them() -> None:
    """With a pod UID: <driver>-<uid>-reg.sock and dra-<uid>.sock; without: today's names."""
    registry, plugin_dir = Path("/var/lib/kubelet/plugins_registry"), Path("/p/genericdp.io")
    assert registration_socket(registry, DRIVER) == registry / f"{DRIVER}-reg.sock"
    assert dra_socket(plugin_dir, DRIVER) == plugin_dir / "dra.sock"
    assert registration_socket(registry, DRIVER, UID_OLD) == registry / (
        f"{DRIVER}-{UID_OLD}-reg.sock"
    )
    assert dra_socket(plugin_dir, DRIVER, UID_OLD) == plugin_dir / f"dra-{UID_OLD}.sock"


def test_a_name_that_would_not_fit_107_bytes_is_hashed_unique_and_stable() -> None:
    """A 63-character driver with a UID under the kubelet's registry: hashed to fit, one
    name per pod, the same name for the same pod."""
    registry = Path("/var/lib/kubelet/plugins_registry")
    driver = "a" * 30 + "." + "b" * 32
    old = registration_socket(registry, driver, UID_OLD)
    new = registration_socket(registry, driver, UID_NEW)
    assert old != new
    assert old == registration_socket(registry, driver, UID_OLD)
    for path in (old, new):
        assert len(str(path).encode()) <= MAX_UNIX_PATH_BYTES, path
        assert path.name.endswith("-reg.sock")
        assert path.name.startswith("aaaa")
    long_dir = Path("/var/lib/kubelet/plugins") / driver
    assert len(str(dra_socket(long_dir, driver, UID_OLD)).encode()) <= MAX_UNIX_PATH_BYTES


def instance(
    base: Path, claims: MemoryClaims, hooks: RecordedHooks, pod_uid: str
) -> AbstractAsyncContextManager[DraDriver]:
    """The instance of pod ``pod_uid``, serving A0 and A1, started; closed after."""
    resource = definition(hooks=Hooks(init=HOOK, cleanup=HOOK))
    return started(new_driver(base, claims, resource=resource, run_hook=hooks, pod_uid=pod_uid))


def recorded(base: Path) -> set[str]:
    doc = json.loads((base / "plugins" / DRIVER / FILE_NAME).read_text())
    return set(doc["claims"])


async def test_the_kubelet_uses_the_newest_instance_and_falls_back_to_the_other(
    base: Path,
) -> None:
    """Both instances are registered at once; calls go to the newest; when it goes, the
    older serves again; a claim prepared by one is unprepared by the other, its cleanup
    run once, and the checkpoint holds the claims of both."""
    claims = MemoryClaims()
    for n in (1, 2, 3):
        claims.allocate(claim(n), allocated(SERIAL, unit(n % 2)))
    old_hooks, new_hooks = RecordedHooks(), RecordedHooks()
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        instance(base, claims, old_hooks, UID_OLD) as old,
    ):
        await kubelet.wait_until(lambda k: k.count(REGISTERED, DRIVER) == 1)
        await kubelet.prepare_pod(DRIVER, [claim(1)])
        assert old_hooks.names() == ["init"]
        async with instance(base, claims, new_hooks, UID_NEW) as new:
            await kubelet.wait_until(lambda k: k.count(REGISTERED, DRIVER) == 2)
            assert kubelet.registered(DRIVER)
            assert new.registration.socket != old.registration.socket
            await kubelet.prepare_pod(DRIVER, [claim(2)])
            assert new_hooks.names() == ["init"], "the newest registration gets the call"
            await kubelet.unprepare(DRIVER, [claim(1)])  # prepared by the old one
            assert new_hooks.names() == ["init", "cleanup"]
            assert recorded(base) == {claim(2).uid}
        await kubelet.wait_until(lambda k: k.count(DEREGISTERED, DRIVER) == 1)
        assert kubelet.registered(DRIVER), "the older registration is still there"
        await kubelet.prepare_pod(DRIVER, [claim(3)])
        assert old_hooks.names() == ["init", "init"], "the old instance serves again"
        assert recorded(base) == {claim(2).uid, claim(3).uid}
        await kubelet.unprepare(DRIVER, [claim(2), claim(3)])
        assert recorded(base) == set()
        assert list((base / "cdi").iterdir()) == []


async def test_an_instance_follows_the_claims_another_prepared(base: Path) -> None:
    """What one instance holds as used (unplug under use, health) includes the claims the
    other instance prepared, read from the checkpoint as soon as it changes."""
    claims = MemoryClaims()
    claims.allocate(claim(1), allocated(SERIAL, unit(1)))
    changed = asyncio.Event()
    async with (
        instance(base, claims, RecordedHooks(), UID_OLD) as old,
        instance(base, claims, RecordedHooks(), UID_NEW) as new,
    ):
        old.turns.on_change = changed.set
        await new.preparer.prepare([claim(1)])
        await asyncio.wait_for(changed.wait(), 10)
        assert [p.claim.uid for p in old.checkpoint] == [claim(1).uid]
        changed.clear()
        await new.preparer.unprepare([claim(1)])
        await asyncio.wait_for(changed.wait(), 10)
        assert list(old.checkpoint) == []


async def test_a_call_waits_for_the_other_instances_turn_and_gives_up_at_its_deadline(
    base: Path,
) -> None:
    """While another instance holds the node's call lock a turn waits; past the deadline
    it fails naming the lock, and the kubelet's retry then succeeds."""
    claims = MemoryClaims()
    claims.allocate(claim(1), allocated(SERIAL, unit(1)))
    async with instance(base, claims, RecordedHooks(), UID_OLD) as d:
        other = Turns(d.checkpoint, d.turns.path)  # another process's open file: its own lock
        d.turns.deadline = 0.2
        async with other.turn():
            answer = await d.preparer.prepare([claim(1)])
        assert "serialize.lock" in answer[claim(1).uid].error
        assert "the kubelet tries again" in answer[claim(1).uid].error
        answer = await d.preparer.prepare([claim(1)])
        assert answer[claim(1).uid].error == ""
        os.mkfifo(base / "fifo")  # never blocks the call: refused, named
        with pytest.raises(TurnError, match="fifo is not a regular file"):
            async with Turns(d.checkpoint, base / "fifo").turn():
                pass


def _left_behind(path: Path) -> None:
    """A socket file nothing listens on, as a pod killed with SIGKILL leaves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))


async def test_sockets_a_killed_pod_left_are_removed_and_live_or_foreign_ones_kept(
    base: Path,
) -> None:
    """At registration, the sockets of a pod of this driver that nothing serves any more
    go (the kubelet would keep dialing them); another live pod's, another driver's, and
    the fixed names stay. (No embedded kubelet here: it dials dead sockets one by one.)"""
    registry, plugin_dir = base / "registry", base / "plugins" / DRIVER
    dead = "deaddead-0000-4000-8000-000000000000"
    stale = [registration_socket(registry, DRIVER, dead), dra_socket(plugin_dir, DRIVER, dead)]
    foreign = [
        registration_socket(registry, "other.example.com", dead),
        registry / f"{DRIVER}-reg.sock",
        plugin_dir / "dra.sock",
    ]
    for path in (*stale, *foreign):
        _left_behind(path)
    claims, hooks = MemoryClaims(), RecordedHooks()
    async with instance(base, claims, hooks, UID_OLD) as old:
        assert not any(p.exists() for p in stale)
        async with instance(base, claims, hooks, UID_NEW):
            assert old.registration.socket.is_socket(), "a live pod's socket stays"
            assert old.dra_socket.is_socket()
        assert all(p.is_socket() for p in foreign)
