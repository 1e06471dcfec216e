"""Thousands of streams: declare cost, descriptors and memory per stream; JSON to stdout.

    python -m bench.streams_scale [--n 10000] [--touch 1000] [--rabbitmq-n 0]
    python -m bench.streams_scale --start-n 50000 [--touch 1000]

SieveMQ (default ``--fsync batch``, ``--max-open-files`` default) on free ports: declare
``--n`` stream queues one after another over one pika connection (time per declare, median
of each block of 1,000, so a cost that grows with the count shows), then publish one
message with confirms to ``--touch`` random streams and read it back from each (descriptors
after). Descriptors (``/proc/PID/fd``) and RSS (``VmRSS``) of the server are taken before the
declares, after them, and after touching streams; per-stream figures are the deltas / n.

The declare cost at 1 stream and at ``--n`` streams: ``ms_per_declare_first_100`` (the first
100 declares) and ``ms_per_declare_last_100`` (the last 100), and their ratio, from one run.
On a loaded machine those are minutes apart; ``--interleave K`` then starts a second, empty
server and alternates K declares between the two (one on the server holding ``--n`` streams,
one on the empty one): ``interleaved`` holds both medians and their ratio, measured under the
same load.

``--start-n N`` measures a node that already holds N streams instead: the streams are written
into the data directory first (by the broker model in this process, with its fdatasyncs
deferred to one at the end: creating them is not what is measured), then the server is
started (seconds from exec to its ready line, descriptors and RSS once ready), ``--touch``
random streams get a publish and a read (each stream's files open on its first use), and the
server is stopped with SIGTERM (seconds to exit), twice: after the first start and after a
second start on the same directory.

``--list-n N [--baseline SRC]`` measures the admin listing of a node restarted with N idle
streams: one ``GET /api/queues`` right after the start (idle streams surveyed on
disk, read-only, not opened) and a second one (cached surveys), with the server's descriptors
and CPU seconds after; with ``--baseline SRC`` (e.g. ``git archive COMMIT src | tar -x -C
/tmp/before``, then ``--baseline /tmp/before/src``) the same on that tree's server in the same
run, on the same data directory, and the ratios.

With ``--rabbitmq-n N`` the same declares (N of them) run against a private RabbitMQ from
Debian's package (``bench/rabbitmq.sh``; ``--peers``: ``../shared/peers/rabbitmq.sh``), and its
beam process's descriptors and RSS are measured the same way.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pika

from bench import kit
from bench._util import machine, proc_cpu_s, start_server, stop_server


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def declare_all(url: str, n: int, pid: int, prefix: str) -> dict[str, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    before = {"fds": fds(pid), "rss_kib": rss_kib(pid)}
    blocks: list[float] = []
    each: list[float] = []
    start = block_start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        ch.queue_declare(f"{prefix}{i}", durable=True, arguments={"x-queue-type": "stream"})
        each.append(time.perf_counter() - t)
        if (i + 1) % 1000 == 0:
            now = time.perf_counter()
            blocks.append((now - block_start) / 1000 * 1000)  # ms per declare in this block
            block_start = now
    total = time.perf_counter() - start
    time.sleep(1.0)
    after = {"fds": fds(pid), "rss_kib": rss_kib(pid)}
    conn.close()
    first = statistics.median(each[:100]) * 1000
    last = statistics.median(each[-100:]) * 1000
    return {
        "n": n,
        "total_s": round(total, 2),
        "ms_per_declare": round(total / n * 1000, 3),
        "ms_per_declare_first_100": round(first, 3),
        "ms_per_declare_last_100": round(last, 3),
        "last_over_first": round(last / first, 3) if first else None,
        "ms_per_declare_by_block_of_1000": [round(b, 3) for b in blocks],
        "before": before,
        "after": after,
        "fds_per_idle_stream": round((after["fds"] - before["fds"]) / n, 4),
        "rss_kib_per_idle_stream": round((after["rss_kib"] - before["rss_kib"]) / n, 2),
    }


def touch_random(url: str, n: int, touch: int, pid: int, prefix: str) -> dict[str, Any]:
    """Publish one confirmed message to ``touch`` random streams and read each back."""
    names = [f"{prefix}{i}" for i in random.Random(1).sample(range(n), touch)]
    conn = pika.BlockingConnection(pika.URLParameters(url))
    pub = conn.channel()
    pub.confirm_delivery()
    start = time.perf_counter()
    for name in names:
        pub.basic_publish("", name, name.encode())
    published = time.perf_counter() - start
    sub = conn.channel()
    sub.basic_qos(prefetch_count=10)
    got: dict[str, bytes] = {}
    start = time.perf_counter()
    for name in names:
        tag = sub.basic_consume(
            name,
            lambda c, m, p, b, name=name: (got.__setitem__(name, b), c.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"},
        )
        while name not in got:
            conn.process_data_events(time_limit=0.05)
        sub.basic_cancel(tag)
    read = time.perf_counter() - start
    assert all(got[name] == name.encode() for name in names)
    result = {
        "touched": touch,
        "publish_ms_each": round(published / touch * 1000, 3),
        "consume_first_message_ms_each": round(read / touch * 1000, 3),
        "fds_after": fds(pid),
        "rss_kib_after": rss_kib(pid),
    }
    conn.close()
    return result


def interleaved(url_full: str, k: int) -> dict[str, Any]:
    """K declares alternating between the server at ``url_full`` and a new empty server."""
    data = Path(tempfile.mkdtemp(prefix="sievemq-empty-"))
    empty = start_server(data, "batch")
    try:
        channels = []
        for url in (url_full, f"amqp://guest:guest@127.0.0.1:{empty.port}/%2F"):
            conn = pika.BlockingConnection(pika.URLParameters(url))
            channels.append((conn, conn.channel()))
        times: list[list[float]] = [[], []]
        for i in range(k):
            for side, (_, ch) in enumerate(channels):
                t = time.perf_counter()
                ch.queue_declare(f"x{i}", durable=True, arguments={"x-queue-type": "stream"})
                times[side].append(time.perf_counter() - t)
        for conn, _ in channels:
            conn.close()
    finally:
        stop_server(empty)
        shutil.rmtree(data, ignore_errors=True)
    full, small = (statistics.median(t) * 1000 for t in times)
    return {
        "declares_each": k,
        "ms_per_declare_at_n": round(full, 3),
        "ms_per_declare_on_empty_server": round(small, 3),
        "at_n_over_empty": round(full / small, 3),
    }


def prefill(data: Path, n: int, prefix: str) -> float:
    """N durable streams written into ``data`` by the broker model (what a node that
    declared them leaves on disk); fdatasyncs deferred to one ``os.sync()`` at the end."""
    from sievemq.gateway.model.broker import Broker

    started = time.perf_counter()
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # the new stream directories: synced by os.sync() below
    try:
        broker = Broker(data)
        broker.store.defer_sync = True
        vhost = broker.vhost("/")
        for i in range(n):
            vhost.declare_queue(f"{prefix}{i}", durable=True, arguments={"x-queue-type": "stream"})
        broker.close()
    finally:
        os.fsync = real_fsync
    os.sync()
    return time.perf_counter() - started


def start_stop(data: Path, n: int, touch: int, prefix: str) -> dict[str, Any]:
    """Start the server on ``data`` (N streams), touch some, stop it: times, fds, RSS."""
    t = time.perf_counter()
    server = start_server(data, "batch")
    ready = time.perf_counter() - t
    try:
        out: dict[str, Any] = {
            "start_to_ready_s": round(ready, 2),
            # the server's own CPU seconds until ready: what the start costs, whatever the
            # machine's load did to the wall time above
            "cpu_s_to_ready": round(proc_cpu_s(server.pid), 2),
            "ready": {"fds": fds(server.pid), "rss_kib": rss_kib(server.pid)},
        }
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        if touch:
            out["touch"] = touch_random(url, n, min(touch, n), server.pid, prefix)
    finally:
        out["sigterm_exit_s"] = round(stop_server(server, timeout=1800), 2)
    return out


def restarts(n: int, touch: int) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="sievemq-start-"))
    try:
        result: dict[str, Any] = {"n": n, "prefill_s": round(prefill(data, n, "s"), 2)}
        log = data / "definitions.log"
        result["definitions_log_bytes"] = log.stat().st_size
        result["first_start"] = start_stop(data, n, touch, "s")
        result["second_start"] = start_stop(data, n, 0, "s")
        return result
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _get_s(admin: str, path: str) -> tuple[float, Any]:
    auth = base64.b64encode(b"guest:guest").decode()
    request = urllib.request.Request(admin + path, headers={"Authorization": f"Basic {auth}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=1800) as response:
        body = json.loads(response.read())
    return time.perf_counter() - started, body


def list_polls(data: Path, n: int, src: Path | None) -> dict[str, Any]:
    """Two ``GET /api/queues`` on a server just started on ``data`` (N idle streams)."""
    server = start_server(data, "batch", src=src)
    try:
        cpu_ready = proc_cpu_s(server.pid)
        fds_ready = fds(server.pid)
        first_s, body = _get_s(server.admin, "/api/queues")
        assert len(body) == n, len(body)
        second_s, _ = _get_s(server.admin, "/api/queues")
        return {
            "first_poll_s": round(first_s, 3),
            "second_poll_s": round(second_s, 3),
            "server_cpu_s_for_both": round(proc_cpu_s(server.pid) - cpu_ready, 2),
            "fds_ready": fds_ready,
            "fds_after": fds(server.pid),
        }
    finally:
        stop_server(server, timeout=1800)


def listing(n: int, baseline: Path | None) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="sievemq-list-"))
    try:
        result: dict[str, Any] = {"n": n, "prefill_s": round(prefill(data, n, "s"), 2)}
        result["this_tree"] = list_polls(data, n, None)
        if baseline is not None:
            result["baseline"] = base = list_polls(data, n, baseline)
            ours = result["this_tree"]
            for key in ("first_poll_s", "second_poll_s"):
                result[f"{key}_baseline_over_this_tree"] = round(base[key] / ours[key], 2)
        return result
    finally:
        shutil.rmtree(data, ignore_errors=True)


def rabbitmq(n: int, port: int) -> dict[str, Any]:
    with kit.rabbitmq_server(port) as (amqp_port, pid):
        url = f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F"
        return {"version": _rabbitmq_version(), **declare_all(url, n, pid, "s")}


def _rabbitmq_version() -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True, text=True
    )
    return out.stdout.split("-")[0] or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--touch", type=int, default=1000)
    parser.add_argument("--rabbitmq-n", type=int, default=0)
    parser.add_argument("--rabbitmq-port", type=int, default=0, help="0: a free port")
    parser.add_argument("--peers", action="store_true", help="use ../shared/peers' RabbitMQ")
    parser.add_argument("--interleave", type=int, default=0, help="see the module docstring")
    parser.add_argument(
        "--start-n", type=int, default=0, help="measure start/stop of a node with N streams"
    )
    parser.add_argument("--list-n", type=int, default=0, help="admin listing of N idle streams")
    parser.add_argument("--baseline", type=Path, help="with --list-n: a baseline's src folder")
    args = parser.parse_args()
    kit.use_peers(args.peers)
    out: dict[str, Any] = {"machine": machine(), "benchmark": "streams_scale"}
    if args.list_n:
        out["list_idle"] = listing(args.list_n, args.baseline)
        print(json.dumps(out, indent=1))
        return
    if args.start_n:
        out["start_stop"] = restarts(args.start_n, args.touch)
        print(json.dumps(out, indent=1))
        return
    data = Path(tempfile.mkdtemp(prefix="sievemq-streams-"))
    server = start_server(data, "batch")
    try:
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        sieve = declare_all(url, args.n, server.pid, "s")
        if args.interleave:
            sieve["interleaved"] = interleaved(url, args.interleave)
        sieve["touch"] = touch_random(url, args.n, min(args.touch, args.n), server.pid, "s")
        log = data / "definitions.log"
        sieve["definitions_log_bytes"] = log.stat().st_size if log.exists() else None
        out["sievemq"] = sieve
    finally:
        # a shutdown with tens of thousands of streams is measured, not cut short
        if "sievemq" in out:
            out["sievemq"]["sigterm_exit_s"] = round(stop_server(server, timeout=1800), 2)
        else:
            stop_server(server, timeout=1800)
        shutil.rmtree(data, ignore_errors=True)
    if args.rabbitmq_n:
        out["rabbitmq"] = rabbitmq(args.rabbitmq_n, args.rabbitmq_port)
        ours = statistics.median(out["sievemq"]["ms_per_declare_by_block_of_1000"] or [0])
        theirs = statistics.median(out["rabbitmq"]["ms_per_declare_by_block_of_1000"] or [0])
        if ours and theirs:
            out["declare_ms_ratio_sievemq_over_rabbitmq"] = round(ours / theirs, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
