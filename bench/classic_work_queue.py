"""Work queue on a durable classic queue, SieveMQ beside RabbitMQ 3.10.8 in one run.

Per repeat and broker (interleaved, so noise hits both alike): declare a durable classic
queue, publish N persistent messages with confirms (window 1000, Go loadgen of
``bench/loadgen``), then consume them with manual acks (prefetch 1000, ack multiple every
500). Prints one JSON document: medians of msgs/s and server CPU per message, and the
SieveMQ/RabbitMQ ratios (above 1 is better for msgs/s, below 1 for CPU per message).

    python -m bench.classic_work_queue [--repeats 3] [--n 100000] [--size 100] [--no-rabbitmq]
"""

from __future__ import annotations

import argparse
import json
import statistics
from contextlib import ExitStack
from typing import Any

import pika

from bench._util import machine
from bench.vs_rabbitmq import _commit, loadgen, rabbitmq_server, sievemq_server


def declare(port: int, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/"))
    ch = conn.channel()
    ch.queue_delete(queue)
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})
    conn.close()


def one_round(port: int, pid: int, n: int, size: int, queue: str) -> dict[str, Any]:
    declare(port, queue)
    common = ["-queue", queue, "-no-declare", "-keep"]
    pub = loadgen(
        port, pid, "-mode", "publish", "-n", n, "-size", size, "-window", 1000,
        "-persistent", *common,
    )  # fmt: skip
    con = loadgen(
        port, pid, "-mode", "consume", "-m", n, "-prefetch", 1000, "-ack-every", 500,
        "-offset", "", "-idle", "3s", *common,
    )  # fmt: skip
    return {"publish": pub, "consume": con}


def _median(runs: list[dict[str, Any]], phase: str, key: str) -> float | None:
    values = [r[phase][key] for r in runs if key in r[phase]]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--fsync", default="batch")
    parser.add_argument("--no-rabbitmq", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"sievemq": [], "rabbitmq": []}
    with ExitStack() as stack:
        brokers = {"sievemq": stack.enter_context(sievemq_server(args.fsync))}
        if not args.no_rabbitmq:
            brokers["rabbitmq"] = stack.enter_context(rabbitmq_server())
        for i in range(args.repeats):
            for name, (port, pid) in brokers.items():
                runs[name].append(one_round(port, pid, args.n, args.size, f"bench-work-{i}"))
    summary: dict[str, Any] = {}
    for name, got in runs.items():
        if not got:
            continue
        summary[name] = {
            "publish_msgs_per_s": _median(got, "publish", "pub_msgs_per_s"),
            "publish_server_cpu_us_per_msg": _median(got, "publish", "server_cpu_us_per_msg"),
            "confirm_p50_us": _median(got, "publish", "confirm_p50_us"),
            "consume_msgs_per_s": _median(got, "consume", "cons_msgs_per_s"),
            "consume_server_cpu_us_per_msg": _median(got, "consume", "server_cpu_us_per_msg"),
        }
    ratios = {}
    if "rabbitmq" in summary:
        for key, value in summary["sievemq"].items():
            other = summary["rabbitmq"][key]
            if value and other:
                ratios[key] = round(value / other, 2)
    print(
        json.dumps(
            {
                "bench": "classic_work_queue",
                "commit": _commit(),
                "n": args.n,
                "size": args.size,
                "fsync": args.fsync,
                "repeats": args.repeats,
                "machine": machine(),
                "summary": summary,
                "ratio_sievemq_over_rabbitmq": ratios,
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
