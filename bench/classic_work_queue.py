"""Classic queues, SieveMQ beside RabbitMQ 3.10.8 in one run.

Per repeat and broker (interleaved, so noise hits both alike), on a durable classic queue:

* work queue: publish N persistent messages with confirms (window 1000, the Go loadgen of
  ``bench/loadgen``, see ``bench/kit.py``), then consume them with manual acks (prefetch
  1000, ack multiple every 500) by one consumer or by four at once (four loadgen processes,
  N/4 each: the rate is N over the wall time of the four), at each body size;
* RPC: sequential round trips from a client (pika) over an exclusive, server-named reply queue
  to a responder in another process that consumes a request queue and answers each request
  (reply_to + correlation_id): p50 and p99 of the round trip.

Then, once per broker, a deep queue: publish ``--deep`` persistent messages with confirms, then
drain them; publish and drain rates, and the server's peak resident memory (VmRSS sampled every
100 ms) against its RSS before the fill. The load average is recorded with each phase. Prints
one JSON document: medians per broker and the SieveMQ/RabbitMQ ratios (above 1 is better for
rates and RSS ratios are below 1 when SieveMQ uses less).

    python -m bench.classic_work_queue [--repeats 3] [--n 20000] [--sizes 100,1024] \
        [--consumers 1,4] [--rpc 1000] [--deep 0] [--deep-size 100] [--fsync batch] \
        [--rabbitmq-port 0] [--no-rabbitmq] [--peers]

The defaults are the quiet-machine run beside RabbitMQ: the work queue (100 B and 1 KiB, one
and four consumers) and RPC, 3 interleaved repeats, about 4 minutes on a quiet 2-core machine
(5 at load 20). The deep queue is a command of its own:
``--repeats 0 --rpc 0 --deep 1000000`` (RabbitMQ needs most of its time).

``--peers`` uses the older kit beside the checkout (``../shared/peers``), as
``bench.vs_rabbitmq`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pika

from bench import kit
from bench._util import git_commit, machine, proc_cpu_s
from bench.vs_rabbitmq import loadgen, rabbitmq_server, sievemq_server

RPC_QUEUE = "bench-rpc-requests"


def _url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def declare(port: int, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(_url(port)))
    ch = conn.channel()
    ch.queue_delete(queue)
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})
    conn.close()


def delete(port: int, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(_url(port)))
    conn.channel().queue_delete(queue)
    conn.close()


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def publish(port: int, pid: int, queue: str, n: int, size: int) -> dict[str, Any]:
    return loadgen(
        port, pid, "-mode", "publish", "-n", n, "-size", size, "-window", 1000,
        "-persistent", "-queue", queue, "-no-declare", "-keep",
    )  # fmt: skip


def consume_args(port: int, queue: str, m: int, idle: str = "5s") -> list[str]:
    return [
        str(kit.loadgen()), "-port", str(port), "-mode", "consume", "-m", str(m),
        "-prefetch", "1000", "-ack-every", "500", "-offset", "", "-idle", idle,
        "-queue", queue, "-no-declare", "-keep",
    ]  # fmt: skip


def consume_many(
    port: int, pid: int, queue: str, n: int, consumers: int, idle: str = "5s"
) -> dict[str, Any]:
    """``consumers`` loadgen consumers at once, n/consumers each; rate over their wall time."""
    if consumers == 1:
        return loadgen(port, pid, *consume_args(port, queue, n, idle)[3:])
    share = n // consumers
    before = proc_cpu_s(pid)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(consume_args(port, queue, share), stdout=subprocess.PIPE, text=True)
        for _ in range(consumers)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    wall = time.perf_counter() - start
    cpu = proc_cpu_s(pid) - before
    results = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    consumed = sum(r.get("consumed", 0) for r in results)
    return {
        "consumed": consumed,
        "cons_msgs_per_s": round(consumed / wall, 1),
        "wall_secs": round(wall, 3),
        "server_cpu_us_per_msg": round(cpu / max(consumed, 1) * 1e6, 2),
        "per_consumer": [r.get("consumed") for r in results],
        "errors": [r["error"] for r in results if "error" in r],
    }


def work_round(
    port: int, pid: int, n: int, size: int, consumers: int, queue: str
) -> dict[str, Any]:
    declare(port, queue)
    load = load_average()
    pub = publish(port, pid, queue, n, size)
    con = consume_many(port, pid, queue, n, consumers)
    delete(port, queue)
    return {"publish": pub, "consume": con, "load_average": load}


# ---------------------------------------------------------------------------- RPC


def rpc_responder(port: int) -> None:
    """Answer every request on RPC_QUEUE with its body, to its reply_to (runs until killed)."""
    conn = pika.BlockingConnection(pika.URLParameters(_url(port)))
    ch = conn.channel()
    ch.queue_declare(RPC_QUEUE, arguments={"x-queue-type": "classic"})

    def answer(ch: Any, method: Any, props: Any, body: bytes) -> None:
        ch.basic_publish(
            "",
            props.reply_to,
            body,
            pika.BasicProperties(correlation_id=props.correlation_id),
        )
        ch.basic_ack(method.delivery_tag)

    ch.basic_qos(prefetch_count=100)
    ch.basic_consume(RPC_QUEUE, answer)
    print("ready", flush=True)
    ch.start_consuming()


def rpc_round(port: int, pid: int, calls: int) -> dict[str, Any]:
    responder = subprocess.Popen(
        [sys.executable, "-m", "bench.classic_work_queue", "--rpc-responder", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        assert responder.stdout is not None and responder.stdout.readline().strip() == "ready"
        conn = pika.BlockingConnection(pika.URLParameters(_url(port)))
        ch = conn.channel()
        reply_to = ch.queue_declare("", exclusive=True).method.queue
        got: dict[str, bytes] = {}

        def on_reply(ch: Any, method: Any, props: Any, body: bytes) -> None:
            got[props.correlation_id] = body

        ch.basic_consume(reply_to, on_reply, auto_ack=True)
        load = load_average()
        before = proc_cpu_s(pid)
        times: list[float] = []
        for i in range(calls + 100):  # the first 100 warm up
            cid = uuid.uuid4().hex
            start = time.perf_counter()
            ch.basic_publish(
                "",
                RPC_QUEUE,
                b"%d" % i,
                pika.BasicProperties(reply_to=reply_to, correlation_id=cid),
            )
            while cid not in got:
                conn.process_data_events(time_limit=None)
            if i >= 100:
                times.append(time.perf_counter() - start)
            del got[cid]
        cpu = proc_cpu_s(pid) - before
        conn.close()
    finally:
        responder.kill()
        responder.wait()
    times.sort()
    return {
        "calls": calls,
        "rtt_p50_us": round(times[len(times) // 2] * 1e6, 1),
        "rtt_p99_us": round(times[int(len(times) * 0.99)] * 1e6, 1),
        "server_cpu_us_per_call": round(cpu / (calls + 100) * 1e6, 2),
        "load_average": load,
    }


# ---------------------------------------------------------------------------- deep queue


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler:
    """The largest VmRSS of a process seen while this runs (sampled every 100 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_kib(self.pid))


