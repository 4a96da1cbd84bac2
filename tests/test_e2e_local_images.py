"""The pieces of e2e/local/images.sh that run without buildah, podman or a registry.

The pause program (compiled with the gcc the image build uses), the OCI
archive naming that `ctr images import` relies on, the pip configuration the
image build hands to pip, and the scripts' hygiene. The images themselves are
built and smoke-tested by e2e/local/images.sh (root, in .ci/run).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "e2e" / "local"
IMAGETOOL = LOCAL / "imagetool.py"
PAUSE_C = LOCAL / "pause" / "pause.c"
DEADLINE = 10.0


def poll(condition: object, what: str, deadline: float = DEADLINE) -> None:
    """Wait until condition() is true, or fail saying what did not happen."""
    assert callable(condition)
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline}s waiting for: {what}")
        time.sleep(0.02)


# -- pause ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pause(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pause.c built as images.sh builds it (static, -Os, warnings as errors)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp("pause") / "pause"
    result = subprocess.run(
        ["gcc", "-static", "-Os", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(PAUSE_C)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 and "cannot find -lc" in result.stderr:
        pytest.skip("no static libc (libc6-dev)")
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def running_pause(pause: Path) -> Iterator[subprocess.Popen[str]]:
    """pause started and past its signal setup (it says so on stderr)."""
    proc = subprocess.Popen([str(pause)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("pause: waiting for SIGINT or SIGTERM"), line
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stderr.close()


def test_pause_is_static_and_prints_its_version(pause: Path) -> None:
    """The sandbox image has no libc: the binary is static; -v prints the version and exits 0."""
    result = subprocess.run([str(pause), "-v"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.startswith("pause ")
    assert PT_INTERP not in program_headers(pause), "dynamically linked"


PT_INTERP = 3  # the program header naming the dynamic loader


def program_headers(path: Path) -> list[int]:
    """The p_type of each program header of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert data[4:6] == b"\x02\x01", "not ELF64 little-endian"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_pause_exits_0_on_sigterm_and_sigint(
    running_pause: subprocess.Popen[str], sig: signal.Signals
) -> None:
    """The runtime stops a sandbox with SIGTERM (SIGINT too): pause exits 0 at once."""
    running_pause.send_signal(sig)
    assert running_pause.wait(timeout=DEADLINE) == 0


def test_pause_blocks_every_other_signal(running_pause: subprocess.Popen[str]) -> None:
    """SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM stay pending: only the SIGTERM sent after ends it.

    All are sent before SIGTERM and have lower numbers, so an unblocked one
    would be delivered first and kill pause with its default action.
    """
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM):
        running_pause.send_signal(sig)
    running_pause.send_signal(signal.SIGTERM)
    assert running_pause.wait(timeout=DEADLINE) == 0
    assert running_pause.stderr is not None
    assert "Terminated" in running_pause.stderr.read()


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="a PID namespace needs root and util-linux",
)
def test_pause_as_pid_1_reaps_the_orphans_of_its_namespace(pause: Path) -> None:
    """An orphan re-parented to pause (PID 1 of the pod) is reaped when it exits: no zombie."""
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", str(pause)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert outer.stderr is not None
        assert outer.stderr.readline().startswith("pause: waiting"), "pause did not start"
        (pid,) = children(outer.pid)  # unshare's child is pause, PID 1 inside
        # A shell in pause's namespace leaves a child behind: it becomes pause's.
        subprocess.run(
            ["nsenter", "-t", str(pid), "-p", "--", "sh", "-c", "sleep 1 & exit 0"],
            check=True,
        )
        poll(lambda: len(children(pid)) == 1, "the orphan re-parented to pause")
        (orphan,) = children(pid)
        poll(lambda: not children(pid), f"pause reaping orphan {orphan} (a zombie otherwise)")
        assert not Path(f"/proc/{orphan}").exists()
        os.kill(pid, signal.SIGTERM)
        assert outer.wait(timeout=DEADLINE) == 0
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()
        if outer.stderr is not None:
            outer.stderr.close()


# -- imagetool name: OCI archives named for containerd ------------------------------------


def blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def oci_archive(path: Path, manifests: int = 1) -> dict[str, bytes]:
    """A minimal OCI image layout as a tar (what `buildah push oci-archive:` writes)."""
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}'}
    descriptors = []
    for n in range(manifests):
        digest, data = blob(json.dumps({"schemaVersion": 2, "n": n}).encode())
        files[f"blobs/sha256/{digest[7:]}"] = data
        descriptors.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": len(data),
                "annotations": {"org.opencontainers.image.ref.name": f"localhost/x{n}:e2e"},
            }
        )
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": descriptors}).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return files


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for member in tar:
            content = tar.extractfile(member)
            assert content is not None
            out[member.name] = content.read()
        return out


