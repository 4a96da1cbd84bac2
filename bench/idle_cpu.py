"""CPU and memory of a real ``genericdp serve`` at rest: what the DaemonSet should request.

Run with ``.venv/bin/python -m bench.idle_cpu [--seconds 30] [--config PATH]``.
Starts ``genericdp serve`` as its own process against the embedded kubelet
(with its PodResources socket, so the release poll runs as on a node), waits
until every resource is registered, then reads its CPU time (the process's
CPU clock, in nanoseconds; reaped children's, health probes and hooks, from
``/proc/<pid>/stat``) at the start and the end of a quiet window. Prints
millicores, resident memory and the peak, and the CPU the start itself took. The default config is
``configs/examples/demo.yaml``, whose devices exist on every Linux machine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from genericdp.config import load  # noqa: E402
from genericdp.kubelet.embedded import EmbeddedKubelet  # noqa: E402

DEMO = REPO / "configs" / "examples" / "demo.yaml"
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds of a process and of its reaped children, at a wall time."""

    at: float
    own: float
    children: float


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of every thread ``pid`` ever ran, ended ones too, to the nanosecond.

    The kernel's CPU-time clock of the process (``clock_getcpuclockid``,
    which Python lacks: the clock ID is ``(~pid << 3) | 2``, CPUCLOCK_SCHED
    of a whole process). ``/proc/<pid>/stat`` counts clock ticks (10 ms:
    0.3 millicores over a 30 s window), and summing ``task/*/schedstat``
    loses a thread that ends within the window, with all it ever ran: gRPC
    ends idle pool threads after 20 s.
    """
    return time.clock_gettime(((~pid) << 3) | 2)


def cpu_sample(pid: int, proc_root: Path = Path("/proc")) -> CpuSample:
    stat = (proc_root / str(pid) / "stat").read_text()
    # ``pid (comm) state ...``: comm may hold spaces, so split after the last ')'.
    # cutime, cstime (reaped children, ticks) are fields 16-17 of the whole line.
    fields = stat[stat.rfind(")") + 2 :].split()
    cutime, cstime = (int(f) for f in fields[13:15])
    return CpuSample(
        at=time.monotonic(), own=process_cpu_seconds(pid), children=(cutime + cstime) / TICKS
    )


def memory_mib(pid: int, key: str, proc_root: Path = Path("/proc")) -> float:
    """``VmRSS`` or ``VmHWM`` (the peak) from /proc/<pid>/status, in MiB."""
    status = (proc_root / str(pid) / "status").read_text()
    kib = next(int(x.split()[1]) for x in status.splitlines() if x.startswith(f"{key}:"))
    return kib / 1024


def serve_env(base: Path) -> dict[str, str]:
    """The environment of a benchmarked ``genericdp serve``: nothing of the host's kubelet.

    Every directory and socket setting points under ``base`` (the caller's
    flags may name the plugin dir and PodResources socket again): a daemon
    that starts cleans stale ``genericdp-*.json`` from its CDI directory, so a
    bench on the host's ``/var/run/cdi`` deleted a real node's specs.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    env["GENERICDP_METRICS_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["GENERICDP_PLUGIN_DIR"] = str(base / "dp")
    env["GENERICDP_POD_RESOURCES_SOCKET"] = str(base / "pr" / "kubelet.sock")
    env["GENERICDP_CDI_DIR"] = str(base / "cdi")
    env["GENERICDP_DRA_REGISTRATION_DIR"] = str(base / "plugins_registry")
    env["GENERICDP_DRA_PLUGINS_DIR"] = str(base / "plugins")
    env["GENERICDP_STATE_DIR"] = str(base / "state")
    return env


def containerfile_lines() -> list[str]:
    """The Containerfile's instructions, continuation lines joined."""
    return (REPO / "Containerfile").read_text().replace("\\\n", " ").splitlines()


def image_env() -> dict[str, str]:
    """The interpreter and allocator settings the image runs the daemon with: the
    ``PYTHON*`` and ``MALLOC_*`` variables of the Containerfile's last ``ENV``."""
    last = [line for line in containerfile_lines() if line.startswith("ENV ")][-1]
    pairs = (word.split("=", 1) for word in shlex.split(last[4:]) if "=" in word)
    return {k: v for k, v in pairs if k.startswith(("PYTHON", "MALLOC_"))}


def image_warmup() -> str:
    """The Python the image's build runs to write the standard library's bytecode
    (the ``python -c`` of the RUN that sets PYTHONPYCACHEPREFIX)."""
    for line in containerfile_lines():
        if line.startswith("RUN ") and "PYTHONPYCACHEPREFIX" in line and " -c " in line:
            return shlex.split(line.split(" -c ", 1)[1])[0]
    raise LookupError("Containerfile: no RUN that writes the bytecode with python -c")


@functools.cache
def daemon_env() -> dict[str, str]:
    """What a benchmarked daemon runs with besides :func:`serve_env`: what the image
    runs it with (its ``PYTHON*`` and ``MALLOC_*`` settings), from bytecode compiled
    the way the image's build compiles it, writing none.

    The image keeps all its bytecode under one ``PYTHONPYCACHEPREFIX``; the
    bench uses a prefix of its own and fills it as the build does: the package,
    then whatever the build's import line imports (the standard library and the
    dependencies). A prefix hides every ``__pycache__`` beside the sources: when
    only the package was compiled into it, the first daemon from a new checkout
    compiled every dependency from source, and the compiler's garbage left it
    3-7 MiB larger than the next one.
    """
    env = image_env()
    level = {"": "0", "1": "1", "2": "2"}[env.get("PYTHONOPTIMIZE", "")]
    prefix = Path(tempfile.gettempdir()) / f"gdp-bench-pycache-{os.getuid()}"
    env["PYTHONPYCACHEPREFIX"] = str(prefix) if "PYTHONPYCACHEPREFIX" in env else ""
    build = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    build |= {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    package = str(REPO / "src" / "genericdp")
    compileall = [sys.executable, "-m", "compileall", "-q", "-o", level, package]
    subprocess.run(compileall, env=build, check=True)
    subprocess.run([sys.executable, "-c", image_warmup()], env=build, check=True)
    return env


def free_port() -> int:
    """A loopback port for the metrics server, so two runs never collide on 9090."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(config: Path, seconds: float) -> None:
    names = [r.name for r in load([config]).resources]
    # /tmp, not the CWD: a unix socket path must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="gdp-idle-", dir="/tmp") as tmp:
        plugin_dir = Path(tmp) / "dp"
        pod_resources = Path(tmp) / "pr" / "kubelet.sock"
        env = serve_env(Path(tmp)) | daemon_env()
        async with EmbeddedKubelet(plugin_dir, pod_resources_socket=pod_resources) as kubelet:
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "genericdp", "serve",
                "--config", str(config),
                "--plugin-dir", str(plugin_dir),
                "--pod-resources-socket", str(pod_resources),
                "--log-level", "warning",
                env=env,
            )  # fmt: skip
            try:
                await kubelet.wait_until(
                    lambda k: all(n in k.resources and k.resources[n].connected for n in names),
                    60,
                )
                registered = cpu_sample(proc.pid)
                await asyncio.sleep(seconds)  # the measurement window itself
                end = cpu_sample(proc.pid)
                rss, peak = memory_mib(proc.pid, "VmRSS"), memory_mib(proc.pid, "VmHWM")
            finally:
                proc.terminate()
                await proc.wait()
    window = end.at - registered.at
    own = (end.own - registered.own) / window * 1000
    children = (end.children - registered.children) / window * 1000
    print(f"config: {config} ({len(names)} resource(s))")
    print(
        f"start -> all registered: {registered.at - started:.2f} s wall, {registered.own:.2f} s CPU"
    )
    print(
        f"idle over {window:.1f} s: {own:.2f} millicores (daemon), {children:.2f} (probes, hooks)"
    )
    print(f"memory: {rss:.1f} MiB resident now, {peak:.1f} MiB peak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the idle window")
    parser.add_argument("--config", type=Path, default=DEMO, help="config file or directory")
    args = parser.parse_args()
    asyncio.run(measure(args.config, args.seconds))


if __name__ == "__main__":
    main()
