"""SieveMQ beside RabbitMQ 3.10.8 in one run: publish-with-confirms, consume, end-to-end latency.

Drives the Go load generator of ``../shared/peers`` (real amqp091-go client) against both
brokers, interleaving the runs so machine noise hits both alike, and prints one JSON document
with the medians, the server CPU per message and the SieveMQ/RabbitMQ ratios.

    python -m bench.vs_rabbitmq [--repeats 3] [--n 200000] [--no-rabbitmq] [--raw FILE]

Ratios are SieveMQ / RabbitMQ of the medians: above 1 is better for msgs/s, below 1 is
better for latency and CPU per message. ``machine_stall_max_ms`` is the worst oversleep of
a 0.5 ms sleep loop in this process during the run: a large value means the VM stalled
everything, and that run's latency tail says more about the machine than the broker.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._util import machine, proc_cpu_s, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "peers"
LOADGEN = PEERS / "bin" / "loadgen"


@contextmanager
def sievemq_server(fsync: str) -> Iterator[tuple[int, int]]:
    """Start `sievemq serve` on free ports; yields (amqp port, pid)."""
    data = Path(tempfile.mkdtemp(prefix="sievemq-bench-"))
    server = start_server(data, fsync)
    try:
        yield server.port, server.pid
    finally:
        stop_server(server)
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


class StallProbe:
    """Sleeps 0.5 ms in a loop and records the worst oversleep: machine stalls (steal, other
    jobs) that hit every process alike, so a bad latency tail can be told from our own."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.0005)
            self.worst = max(self.worst, time.perf_counter() - t - 0.0005)

    def __enter__(self) -> StallProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def loadgen(port: int, pid: int, *args: object) -> dict[str, Any]:
    """One loadgen run; adds the server's CPU per message and the worst machine stall."""
    before = proc_cpu_s(pid)
    with StallProbe() as probe:
        out = subprocess.run(
            [str(LOADGEN), "-port", str(port), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    cpu = proc_cpu_s(pid) - before
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    msgs = result.get("published") or result.get("consumed") or 0
    result["server_cpu_s"] = round(cpu, 3)
    result["machine_stall_max_ms"] = round(probe.worst * 1e3, 2)
    if msgs:
        result["server_cpu_us_per_msg"] = round(cpu / msgs * 1e6, 2)
        result["client_cpu_us_per_msg"] = round(result.get("client_cpu_s", 0) / msgs * 1e6, 2)
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


_COMMON = ["server_cpu_us_per_msg", "client_cpu_us_per_msg", "machine_stall_max_ms"]
KEYS = {
    "publish": ["pub_msgs_per_s", "pub_MB_per_s", *_COMMON],
    "consume": ["cons_msgs_per_s", "cons_MB_per_s", *_COMMON],
    "e2e": ["lat_p50_us", "lat_p99_us", *_COMMON],
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
    parser.add_argument("--raw", help="also write every run's loadgen JSON to this file")
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
            # medians of each broker's runs, all taken in this one interleaved session
            ours, theirs = summary[name]["sievemq"], summary[name]["rabbitmq"]
            ratios = {}
            for key in (*KEYS[kind][:2], "server_cpu_us_per_msg"):
                if ours[key] and theirs[key]:
                    ratios[key] = round(ours[key] / theirs[key], 3)
            summary[name]["ratio_sievemq_over_rabbitmq"] = ratios
    if args.raw:
        Path(args.raw).write_text(json.dumps(runs, indent=1))
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": _commit(),
                "machine": machine(),
                "n": args.n,
                "repeats": args.repeats,
                "fsync": args.fsync,
                "results": summary,
            },
            indent=2,
        )
    )


def _commit() -> str:
    got = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return got.stdout.strip()


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
