"""Shared bits for the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """``git describe`` of this checkout (``-dirty`` with uncommitted changes): what ran. A copy
    without its own history (a lent machine) names it in ``SIEVEMQ_BENCH_COMMIT`` instead."""
    if named := os.environ.get("SIEVEMQ_BENCH_COMMIT"):
        return named
    got = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=7"],
        capture_output=True,
        text=True,
    )
    return got.stdout.strip()


def report(bench: str, out: Path | None, **fields: Any) -> None:
    """Print a bench's JSON result (and write it to ``out``): its name, the commit, the
    machine and its load, then ``fields``."""
    result = {
        "bench": bench,
        "commit": git_commit(),
        "machine": machine(),
        "load_average": os.getloadavg(),
        **fields,
    }
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n")
    print(text)


def export_src(rev: str, into: Path) -> Path:
    """``git archive REV src`` unpacked into ``into``: a baseline tree to run beside this one.
    Returns ``into / "src"`` (what goes on PYTHONPATH)."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """cProfile over the block, its stats written to ``path`` (no profiler without one)."""
    if not path:
        yield
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)


def in_process_node(prefix: str, durability: str) -> tuple[Path, Any, Any]:
    """A path bench's server in this process, on this event loop: a fresh data directory
    (``prefix``), its broker (``Durability[durability]``) and its node."""
    from sievemq.gateway.model.broker import Broker, BrokerSettings
    from sievemq.gateway.runtime.node import Limits, Node
    from sievemq.storage import Durability

    data = Path(tempfile.mkdtemp(prefix=prefix))
    broker = Broker(data, BrokerSettings(durability=Durability[durability]))
    node = Node(broker, Limits(), asyncio.get_running_loop())
    return data, broker, node


def shut_down(protocol: Any, broker: Any, node: Any, data: Path) -> None:
    """An in-process server of a path bench gone: its connection lost, its vhosts closed,
    its executor joined, its data directory removed."""
    protocol.connection_lost(None)
    for vhost in broker.vhosts.values():
        vhost.close()
    node.executor.shutdown(wait=True)
    shutil.rmtree(data, ignore_errors=True)


def median_of(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def now() -> float:
    return time.perf_counter()


CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process and its reaped children, from /proc (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK


@dataclass
class Server:
    process: subprocess.Popen[str]
    port: int
    data_dir: Path
    admin: str = ""  # the admin HTTP base URL from the ready line
    stream_port: int = 0  # the stream-protocol listener (0: a baseline without one)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


def start_server(
    data_dir: Path,
    fsync: str = "never",
    src: Path | None = None,
    stderr_path: Path | None = None,
) -> Server:
    """`sievemq serve` on free ports with its data in `data_dir`, once it printed ready.

    ``src``: run the sievemq package found in that source folder instead (a baseline);
    ``stderr_path``: where the server's stderr goes.
    """
    # the stream-protocol listeners on free ports too (5552 may be another server's); set
    # through the environment, which a baseline from before those settings ignores
    env = dict(os.environ, SIEVEMQ_STREAM_PORT="0", SIEVEMQ_STREAM_TLS_PORT="0")
    if src is not None:
        env["PYTHONPATH"] = str(src)
    stderr = open(stderr_path, "w") if stderr_path is not None else None  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(data_dir),
            "--amqp-port",
            "0",
            "--admin-port",
            "0",
            "--fsync",
            fsync,
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    if stderr is not None:
        stderr.close()  # the child has its own copy
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("sievemq ready"):
        proc.kill()
        raise RuntimeError(f"sievemq did not start: {line!r}")
    port = int(line.split("amqp=")[1].split()[0].rsplit(":", 1)[1])
    admin = line.split("admin=")[1].split()[0] if "admin=" in line else ""
    stream = int(line.split("stream=")[1].split()[0].rsplit(":", 1)[1]) if "stream=" in line else 0
    return Server(proc, port, data_dir, admin, stream)


def stop_server(server: Server, timeout: float = 60.0) -> float:
    """SIGTERM and wait; returns the seconds the server took to exit."""
    started = time.perf_counter()
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout)
    return time.perf_counter() - started
