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
started (their process groups) and removes the directory. ``kill`` and
``restart`` end and start kube-apiserver alone, on the same port and etcd
(the fleet benchmark's API server restart); ``start(extra_args)`` adds flags
(audit log, token file).
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
from collections.abc import Sequence
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
    processes: tuple[subprocess.Popen[bytes], ...]  # etcd, kube-apiserver
    api_args: tuple[str, ...] = ()

    @property
    def etcd(self) -> subprocess.Popen[bytes]:
        return self.processes[0]

    @property
    def apiserver(self) -> subprocess.Popen[bytes]:
        return self.processes[-1]

    def kill(self) -> None:
        """SIGKILL kube-apiserver (etcd keeps running) and wait for it to be gone."""
        _end(self.apiserver, sig=signal.SIGKILL)

    def restart(self, *, wait: bool = True) -> None:
        """Start kube-apiserver again with the same flags, port and etcd; with ``wait``,
        return once it is ready (else call ``wait_ready``)."""
        if self.apiserver.poll() is None:
            self.kill()
        proc = _launch(list(self.api_args), self.workdir / "kube-apiserver.log")
        self.processes = (self.etcd, proc)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Until kube-apiserver is ready; RuntimeError (and it ended) if it exits or is late."""
        try:
            _wait_ready(self.url, self.pki, [(self.apiserver, self.workdir / "kube-apiserver.log")])
        except BaseException:
            _end(self.apiserver)
            raise

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


def _end(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
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


def _launch(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``args`` in a process group of its own, its output appended to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_ready(url: str, pki: Path, watched: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """Until kube-apiserver's /readyz says ok; RuntimeError when a process exits or time is up."""
    deadline = time.monotonic() + START_TIMEOUT
    while not _ready(url, pki):
        for proc, log_path in watched:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{log_path.stem} exited with {proc.returncode}:\n{_log_tail(log_path)}"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"kube-apiserver not ready after {START_TIMEOUT}s:\n{_log_tail(watched[-1][1])}"
            )
        time.sleep(0.1)


def start(extra_args: Sequence[str] = ()) -> ApiServer:
    """Start etcd and kube-apiserver (``extra_args`` appended to the latter's flags);
    raise RuntimeError if they do not come up."""
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
        processes.append(_launch(etcd_args, etcd_log))
        api_args = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={secure}",
            "--service-cluster-ip-range=198.18.0.0/24",
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
            *extra_args,
        ]
        api_log = workdir / "kube-apiserver.log"
        processes.append(_launch(api_args, api_log))
        url = f"https://127.0.0.1:{secure}"
        kubeconfig = workdir / "admin.kubeconfig"
        _kubeconfig(kubeconfig, url, pki)
        _wait_ready(url, pki, list(zip(processes, (etcd_log, api_log), strict=True)))
        return ApiServer(
            url, kubeconfig, pki, workdir, bin_dir, tuple(processes), api_args=tuple(api_args)
        )
    except BaseException:
        for proc in reversed(processes):
            _end(proc)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
