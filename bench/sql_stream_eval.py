"""SQL over streams: storage reader + gateway SQL predicate, one core, no network.

Three measurements, each the median of ``--repeats`` runs, printed as one JSON document:

- ``sql_only``: a stream of ``--n`` messages (chunks of 256, headers region/amount in the raw
  AMQP property bytes); a full scan with ``StreamReader.read(predicate=sql_predicate(...))``
  for ``region = 'emea' AND amount > 100``. Includes reading, record decoding, header reads
  from raw bytes and evaluation (RabbitMQ 4.2: 404,645 msg/s end to end with SQL only).
- ``bloom_sql``: ``--n-bloom`` messages of which 0.001 % carry filter value ``rare``;
  ``x-stream-filter=rare`` + SQL ``amount > 0``: the Bloom filter skips almost every chunk
  before SQL runs. Rate = messages scanned per second (goal >= 5M).
- ``subscription``: ``--n`` messages, 0.1 % match ``region = 'apac'`` (no filter values, so no
  Bloom help); the same scan with the expression registered (chunks carry subscription bits,
  computed at append time) and unregistered. Also reports the append-time cost of the bits.

    python -m bench.sql_stream_eval [--repeats 3] [--n 200000] [--n-bloom 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pamqp.commands as spec

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.subscriptions import SubscriptionRegistry, registry
from sievemq.filtering.view import sql_predicate
from sievemq.storage import Durability, FilterSpec, Message, Stream, StreamConfig

CHUNK = 256
REGIONS = ("emea", "apac", "amer", "latam")


def _props(region: str, amount: int) -> bytes:
    return spec.Basic.Properties(
        headers={"region": region, "amount": amount, "source": "web"},
        content_type="application/json",
        delivery_mode=2,
    ).marshal()


def _build(
    directory: Path,
    n: int,
    make: Callable[[int], Message],
    extra: Callable[[list[Message]], bytes] | None = None,
) -> tuple[Stream, float]:
    stream = Stream.open(directory, StreamConfig(durability=Durability.NEVER))
    extra_s = 0.0
    for start in range(0, n, CHUNK):
        batch = [make(i) for i in range(start, min(n, start + CHUNK))]
        blob = b""
        if extra is not None:
            t = time.perf_counter()
            blob = extra(batch)
            extra_s += time.perf_counter() - t
        stream.append(batch, None, blob)
    return stream, extra_s


def _scan(
    stream: Stream,
    expression: str,
    spec_: FilterSpec | None = None,
    chunk_filter: Callable[[bytes], bool] | None = None,
) -> tuple[float, int, dict[str, int]]:
    predicate = sql_predicate(compile_filter(expression))
    reader = stream.reader()
    reader.seek_first()
    matched = 0
    start = time.perf_counter()
    while True:
        matched += len(reader.read(1024, spec_, predicate, 256, chunk_filter))
        if reader.at_end:
            break
    elapsed = time.perf_counter() - start
    stats = dict(vars(reader.stats))
    reader.close()
    return stream.end_offset / elapsed, matched, stats


def _median(runs: list[float]) -> dict[str, object]:
    return {"msg_per_s_median": round(statistics.median(runs)), "runs": [round(r) for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--n-bloom", type=int, default=1_000_000)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        props = [_props(REGIONS[i % 4], (i * 37) % 250) for i in range(64)]

        # 1. SQL only
        stream, _ = _build(root / "a", args.n, lambda i: Message((), "", "rk", props[i % 64], b"x"))
        expr = "region = 'emea' AND amount > 100"
        runs, matched = [], 0
        for _ in range(args.repeats):
            rate, matched, _stats = _scan(stream, expr)
            runs.append(rate)
        results["sql_only"] = {"expression": expr, "messages": args.n, "matched": matched}
        results["sql_only"].update(_median(runs))  # type: ignore[attr-defined]
        stream.delete()

        # 2. Bloom + SQL at 0.001 %
        every = 100_000
        common = Message(("common",), "", "rk", props[0], b"x")
        rare = Message(("rare",), "", "rk", _props("emea", 5), b"x")
        stream, _ = _build(root / "b", args.n_bloom, lambda i: rare if i % every == 7 else common)
        runs = []
        stats: dict[str, int] = {}
        for _ in range(args.repeats):
            rate, matched, stats = _scan(stream, "amount > 0", FilterSpec(("rare",)))
            runs.append(rate)
        results["bloom_sql"] = {
            "filter": "rare",
            "expression": "amount > 0",
            "messages": args.n_bloom,
            "matched": matched,
            "chunks_scanned": stats["chunks_scanned"],
            "chunks_skipped_bloom": stats["chunks_skipped"],
        }
        results["bloom_sql"].update(_median(runs))  # type: ignore[attr-defined]
        stream.delete()

        # 3. registered subscription vs the same expression unregistered
        apac = _props("apac", 1)
        others = [p for p in props if b"apac" not in p]
        sub_expr = "region = 'apac'"

        def make(i: int) -> Message:
            return Message((), "", "rk", apac if i % 1000 == 3 else others[i % len(others)], b"x")

        # the registry lives next to the stream, as in the server; register before writing
        (root / "c").mkdir()
        reg = SubscriptionRegistry(root / "c")
        slot = reg.register("reporter", sub_expr)
        assert slot is not None
        stream, extra_s = _build(root / "c", args.n, make, reg.extra_for)
        registry(stream)  # loads the same registration from subscriptions.json
        reg_runs, unreg_runs = [], []
        reg_stats: dict[str, int] = {}
        for _ in range(args.repeats):
            rate, matched, reg_stats = _scan(stream, sub_expr, None, reg.chunk_filter(slot))
            reg_runs.append(rate)
            rate2, matched2, _ = _scan(stream, sub_expr)
            unreg_runs.append(rate2)
            assert matched == matched2
        results["subscription"] = {
            "expression": sub_expr,
            "messages": args.n,
            "matched": matched,
            "registered": {
                **_median(reg_runs),
                "chunks_skipped_bits": reg_stats["chunks_skipped_subscription"],
            },
            "unregistered": _median(unreg_runs),
            "append_bits_us_per_message": round(extra_s / args.n * 1e6, 3),
        }
        stream.delete()
    print(
        json.dumps(
            {
                "benchmark": "sql_stream",
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "loadavg_1m": os.getloadavg()[0],
                "chunk_messages": CHUNK,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
