"""SieveMQ beside RabbitMQ 3.10.8 in one run: publish-with-confirms, consume, end-to-end latency.

Drives the Go load generator of ``../shared/peers`` (real amqp091-go client) against both
brokers, interleaving the runs so machine noise hits both alike, and prints one JSON document
with the medians, the server CPU per message and the SieveMQ/RabbitMQ ratios.

    python -m bench.vs_rabbitmq [--repeats 3] [--n 200000] [--no-rabbitmq]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "peers"
LOADGEN = PEERS / "bin" / "loadgen"
CLK = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    """utime+stime of a process and its reaped children, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK


@contextmanager
def sievemq_server(fsync: str) -> Iterator[tuple[int, int]]:
    """Start `sievemq serve` on free ports; yields (amqp port, pid)."""
    data = tempfile.mkdtemp(prefix="sievemq-bench-")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            data,
            "--amqp-port",
            "0",
            "--admin-port",
            "0",
            "--fsync",
            fsync,
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
    try:
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def rabbitmq_server() -> Iterator[tuple[int, int]]:
    """Start the private RabbitMQ 3.10.8 peer on 5682; yields (port, beam pid)."""
    subprocess.run([str(PEERS / "rabbitmq.sh"), "start"], check=True, capture_output=True)
    pid = int(Path("/tmp/peers-rabbitmq-5682/rabbitmq.pid").read_text().strip())
    try:
        yield 5682, pid
    finally:
        subprocess.run([str(PEERS / "rabbitmq.sh"), "stop"], capture_output=True)


def loadgen(port: int, pid: int, *args: object) -> dict[str, Any]:
    """One loadgen run; adds the server's CPU per message."""
    before = _proc_cpu_s(pid)
    out = subprocess.run(
        [str(LOADGEN), "-port", str(port), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    cpu = _proc_cpu_s(pid) - before
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    msgs = result.get("published") or result.get("consumed") or 0
    result["server_cpu_s"] = round(cpu, 3)
    if msgs:
        result["server_cpu_us_per_msg"] = round(cpu / msgs * 1e6, 2)
    return result


def scenarios(n: int) -> dict[str, list[object]]:
    return {
        "publish_100B": ["-mode", "publish", "-n", n, "-size", 100, "-window", 1000],
        "publish_1KiB": ["-mode", "publish", "-n", n, "-size", 1024, "-window", 1000],
        "e2e_1000_per_s": [
            "-mode",
            "both",
            "-n",
            10000,
            "-size",
            100,
            "-rate",
            1000,
            "-window",
            1000,
            "-prefetch",
            1000,
            "-ack-every",
            1,
        ],
    }


def consume_runs(port: int, pid: int, n: int, size: int, repeats: int) -> list[dict[str, Any]]:
    queue = f"bench-consume-{size}-{time.time_ns()}"
    loadgen(
        port,
        pid,
        "-mode",
        "publish",
        "-queue",
        queue,
        "-keep",
        "-n",
        n,
        "-size",
        size,
        "-window",
        1000,
    )
    runs = [
        loadgen(
            port,
            pid,
            "-mode",
            "consume",
            "-queue",
            queue,
            "-no-declare",
            "-keep",
            "-m",
            n,
            "-prefetch",
            1000,
            "-offset",
            "first",
        )
        for _ in range(repeats)
    ]
    loadgen(port, pid, "-mode", "consume", "-queue", queue, "-m", 1, "-prefetch", 10)
    return runs


KEYS = {
    "publish": ["pub_msgs_per_s", "pub_MB_per_s", "server_cpu_us_per_msg"],
    "consume": ["cons_msgs_per_s", "cons_MB_per_s", "server_cpu_us_per_msg"],
    "e2e": ["lat_p50_us", "lat_p99_us", "server_cpu_us_per_msg"],
}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--fsync", default="batch")
    parser.add_argument("--no-rabbitmq", action="store_true")
    args = parser.parse_args()
    if not LOADGEN.exists():
        subprocess.run([str(PEERS / "loadgen" / "build.sh")], check=True)

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    brokers = ["sievemq"] if args.no_rabbitmq else ["sievemq", "rabbitmq"]
    with sievemq_server(args.fsync) as sieve:
        servers = {"sievemq": sieve}
        with rabbitmq_server() if not args.no_rabbitmq else _nothing() as rabbit:
            if rabbit:
                servers["rabbitmq"] = rabbit
            for _ in range(args.repeats):
                for name, scenario in scenarios(args.n).items():
                    for broker in brokers:
                        port, pid = servers[broker]
                        result = loadgen(port, pid, *scenario)
                        runs.setdefault(name, {}).setdefault(broker, []).append(result)
            for size in (100, 1024):
                for broker in brokers:
                    port, pid = servers[broker]
                    runs.setdefault(f"consume_{size}B", {})[broker] = consume_runs(
                        port, pid, args.n, size, args.repeats
                    )

    summary: dict[str, Any] = {}
    for name, by_broker in runs.items():
        kind = name.split("_")[0]
        summary[name] = {
            broker: {key: _median(r, key) for key in KEYS[kind]} for broker, r in by_broker.items()
        }
        if "rabbitmq" in by_broker:
            rate = KEYS[kind][0]
            s, r = summary[name]["sievemq"][rate], summary[name]["rabbitmq"][rate]
            if s and r:
                summary[name]["ratio_sievemq_over_rabbitmq"] = round(s / r, 3)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "n": args.n,
                "repeats": args.repeats,
                "fsync": args.fsync,
                "results": summary,
            },
            indent=2,
        )
    )


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
