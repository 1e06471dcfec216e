"""Full garbage collections vs. the event loop, with and without ``gc.freeze`` (gateway/runtime/
gc_tuning.py): `python -m bench.gc_loop_stall [--streams 1000] [--seconds 30]`.

One command, two modes (``off``: the collector as CPython sets it up; ``on``: what `sievemq
serve` does, a freeze after start-up and after bulk declares), each in a fresh process: the
gateway in process (``running_gateway``, uvicorn on the AMQP loop) with ``--streams``
streams. A ticker on the loop wakes every 1 ms and records its lateness; ``gc.callbacks``
time every collection. Workload for ``--seconds``, from another process: a pika publisher
(confirms, 10 streams) and an HTTP poller (``/api/overview`` and a 100-queue page of
``/api/queues`` every 0.5 s, and 4 new streams declared with PUT each time). Then three
full collections forced on the loop (what the next automatic one would cost). Reported per
mode: the worst loop stalls and how many passed 50 ms, the generation-2 collections that
happened by themselves and their durations, and the forced full collection's median. JSON
on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import statistics
import time
from typing import Any

from bench._util import machine

PUBLISH_STREAMS = 10
DECLARES_PER_POLL = 4


def _workload(amqp_url: str, admin_url: str, seconds: float, out: Any) -> None:
    import httpx
    import pika

    published = polls = 0
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.confirm_delivery()
    body = b"x" * 100
    next_poll = 0.0
    declared = 0
    with httpx.Client(base_url=admin_url, auth=("guest", "guest"), timeout=60) as http:
        http.get("/api/whoami").raise_for_status()
        out.put("ready")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for i in range(PUBLISH_STREAMS):
                ch.basic_publish("", f"s{i:04d}", body)
                published += 1
            if time.monotonic() >= next_poll:
                http.get("/api/overview").raise_for_status()
                http.get("/api/queues?page=1&page_size=100").raise_for_status()
                for _ in range(DECLARES_PER_POLL):  # queues keep being declared
                    http.put(
                        f"/api/queues/%2F/new{declared:05d}",
                        json={"durable": True, "arguments": {"x-queue-type": "stream"}},
                    ).raise_for_status()
                    declared += 1
                polls += 1
                next_poll = time.monotonic() + 0.5
    conn.close()
    out.put({"published": published, "polls": polls, "declared": declared})


async def _amain(mode: str, streams: int, seconds: float) -> dict[str, Any]:
    from bench.admin_loop_stall import Ticker, declare_streams
    from sievemq.testing import running_gateway

    collections: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            collections[info["generation"]].append(time.perf_counter() - started.pop("t"))

    async with running_gateway() as gw:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        declare_streams(gw, streams)
        declare_s = time.perf_counter() - t0
        gc.collect()
        tracked = len(gc.get_objects())
        if mode == "on":  # as `sievemq serve`: freeze once ready, then after bulk declares
            gw.node.gc.enabled = True
            gw.node.gc.start(loop)
        ctx = multiprocessing.get_context("spawn")
        q: Any = ctx.Queue()
        proc = ctx.Process(target=_workload, args=(gw.url, gw.admin_url, seconds, q))
        proc.start()
        assert await asyncio.to_thread(q.get, True, 120) == "ready"
        gc.callbacks.append(on_gc)
        ticker = Ticker(above=None)  # every wake-up's lateness
        task = asyncio.ensure_future(ticker.run())
        work = await asyncio.to_thread(q.get, True, seconds + 120)
        ticker.stop = True
        await task
        await asyncio.to_thread(proc.join, 30)
        natural = list(collections[2])
        forced = []
        for _ in range(3):
            await asyncio.sleep(0.2)
            t = time.perf_counter()
            gc.collect()
            forced.append(time.perf_counter() - t)
        gc.callbacks.remove(on_gc)
        freezes = gw.node.gc.freezes
    late = sorted(lateness for _, lateness in ticker.late)
    ms = [1000 * x for x in late]
    return {
        "mode": mode,
        "declare_s": round(declare_s, 2),
        "tracked_objects": tracked,
        "frozen_objects": gc.get_freeze_count(),
        "freezes": freezes,
        "workload": work,
        "loop_worst_stall_ms": round(ms[-1], 1),
        "loop_p999_stall_ms": round(ms[int(0.999 * (len(ms) - 1))], 1),
        "loop_stalls_over_50ms": sum(1 for x in ms if x > 50),
        "gen2_collections": len(natural),
        "gen2_collection_max_ms": round(1000 * max(natural), 1) if natural else None,
        "gen2_collection_ms": [round(1000 * x, 1) for x in natural[:10]],
        "gen0_1_collections": len(collections[0]) + len(collections[1]),
        "forced_full_collection_median_ms": round(1000 * statistics.median(forced), 1),
    }


def _child(mode: str, streams: int, seconds: float, out: Any) -> None:
    out.put(asyncio.run(_amain(mode, streams, seconds)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    result: dict[str, Any] = {
        "benchmark": "gc_loop_stall",
        "streams": args.streams,
        "seconds": args.seconds,
        "machine": machine(),
    }
    for mode in ("off", "on"):
        q: Any = ctx.Queue()
        proc = ctx.Process(target=_child, args=(mode, args.streams, args.seconds, q))
        proc.start()
        result[mode] = q.get(True, args.seconds + 600)
        proc.join(60)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