def deep_round(port: int, pid: int, n: int, size: int) -> dict[str, Any]:
    queue = "bench-deep"
    declare(port, queue)
    before = rss_kib(pid)
    load = load_average()
    with RssSampler(pid) as during_fill:
        pub = publish(port, pid, queue, n, size)
    full = rss_kib(pid)
    with RssSampler(pid) as during_drain:
        # a deep RabbitMQ queue can pause deliveries for seconds while it pages
        con = consume_many(port, pid, queue, n, 1, idle="120s")
    delete(port, queue)
    return {
        "n": n,
        "drained": con.get("consumed"),
        "size": size,
        "publish_msgs_per_s": pub.get("pub_msgs_per_s"),
        "publish_server_cpu_us_per_msg": pub.get("server_cpu_us_per_msg"),
        "drain_msgs_per_s": con.get("cons_msgs_per_s"),
        "drain_server_cpu_us_per_msg": con.get("server_cpu_us_per_msg"),
        "rss_before_mib": round(before / 1024, 1),
        "rss_full_mib": round(full / 1024, 1),
        "rss_peak_mib": round(max(during_fill.peak, during_drain.peak) / 1024, 1),
        "load_average": load,
        "publish": pub,
        "consume": con,
    }


# ---------------------------------------------------------------------------- summary


