"""A real kube-apiserver and etcd on loopback, for the DRA backend's tests.

The binaries: ``kube-apiserver`` (and ``kubectl``) from ``KUBE_BIN_DIR``
(``.ci/run`` unpacks them there with e2e/local/kube-binaries.sh, checked
against pinned sums) and ``etcd`` from ``PATH`` (Debian's ``etcd-server``).
Without them ``missing()`` says what is missing and the tests that need the
server are skipped with that reason.

Everything lives in one temporary directory: etcd's data, certificates made
by openssl (a CA, the server's, an admin client's in ``system:masters``, a
service-account key pair) and an admin kubeconfig. Ports are free ones
picked at random on 127.0.0.1. ``stop`` ends exactly the two processes it
started (their process groups) and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT = 60.0  # seconds; about 3 s here when the machine is idle
KUBE_BIN_ENV = "KUBE_BIN_DIR"


def kube_bin_dir() -> Path | None:
    value = os.environ.get(KUBE_BIN_ENV)
    return Path(value) if value else None


def missing() -> str | None:
    """Why the server cannot start here, or None when it can."""
    bin_dir = kube_bin_dir()
    if bin_dir is None:
        return f"{KUBE_BIN_ENV} is not set (.ci/run unpacks the Kubernetes binaries there)"
    for name in ("kube-apiserver", "kubectl"):
        if not os.access(bin_dir / name, os.X_OK):
            return f"{bin_dir / name} is not an executable ({KUBE_BIN_ENV})"
    if shutil.which("etcd") is None:
        return "etcd is not on PATH (Debian: apt-get install etcd-server)"
    if shutil.which("openssl") is None:
        return "openssl is not on PATH"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificate(pki: Path, name: str, subject: str, san: str | None) -> None:
    ext = pki / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if san:
        lines += ["extendedKeyUsage=serverAuth,clientAuth", f"subjectAltName={san}"]
    else:
        lines.append("extendedKeyUsage=clientAuth")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.crt",
        cwd=pki,
    )  # fmt: skip


def _pki(pki: Path) -> None:
    pki.mkdir()
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=genericdp-test-ca",
        "-days", "2", "-out", "ca.crt", cwd=pki,
    )  # fmt: skip
    _certificate(pki, "apiserver", "/CN=kube-apiserver", "IP:127.0.0.1,DNS:localhost")
    _certificate(pki, "admin", "/O=system:masters/CN=genericdp-test-admin", None)
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def _kubeconfig(path: Path, server: str, pki: Path) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {pki / 'ca.crt'}\n"
        f"users:\n- name: admin\n  user:\n    client-certificate: {pki / 'admin.crt'}\n"
        f"    client-key: {pki / 'admin.key'}\n"
        "contexts:\n- name: test\n  context: {cluster: test, user: admin}\n"
        "current-context: test\n"
    )


@dataclass
class ApiServer:
    """A running kube-apiserver (and its etcd); ``kubeconfig`` is an admin's."""

    url: str
    kubeconfig: Path
    pki: Path
    workdir: Path
    bin_dir: Path
    processes: tuple[subprocess.Popen[bytes], ...]

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        """Run kubectl against this server; its stdout, or an AssertionError with its stderr."""
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def stop(self) -> None:
        for proc in reversed(self.processes):
            _end(proc)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _ready(url: str, pki: Path) -> bool:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(  # noqa: S310 - our own https URL
            f"{url}/readyz", context=context, timeout=2
        ) as answer:
            return bool(answer.read() == b"ok")
    except OSError:
        return False


def _log_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-15:])
    except OSError:
        return "(no log)"


def start() -> ApiServer:
    """Start etcd and kube-apiserver; raise RuntimeError if they do not come up."""
    bin_dir = kube_bin_dir()
    assert bin_dir is not None, missing()
    workdir = Path(tempfile.mkdtemp(prefix="gdp-apiserver-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        pki = workdir / "pki"
        _pki(pki)
        client, peer, secure = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        etcd_args = [
            "etcd",
            "--name",
            "test",
            "--data-dir",
            str(workdir / "etcd"),
            "--listen-client-urls",
            etcd_url,
            "--advertise-client-urls",
            etcd_url,
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"test=http://127.0.0.1:{peer}",
            "--log-level",
            "warn",
            "--unsafe-no-fsync",
        ]
        etcd_log = workdir / "etcd.log"
        with etcd_log.open("wb") as log:
            processes.append(
                subprocess.Popen(
                    etcd_args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        api_args = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={secure}",
            "--service-cluster-ip-range=10.96.0.0/24",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={workdir / 'certs'}",
            "--profiling=false",
            # As kubeadm and kind run it: the chart's privileged variant is accepted.
            "--allow-privileged=true",
        ]
        api_log = workdir / "kube-apiserver.log"
        with api_log.open("wb") as log:
            processes.append(
                subprocess.Popen(
                    api_args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        url = f"https://127.0.0.1:{secure}"
        kubeconfig = workdir / "admin.kubeconfig"
        _kubeconfig(kubeconfig, url, pki)
        deadline = time.monotonic() + START_TIMEOUT
        while not _ready(url, pki):
            for proc, log_path in zip(processes, (etcd_log, api_log), strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{log_path.stem} exited with {proc.returncode}:\n{_log_tail(log_path)}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"kube-apiserver not ready after {START_TIMEOUT}s:\n{_log_tail(api_log)}"
                )
            time.sleep(0.1)
        return ApiServer(url, kubeconfig, pki, workdir, bin_dir, tuple(processes))
    except BaseException:
        for proc in reversed(processes):
            _end(proc)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