def imagetool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(IMAGETOOL), *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_name_sets_the_containerd_annotation_and_keeps_every_blob(tmp_path: Path) -> None:
    """`ctr images import` names the image from io.containerd.image.name; blobs stay unchanged."""
    archive = tmp_path / "x.tar"
    before = oci_archive(archive)
    assert imagetool("name", str(archive), "localhost/genericdp:e2e").returncode == 0
    after = members(archive)
    index = json.loads(after.pop("index.json"))
    before.pop("index.json")
    assert after == before
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["io.containerd.image.name"] == "localhost/genericdp:e2e"
    names = imagetool("names", str(archive))
    assert names.stdout.split() == ["localhost/genericdp:e2e"]
    assert not list(tmp_path.glob(".x.tar.*")), "no temporary file left behind"


def test_name_refuses_an_archive_of_several_images_and_leaves_it_alone(tmp_path: Path) -> None:
    """One name for two images would be a lie: a clear error, the archive unchanged."""
    archive = tmp_path / "two.tar"
    oci_archive(archive, manifests=2)
    before = archive.read_bytes()
    result = imagetool("name", str(archive), "localhost/x:e2e")
    assert result.returncode != 0
    assert "2 manifests; expected one image" in result.stderr
    assert "Traceback" not in result.stderr
    assert archive.read_bytes() == before


def test_names_of_something_that_is_not_an_oci_archive_is_a_clear_error(tmp_path: Path) -> None:
    """A docker-archive or any other tar: says what is wrong, no traceback."""
    archive = tmp_path / "docker.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        tar.addfile(info, io.BytesIO(b""))
    result = imagetool("names", str(archive))
    assert result.returncode != 0
    assert "no index.json: not an OCI archive" in result.stderr
    assert "Traceback" not in result.stderr


# -- imagetool pip-config: the build's pip sees this machine's configuration ---------------


def test_pip_config_merges_files_then_environment_and_lists_the_paths_to_mount(
    tmp_path: Path,
) -> None:
    """pip's order (global, user, PIP_CONFIG_FILE, PIP_*); each existing path it names, once.

    A local file:// index is mounted from the directory above it, where its
    relative links (../../files/x.whl) lead.
    """
    xdg = tmp_path / "xdg"
    home = tmp_path / "home"
    (xdg / "pip").mkdir(parents=True)
    (home / ".config" / "pip").mkdir(parents=True)
    cert = tmp_path / "ca.crt"
    cert.write_text("x")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("")
    index = tmp_path / "pypi" / "simple"
    index.mkdir(parents=True)
    (xdg / "pip" / "pip.conf").write_text(
        f"[global]\nconstraint = {constraints}\ntimeout = 1\nretries = 7\n"
    )
    (home / ".config" / "pip" / "pip.conf").write_text(
        f"[global]\ntimeout = 2\nextra-index-url = file://{index} file:///nonexistent/simple\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_DIRS": str(xdg),
        "PIP_DEFAULT_TIMEOUT": "180",
        "PIP_CERT": str(cert),
        "PIP_FIND_LINKS": str(tmp_path / "absent-wheels"),
    }
    out = tmp_path / "pip.conf"
    result = imagetool("pip-config", str(out), env=env)
    assert result.returncode == 0, result.stderr
    merged = out.read_text()
    assert f"constraint = {constraints}\n" in merged
    assert "retries = 7\n" in merged
    assert "timeout = 2\n" in merged  # the user file over the global one
    assert "default-timeout = 180\n" in merged  # PIP_DEFAULT_TIMEOUT, as pip reads it
    assert f"cert = {cert}\n" in merged
    mounts = result.stdout.split()
    assert len(set(mounts)) == len(mounts), "each path once"
    # (/etc/pip.conf is the machine's own and may name more.)
    assert {str(constraints), str(cert), str(tmp_path / "pypi")} <= set(mounts)
    assert not {m for m in mounts if m.startswith(("/nonexistent", str(tmp_path / "absent")))}
    assert str(index) not in mounts


# -- scripts -------------------------------------------------------------------------------