def _median(values: list[Any]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 2) if got else None


def summarize(runs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, rounds in runs["work"].items():
        out[key] = {
            "publish_msgs_per_s": _median([r["publish"].get("pub_msgs_per_s") for r in rounds]),
            "publish_server_cpu_us_per_msg": _median(
                [r["publish"].get("server_cpu_us_per_msg") for r in rounds]
            ),
            "consume_msgs_per_s": _median([r["consume"].get("cons_msgs_per_s") for r in rounds]),
            "consume_server_cpu_us_per_msg": _median(
                [r["consume"].get("server_cpu_us_per_msg") for r in rounds]
            ),
        }
    if runs["rpc"]:
        out["rpc"] = {
            k: _median([r[k] for r in runs["rpc"]])
            for k in ("rtt_p50_us", "rtt_p99_us", "server_cpu_us_per_call")
        }
    if runs["deep"]:
        out["deep"] = {k: v for k, v in runs["deep"].items() if k not in ("publish", "consume")}
    return out


def ratios(summary: dict[str, Any]) -> dict[str, Any]:
    if "rabbitmq" not in summary:
        return {}
    out: dict[str, Any] = {}
    for section, figures in summary["sievemq"].items():
        other = summary["rabbitmq"].get(section, {})
        out[section] = {
            k: round(v / other[k], 2)
            for k, v in figures.items()
            if isinstance(v, int | float) and other.get(k) and k != "n" and k != "size"
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--consumers", default="1,4")
    parser.add_argument("--rpc", type=int, default=1000, help="round trips per repeat (0: none)")
    parser.add_argument("--deep", type=int, default=0, help="deep queue messages (0: none)")
    parser.add_argument("--deep-size", type=int, default=100)
    parser.add_argument("--fsync", default="batch")
    parser.add_argument("--rabbitmq-port", type=int, default=0, help="0: a free port")
    parser.add_argument("--no-rabbitmq", action="store_true")
    parser.add_argument("--peers", action="store_true", help="use ../shared/peers")
    parser.add_argument("--rpc-responder", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rpc_responder:
        rpc_responder(args.rpc_responder)
        return
    kit.use_peers(args.peers)
    kit.loadgen()  # built now if missing, not inside a timed run
    sizes = [int(s) for s in args.sizes.split(",") if s]
    consumer_counts = [int(c) for c in args.consumers.split(",") if c]
    names = ["sievemq"] + ([] if args.no_rabbitmq else ["rabbitmq"])
    runs: dict[str, Any] = {n: {"work": {}, "rpc": [], "deep": None} for n in names}
    started = time.time()
    with ExitStack() as stack:
        brokers = {"sievemq": stack.enter_context(sievemq_server(args.fsync))}
        if not args.no_rabbitmq:
            brokers["rabbitmq"] = stack.enter_context(rabbitmq_server(args.rabbitmq_port))
        for i in range(args.repeats):
            for size in sizes:
                for consumers in consumer_counts:
                    key = f"work_{size}B_{consumers}c"
                    for name, (port, pid) in brokers.items():
                        got = work_round(port, pid, args.n, size, consumers, f"bench-work-{i}")
                        runs[name]["work"].setdefault(key, []).append(got)
            if args.rpc:
                for name, (port, pid) in brokers.items():
                    runs[name]["rpc"].append(rpc_round(port, pid, args.rpc))
        if args.deep:
            for name, (port, pid) in brokers.items():
                runs[name]["deep"] = deep_round(port, pid, args.deep, args.deep_size)
    summary = {name: summarize(r) for name, r in runs.items()}
    print(
        json.dumps(
            {
                "bench": "classic_work_queue",
                "commit": git_commit(),
                "n": args.n,
                "sizes": sizes,
                "consumers": consumer_counts,
                "fsync": args.fsync,
                "repeats": args.repeats,
                "machine": machine(),
                "minutes": round((time.time() - started) / 60, 1),
                "summary": summary,
                "ratio_sievemq_over_rabbitmq": ratios(summary),
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
