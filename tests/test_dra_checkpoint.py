"""The DRA checkpoint as hostile input: it never blocks the start, never costs more
than a bounded amount of memory, and what cannot be used is kept, not lost, and is
never a reason to remove the CDI spec of a claim that may still run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from genericdp.allocation.cdi import claim_spec_name
from genericdp.dra.checkpoint import MAX_BYTES, PREPARED, Checkpoint, PreparedClaim
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.kubeletplugin.claims import ClaimRef
from tests.dra_fakes import DRIVER, NODE, SERIAL, RecordedHooks, allocated, claim, definition, unit
from tests.dra_fakes import setup as prepare_setup

HANG_SECONDS = 10.0


def _load_in_thread(checkpoint: Checkpoint) -> None:
    """``load`` from a thread: a regression that blocks fails in seconds, not never."""
    thread = threading.Thread(target=checkpoint.load, daemon=True)
    thread.start()
    thread.join(HANG_SECONDS)
    assert not thread.is_alive(), f"loading {checkpoint.path} did not finish"


def _aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".unusable-*"))


def test_a_fifo_checkpoint_is_set_aside_without_blocking(tmp_path: Path) -> None:
    """A FIFO where the checkpoint should be: no blocking open, kept aside as it is."""
    path = tmp_path / "checkpoint.json"
    os.mkfifo(path)
    checkpoint = Checkpoint(path)
    _load_in_thread(checkpoint)
    assert list(checkpoint) == []
    assert not checkpoint.complete
    (kept,) = _aside(path)
    assert kept.is_fifo()
    assert not os.path.lexists(path)


def test_a_directory_or_a_link_is_not_read_as_the_checkpoint(tmp_path: Path) -> None:
    """A directory and a symbolic link are not regular files: set aside, not followed."""
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"version": 1, "claims": {}}))
    for kind in ("directory", "link"):
        path = tmp_path / "checkpoint.json"
        if kind == "directory":
            path.mkdir()
        else:
            path.symlink_to(target)
        checkpoint = Checkpoint(path)
        _load_in_thread(checkpoint)
        assert not checkpoint.complete
        assert not os.path.lexists(path)
    assert len(_aside(tmp_path / "checkpoint.json")) == 2
    assert target.read_text() == json.dumps({"version": 1, "claims": {}})


MEASURE = """
import resource, sys
from pathlib import Path
from genericdp.dra.checkpoint import Checkpoint
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
checkpoint = Checkpoint(Path(sys.argv[1]))
checkpoint.load()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after - before, len(list(checkpoint)), getattr(checkpoint, "complete", None))
"""


def test_a_checkpoint_of_many_tiny_entries_is_refused_before_parsing(tmp_path: Path) -> None:
    """Just under the byte cap but millions of entries: refused in a few MiB, not GiB."""
    path = tmp_path / "checkpoint.json"
    count = (MAX_BYTES - 100) // len('"u0000000":{},')
    body = ",".join(f'"u{i:07d}":{{}}' for i in range(count))
    path.write_text('{"version": 1, "claims": {' + body + "}}")
    assert path.stat().st_size < MAX_BYTES
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    growth_kib, claims, complete = done.stdout.split()
    assert (claims, complete) == ("0", "False")
    assert int(growth_kib) < 64 * 1024, f"peak RSS grew {int(growth_kib) // 1024} MiB"
    assert "holds over" in done.stderr


def _paths(base: Path) -> DriverPaths:
    return DriverPaths(base / "registry", base / "plugins", base / "cdi")


async def _start_and_close(base: Path) -> None:
    (base / "registry").mkdir(exist_ok=True)
    d = DraDriver(
        driver=DRIVER,
        node_name=NODE,
        paths=_paths(base),
        claims=prepare_setup(base, []).claims,
        run_hook=RecordedHooks(),
    )
    await d.start()
    await d.close()


async def _prepared_spec(base: Path) -> Path:
    """A claim prepared for real: its CDI spec in the driver's CDI directory."""
    s = prepare_setup(base, [(definition(), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    assert (await s.preparer.prepare([claim()]))[claim().uid].error == ""
    spec = s.cdi_dir / claim_spec_name(s.preparer.driver, claim().uid)
    assert spec.is_file()
    return spec


async def test_a_checkpoint_of_another_version_keeps_every_claim_spec(base: Path) -> None:
    """A rollback meets a newer file: it is kept aside byte for byte, and the live
    claim's spec survives this start and the next (while the file stays aside)."""
    spec = await _prepared_spec(base)
    path = _paths(base).plugins_dir / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    newer = json.dumps({"version": 2, "claims": [{"uid": claim().uid}]}).encode()
    path.write_bytes(newer)
    await _start_and_close(base)
    assert spec.is_file()
    (kept,) = _aside(path)
    assert kept.read_bytes() == newer
    path.write_text(json.dumps({"version": 1, "claims": {}}))  # ours, written since
    await _start_and_close(base)
    assert spec.is_file()
    kept.unlink()  # the operator has looked: the cleanup runs again
    await _start_and_close(base)
    assert not spec.exists()


async def test_an_unparseable_checkpoint_keeps_every_claim_spec(base: Path) -> None:
    """Half a file (a full disk, a bad edit): kept aside, no spec removed."""
    spec = await _prepared_spec(base)
    path = _paths(base).plugins_dir / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"version": 1, "claims": {"')
    await _start_and_close(base)
    assert spec.is_file()
    assert len(_aside(path)) == 1


async def test_a_dropped_entry_keeps_its_claims_spec(base: Path) -> None:
    """An entry of unexpected shape is dropped, but the spec of its UID stays."""
    spec = await _prepared_spec(base)
    path = _paths(base).plugins_dir / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "claims": {claim().uid: {"state": "odd"}}}))
    await _start_and_close(base)
    assert spec.is_file()
    assert _aside(path) == []


async def test_a_removal_cancelled_while_another_write_runs_still_reaches_the_file(
    tmp_path: Path,
) -> None:
    """An unprepare whose caller hangs up (the kubelet restarting) while the checkpoint
    is being written for another claim: the removal is in memory, so it reaches the
    file too; a restart does not find the unprepared claim there."""
    path = tmp_path / "checkpoint.json"
    checkpoint = Checkpoint(path)
    checkpoint.load()
    gone, kept = (ClaimRef("default", n, f"{n}-0000-4000-8000-000000000000") for n in "ab")
    await checkpoint.put(PreparedClaim(gone, PREPARED, ()))
    writing = asyncio.create_task(checkpoint.put(PreparedClaim(kept, PREPARED, ())))
    await asyncio.sleep(0)  # the put holds the lock, its write in a thread
    removing = asyncio.create_task(checkpoint.remove(gone.uid))
    await asyncio.sleep(0)  # the removal is in memory and waits for the lock
    removing.cancel()
    await writing
    with contextlib.suppress(asyncio.CancelledError):
        await removing
    assert [p.claim.uid for p in checkpoint] == [kept.uid]

    def on_disk() -> list[str]:
        again = Checkpoint(path)
        again.load()
        return [p.claim.uid for p in again]

    deadline = time.monotonic() + HANG_SECONDS
    while on_disk() != [kept.uid]:  # the shielded write lands a moment later
        assert time.monotonic() < deadline, f"the file still lists {on_disk()}"
        await asyncio.sleep(0.01)
