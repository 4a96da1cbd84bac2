"""The last good config kept on the node: written after an apply, read back only when sound."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from genericdp.config.loader import MAX_FILE_BYTES, Source
from genericdp.lastgood import MAX_STATE_BYTES, STATE_FILE, LastGood, digest_of

GOOD = """\
version: v1
resources:
  - name: example.com/null
    match: [glob: /dev/null]
"""
OTHER = GOOD.replace("example.com/null", "example.com/zero").replace("/dev/null", "/dev/zero")


def kept(directory: Path, *texts: str) -> LastGood:
    store = LastGood(directory, clock=lambda: 1764628200.0)
    sources = [Source(f"/etc/genericdp/{i}.yaml", t) for i, t in enumerate(texts)]
    assert store.keep(sources)
    return store


def rewrite(store: LastGood, change: dict[str, object]) -> None:
    doc = json.loads(store.path.read_text())
    doc.update(change)
    store.path.write_text(json.dumps(doc))


def test_a_kept_config_reads_back_as_it_was_applied(tmp_path: Path) -> None:
    """keep writes the files (mode 0600 in a 0700 directory); read gives the same config."""
    store = kept(tmp_path / "state", GOOD, OTHER)
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    reading = LastGood(tmp_path / "state").read()
    assert reading.problem is None
    assert reading.kept is not None
    assert [r.name for r in reading.kept.config.resources] == [
        "example.com/null",
        "example.com/zero",
    ]
    assert [s.text for s in reading.kept.sources] == [GOOD, OTHER]
    assert reading.kept.when == "2025-12-01 22:30:00 UTC"


def test_the_same_config_is_not_written_again(tmp_path: Path) -> None:
    """A reload that finds the config unchanged costs no write; a changed one is kept."""
    store = kept(tmp_path, GOOD)
    assert not store.keep([Source("/etc/genericdp/0.yaml", GOOD)])
    assert store.keep([Source("/etc/genericdp/0.yaml", OTHER)])
    reading = LastGood(tmp_path).read()
    assert reading.kept is not None
    assert reading.kept.sources[0].text == OTHER


def test_a_directory_made_by_a_host_path_is_narrowed_to_0700(tmp_path: Path) -> None:
    """hostPath DirectoryOrCreate makes the directory 0755: keep makes it 0700."""
    (tmp_path / "state").mkdir(mode=0o755)
    kept(tmp_path / "state", GOOD)
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700


def test_nothing_kept_is_neither_a_config_nor_a_problem(tmp_path: Path) -> None:
    """An empty or missing state directory: no config, no problem."""
    assert LastGood(tmp_path / "missing").read().kept is None
    assert LastGood(tmp_path).read() == LastGood(tmp_path / "missing").read()
    assert LastGood(tmp_path).read().problem is None


def _tampered_text(store: LastGood) -> None:
    doc = json.loads(store.path.read_text())
    doc["files"][0]["text"] = GOOD.replace("/dev/null", "/dev/mem")
    store.path.write_text(json.dumps(doc))


def _consistently_invalid(store: LastGood) -> None:
    """Digests recomputed, so only the loader can tell."""
    doc = json.loads(store.path.read_text())
    text = GOOD.replace("example.com/null", "null")
    doc["files"][0].update(text=text, sha256=hashlib.sha256(text.encode()).hexdigest())
    doc["sha256"] = digest_of([Source(doc["files"][0]["path"], text)])
    store.path.write_text(json.dumps(doc))


def _garble(store: LastGood) -> None:
    store.path.write_bytes(b'{"kind": "genericdp.io/last-good-config", \xff')


REFUSALS = {
    "garbled": (_garble, "is not the JSON genericdp writes"),
    "not ours": (lambda s: s.path.write_text('{"kind": "something"}'), "is not a kept config"),
    "another format": (lambda s: rewrite(s, {"format": 2}), "has format 2, not 1"),
    "no files": (lambda s: rewrite(s, {"files": []}), "files must be a list"),
    "a bad time": (lambda s: rewrite(s, {"applied": "yesterday"}), "applied must be a Unix time"),
    "a text changed": (_tampered_text, "files[0] (/etc/genericdp/0.yaml): its sha256 does not"),
    "the digest changed": (lambda s: rewrite(s, {"sha256": "0" * 64}), "does not match its files"),
    "an invalid config": (_consistently_invalid, "the kept config is invalid: "),
    "too large": (lambda s: s.path.write_bytes(b" " * (MAX_STATE_BYTES + 1)), "is larger than"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_damaged_state_file_is_refused_in_words(tmp_path: Path, case: str) -> None:
    """Garbled, foreign, tampered, invalid or oversized state is a problem, never an exception."""
    store = kept(tmp_path, GOOD)
    damage, expected = REFUSALS[case]
    damage(store)
    reading = LastGood(tmp_path).read()
    assert reading.kept is None
    assert reading.problem is not None
    assert reading.problem.startswith(f"{tmp_path / STATE_FILE}: ")
    assert expected in reading.problem


def test_an_invalid_kept_config_names_the_kept_file_and_its_position(tmp_path: Path) -> None:
    """The loader's issue names the state file and the file it was kept from, line and column."""
    store = kept(tmp_path, GOOD)
    _consistently_invalid(store)
    problem = LastGood(tmp_path).read().problem
    assert problem is not None
    assert f"{store.path}[/etc/genericdp/0.yaml]:3:11: resources[0].name:" in problem


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    """A state file or directory that is a symlink is refused, for reading and for writing."""
    elsewhere = kept(tmp_path / "elsewhere", GOOD)
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / STATE_FILE).symlink_to(elsewhere.path)
    problem = LastGood(tmp_path / "file").read().problem
    assert problem is not None
    assert "is a symbolic link: never followed" in problem
    (tmp_path / "dir").symlink_to(tmp_path / "elsewhere")
    problem = LastGood(tmp_path / "dir").read().problem
    assert problem is not None
    assert "is a symbolic link: never followed" in problem
    assert not LastGood(tmp_path / "dir").keep([Source("/etc/genericdp/x.yaml", OTHER)])
    assert LastGood(tmp_path / "elsewhere").read().kept is not None  # untouched


def test_a_state_directory_that_cannot_be_written_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """keep never raises: a state path that is a file is a warning saying so."""
    (tmp_path / "state").write_text("")
    with caplog.at_level(logging.WARNING, "genericdp.lastgood"):
        assert not LastGood(tmp_path / "state").keep([Source("/etc/genericdp/x.yaml", GOOD)])
    assert f"cannot keep the applied config in {tmp_path / 'state' / STATE_FILE}" in caplog.text
    assert "is not a directory" in caplog.text


def test_a_config_larger_than_a_config_map_is_not_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The bound is what a ConfigMap holds; a larger config is served but not kept."""
    big = GOOD + "#" * MAX_FILE_BYTES + "\n"
    with caplog.at_level(logging.WARNING, "genericdp.lastgood"):
        assert not LastGood(tmp_path).keep([Source("/etc/genericdp/big.yaml", big)])
    assert "is not kept" in caplog.text
    assert not (tmp_path / STATE_FILE).exists()