SCRIPTS = sorted(LOCAL.glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_local_script_parses(script: Path) -> None:
    """`bash -n` accepts it; the runnable ones are executable with a bash shebang."""
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    if not script.name.endswith("-lib.sh"):  # sourced, never run
        assert os.access(script, os.X_OK), f"{script.name} is not executable"
        assert script.read_text().startswith("#!/usr/bin/env bash\n")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_local_scripts_pass_shellcheck() -> None:
    """shellcheck (following `source`) finds nothing in e2e/local/*.sh."""
    result = subprocess.run(
        ["shellcheck", "-x", *map(str, SCRIPTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_images_names_match_the_readme() -> None:
    """The image names other scripts and the README use are the ones images.sh builds."""
    lib = (LOCAL / "images-lib.sh").read_text()
    readme = (LOCAL / "README.md").read_text()
    for name in ("localhost/pause:e2e", "localhost/busybox:e2e", "localhost/genericdp:e2e"):
        assert f":-{name}}}" in lib
        assert f"`{name}`" in readme


# -- install-deps.sh: no Debian service starts during the install --------------------------

APT_STUB = """#!/usr/bin/env bash
# apt-get: record the call and what policy-rc.d answers at that moment.
if [[ $1 == install ]]; then
  printf '%s\\n' "$*" >> "$STUBS/apt-get.args"
  "$POLICY_RC_D" containerd start; echo "policy=$?" >> "$STUBS/apt-get.args"
  touch "$STUBS/installed"
fi
exit "${APT_STATUS:-0}"
"""
DPKG_QUERY_STUB = """#!/usr/bin/env bash
# dpkg-query: every package is installed once apt-get "installed" them, or if listed.
pkg=${@: -1}
if [[ -e $STUBS/installed ]] || grep -qx "$pkg" "$STUBS/present" 2>/dev/null; then
  printf 'ii '
else
  printf 'un '
fi
"""


@pytest.fixture
def apt_stubs(tmp_path: Path) -> dict[str, str]:
    """apt-get and dpkg-query stubs first on PATH, and a policy-rc.d path of the test's own."""
    if os.geteuid() != 0:
        pytest.skip("install_deps refuses to install without root")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, text in (("apt-get", APT_STUB), ("dpkg-query", DPKG_QUERY_STUB)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    return {
        "PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "STUBS": str(stubs),
        "POLICY_RC_D": str(tmp_path / "policy-rc.d"),
    }


def install_deps(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LOCAL / "install-deps.sh"), *extra],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_install_deps_forbids_service_starts_during_the_install_only(
    apt_stubs: dict[str, str],
) -> None:
    """policy-rc.d answers 101 while apt-get installs (containerd, etcd stay down), then goes."""
    policy = Path(apt_stubs["POLICY_RC_D"])
    result = install_deps(apt_stubs, "extra-package")
    assert result.returncode == 0, result.stderr
    calls = (Path(apt_stubs["STUBS"]) / "apt-get.args").read_text().splitlines()
    assert calls[-1] == "policy=101"
    assert "containerd" in calls[0].split()
    assert "extra-package" in calls[0].split()
    assert not policy.exists()


def test_install_deps_puts_back_a_policy_it_found_and_drops_its_own_leftover(
    apt_stubs: dict[str, str],
) -> None:
    """A machine's own policy-rc.d is restored as it was; one an interrupted run left is not."""
    policy = Path(apt_stubs["POLICY_RC_D"])
    policy.write_text("#!/bin/sh\nexit 0\n")
    policy.chmod(0o755)
    assert install_deps(apt_stubs).returncode == 0
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert not list(policy.parent.glob("policy-rc.d.saved.*"))

    Path(apt_stubs["STUBS"], "installed").unlink()
    policy.write_text("#!/bin/sh\n# e2e/local/install-deps.sh: no service starts\nexit 101\n")
    assert install_deps(apt_stubs).returncode == 0
    assert not policy.exists()


def test_install_deps_failure_still_removes_the_policy(apt_stubs: dict[str, str]) -> None:
    """A failed apt-get leaves no policy-rc.d behind and says what failed."""
    result = install_deps({**apt_stubs, "APT_STATUS": "100"})
    assert result.returncode != 0
    assert "apt-get install" in result.stderr
    assert not Path(apt_stubs["POLICY_RC_D"]).exists()


def test_install_deps_is_a_no_op_when_everything_is_installed(apt_stubs: dict[str, str]) -> None:
    """Second run: nothing to install, apt-get is not called at all."""
    Path(apt_stubs["STUBS"], "installed").touch()
    assert install_deps(apt_stubs).returncode == 0
    assert not (Path(apt_stubs["STUBS"]) / "apt-get.args").exists()
