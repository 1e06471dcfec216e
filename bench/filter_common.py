"""Shared by the filtering benchmarks: a real `sievemq serve` process, its CPU, loadgen, and
filling a stream directly with ``sievemq.storage`` in the server's data-dir layout."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika

from bench import kit
from bench._util import Server, proc_cpu_s
from sievemq.gateway.model.definitions import stream_directory

ROOT = Path(__file__).resolve().parents[1]


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
    """One loadgen run (bench/loadgen, Go amqp091 client); adds the server's CPU seconds."""
    before = proc_cpu_s(server.pid)
    out = subprocess.run(
        [str(kit.loadgen()), "-port", str(server.port), *map(str, args)],
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
