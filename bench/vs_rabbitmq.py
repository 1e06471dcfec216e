"""SieveMQ beside RabbitMQ 3.10.8 in one run: publish-with-confirms, consume, end-to-end latency.

Drives this repository's Go load generator (``bench/loadgen``, the real amqp091-go client)
against SieveMQ and Debian's RabbitMQ (``bench/rabbitmq.sh``; both built or installed on first
use, see ``bench/kit.py``), interleaving the runs so machine noise hits both alike, and prints
one JSON document with the medians, the server CPU per message and the SieveMQ/RabbitMQ ratios.

    python -m bench.vs_rabbitmq [--repeats 3] [--n 200000] [--no-rabbitmq] [--raw FILE]
                                [--only publish,consume,e2e] [--rabbitmq-port 0] [--peers]

``--peers`` uses the older kit beside the checkout (``../shared/peers``: its loadgen and its
RabbitMQ on port 5682 unless ``--rabbitmq-port`` says otherwise).

Every publish and consume scenario runs with two kinds of messages: ``identical`` (every
message the same property list, no headers: what memo caches keyed by the bytes hit) and
``unique`` (loadgen ``-unique-props -filter-values 50``: every message its own message-id,
timestamp, content-type and ``seq`` header, plus one of 50 ``x-stream-filter-value``s, as an
application sends them). Scenario names end in ``_unique`` for the second kind.

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

from bench import kit
from bench._util import export_src, git_commit, machine, proc_cpu_s, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
# the RabbitMQ of the comparison (bench/rabbitmq.sh, or ../shared/peers with --peers)
rabbitmq_server = kit.rabbitmq_server
UNIQUE = ["-unique-props", "-filter-values", 50]  # loadgen flags of the ``unique`` kind


@contextmanager
def sievemq_server(fsync: str, src: Path | None = None) -> Iterator[tuple[int, int]]:
    """Start `sievemq serve` (from ``src`` if given) on free ports; yields (amqp port, pid)."""
    data = Path(tempfile.mkdtemp(prefix="sievemq-bench-"))
    server = start_server(data, fsync, src)
    try:
        yield server.port, server.pid
    finally:
        stop_server(server)
        shutil.rmtree(data, ignore_errors=True)


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
            [str(kit.loadgen()), "-port", str(port), *map(str, args)],
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
    publish_100 = ["-mode", "publish", "-n", n, "-size", 100, "-window", 1000]
    publish_1k = ["-mode", "publish", "-n", n, "-size", 1024, "-window", 1000]
    return {
        "publish_100B": publish_100,
        "publish_100B_unique": [*publish_100, *UNIQUE],
        "publish_1KiB": publish_1k,
        "publish_1KiB_unique": [*publish_1k, *UNIQUE],
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


def consume_runs(
    port: int, pid: int, n: int, size: int, repeats: int, props: list[object]
) -> list[dict[str, Any]]:
    """Fill one stream (with ``props``: loadgen flags of the message kind), read it
    ``repeats`` times from the first offset, delete it."""
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
        *props,
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
    parser.add_argument(
        "--only", default="publish,consume,e2e", help="comma-separated scenario kinds to run"
    )
    parser.add_argument(
        "--rabbitmq-port", type=int, default=0, help="0: a free port (5682 with --peers)"
    )
    parser.add_argument("--peers", action="store_true", help="use ../shared/peers' kit")
    parser.add_argument(
        "--baseline",
        metavar="COMMIT",
        help="also run SieveMQ at this commit (git archive into a temp dir) as 'sievemq_baseline',"
        " interleaved in the same session: before/after from one run",
    )
    args = parser.parse_args()
    kinds = set(args.only.split(","))
    commit = git_commit()  # what the servers run: taken before anything starts
    kit.use_peers(args.peers)
    kit.loadgen()  # built now if missing, not inside a timed run

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    brokers = ["sievemq"] if args.no_rabbitmq else ["sievemq", "rabbitmq"]
    if args.baseline:
        brokers.insert(1, "sievemq_baseline")
    with (
        sievemq_server(args.fsync) as sieve,
        _baseline_server(args.baseline, args.fsync) as base,
        rabbitmq_server(args.rabbitmq_port) if not args.no_rabbitmq else _nothing() as rabbit,
    ):
        servers = {"sievemq": sieve}
        if base:
            servers["sievemq_baseline"] = base
        if rabbit:
            servers["rabbitmq"] = rabbit
        for _ in range(args.repeats):
            for name, scenario in scenarios(args.n).items():
                if name.split("_")[0] not in kinds:
                    continue
                for broker in brokers:
                    port, pid = servers[broker]
                    result = loadgen(port, pid, *scenario)
                    runs.setdefault(name, {}).setdefault(broker, []).append(result)
        for size in (100, 1024) if "consume" in kinds else ():
            for suffix, props in (("", []), ("_unique", UNIQUE)):
                for broker in brokers:
                    port, pid = servers[broker]
                    runs.setdefault(f"consume_{size}B{suffix}", {})[broker] = consume_runs(
                        port, pid, args.n, size, args.repeats, props
                    )

    summary: dict[str, Any] = {}
    for name, by_broker in runs.items():
        kind = name.split("_")[0]
        summary[name] = {
            broker: {key: _median(r, key) for key in KEYS[kind]} for broker, r in by_broker.items()
        }
        # medians of each broker's runs, all taken in this one interleaved session
        for other, label in (
            ("rabbitmq", "ratio_sievemq_over_rabbitmq"),
            ("sievemq_baseline", "ratio_sievemq_over_baseline"),
        ):
            if other in by_broker:
                ours, theirs = summary[name]["sievemq"], summary[name][other]
                ratios = {}
                for key in (*KEYS[kind][:2], "server_cpu_us_per_msg"):
                    if ours[key] and theirs[key]:
                        ratios[key] = round(ours[key] / theirs[key], 3)
                summary[name][label] = ratios
        if "rabbitmq" in by_broker and "sievemq_baseline" in by_broker:
            base, theirs = summary[name]["sievemq_baseline"], summary[name]["rabbitmq"]
            key = KEYS[kind][0]
            if base[key] and theirs[key]:
                summary[name]["ratio_baseline_over_rabbitmq"] = {
                    key: round(base[key] / theirs[key], 3)
                }
    if args.raw:
        Path(args.raw).write_text(json.dumps(runs, indent=1))
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": commit,
                "baseline": args.baseline,
                "machine": machine(),
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


@contextmanager
def _baseline_server(commit: str | None, fsync: str) -> Iterator[tuple[int, int] | None]:
    """SieveMQ's source at ``commit`` in a temp dir, served beside the current one."""
    if commit is None:
        yield None
        return
    tree = Path(tempfile.mkdtemp(prefix="sievemq-baseline-"))
    try:
        with sievemq_server(fsync, export_src(commit, tree)) as server:
            yield server
    finally:
        shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    main()
