"""The admin plane's rate sampler: `python -m bench.admin_sampler [--streams N] [--classic N]`
(JSON out).

The sampler runs one round every `--collect-statistics-interval-ms` (5 s) on the gateway's
event loop, yielding every 4 ms. This times rounds of `BrokerFacade.sample_steps()` over
``--streams`` open streams and ``--classic`` classic queues in an in-process gateway: the
CPU a round costs (process time, median of ``--rounds``; its wall time too, which a loaded
machine stretches) and the longest single step between two yields in wall time (the sampler
itself yields at the first step past 4 ms)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from bench._util import machine
from sievemq.testing import running_gateway


async def measure(streams: int, classic: int, rounds: int) -> dict[str, Any]:
    async with running_gateway(sample_interval_s=3600) as gw:
        f = gw.facade
        for i in range(streams):
            f.declare_stream("/", f"s{i}", {"x-queue-type": "stream"})  # declared = open
        for i in range(classic):
            f.declare_stream("/", f"c{i}", {"x-queue-type": "classic"})
        list(f.sample_steps())  # the first samples
        round_ms: list[float] = []
        cpu_ms: list[float] = []
        worst_step_ms = worst_step_cpu_ms = 0.0
        for _ in range(rounds):
            cpu = last_cpu = time.process_time()
            started = last = time.perf_counter()
            for _step in f.sample_steps():
                now, now_cpu = time.perf_counter(), time.process_time()
                worst_step_ms = max(worst_step_ms, (now - last) * 1000)
                worst_step_cpu_ms = max(worst_step_cpu_ms, (now_cpu - last_cpu) * 1000)
                last, last_cpu = now, now_cpu
            round_ms.append((time.perf_counter() - started) * 1000)
            cpu_ms.append((time.process_time() - cpu) * 1000)
        return {
            "benchmark": "admin_sampler",
            "streams": streams,
            "classic_queues": classic,
            "rounds": rounds,
            "round_cpu_ms_median": round(statistics.median(cpu_ms), 2),
            "round_wall_ms_median": round(statistics.median(round_ms), 2),
            "worst_step_wall_ms": round(worst_step_ms, 3),
            "worst_step_cpu_ms": round(worst_step_cpu_ms, 3),
            "cpu_share_at_5s": round(statistics.median(cpu_ms) / 5000, 5),
            "machine": machine(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--classic", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.streams, args.classic, args.rounds)), indent=2))


if __name__ == "__main__":
    main()
