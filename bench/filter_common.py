"""Shared by the filtering benchmarks: a real `sievemq serve` process, its CPU, loadgen, and
filling a stream directly with ``sievemq.storage`` in the server's data-dir layout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika

from sievemq.gateway.definitions import stream_directory

ROOT = Path(__file__).resolve().parents[1]
LOADGEN = ROOT.parent / "shared" / "peers" / "bin" / "loadgen"
CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


@dataclass
class Server:
    process: subprocess.Popen[str]
    port: int
    data_dir: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


def start(data_dir: Path) -> Server:
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
            "never",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("sievemq ready"):
        proc.kill()
        raise RuntimeError(f"sievemq did not start: {line!r}")
    port = int(line.split("amqp=")[1].split()[0].rsplit(":", 1)[1])
    return Server(proc, port, data_dir)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(60)


@contextmanager
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sievemq-filter-bench-"))
    try:
        yield path / "data"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def declare(server: Server, name: str, **arguments: Any) -> Path:
    """Declare a stream through AMQP; returns its directory in the server's data dir."""
    conn = pika.BlockingConnection(pika.URLParameters(server.url))
    conn.channel().queue_declare(
        name, durable=True, arguments={"x-queue-type": "stream", **arguments}
    )
    conn.close()
    return stream_directory(server.data_dir, "/", name)


def loadgen(server: Server, *args: object) -> dict[str, Any]:
    """One loadgen run (Go amqp091 client); adds the server's CPU seconds."""
    before = proc_cpu_s(server.pid)
    out = subprocess.run(
        [str(LOADGEN), "-port", str(server.port), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
    result: dict[str, Any] = json.loads(line)
    if "error" in result or out.returncode:
        raise RuntimeError(f"loadgen failed: {out.stdout} {out.stderr}")
    result["server_cpu_s"] = round(proc_cpu_s(server.pid) - before, 3)
    return result
