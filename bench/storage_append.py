"""Append throughput of sievemq.storage beside the raw sequential write speed of the disk.

`python -m bench.storage_append [--quick] [--dir PATH]`: for 100 B and 1 KB bodies at 1, 16,
256 and 1024 messages per chunk, appends with durability batch, fdatasyncs once at the end
(so both numbers include getting the bytes to disk), median of 3 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench._util import machine, median_of, now
from sievemq.storage import Durability, Message, Stream, StreamConfig


def raw_write(directory: Path, total: int) -> float:
    """Seconds to write ``total`` bytes in 1 MiB writes and fdatasync them."""
    block = os.urandom(1 << 20)
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = now()
    left = total
    while left > 0:
        left -= os.write(fd, block[: min(left, len(block))])
    os.fdatasync(fd)
    elapsed = now() - t
    os.close(fd)
    path.unlink()
    return elapsed


def append_run(directory: Path, size: int, per_chunk: int, count: int) -> tuple[float, int]:
    """Seconds to append ``count`` messages in chunks of ``per_chunk`` plus the final sync."""
    target = directory / "stream"
    shutil.rmtree(target, ignore_errors=True)
    body = os.urandom(size)
    batch = [Message((), "amq.direct", "bench", b"\x80\x00\x02", body)] * per_chunk
    s = Stream.open(target, StreamConfig(durability=Durability.BATCH))
    chunks = count // per_chunk
    append = s.append
    t = now()
    for _ in range(chunks):
        append(batch)
    s.sync()
    elapsed = now() - t
    stored = s.stats().bytes
    s.close()
    return elapsed, stored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage_append")
    parser.add_argument("--quick", action="store_true", help="about 4x less data")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (a temp dir)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    budget = 16 << 20 if args.quick else 64 << 20  # bytes of bodies per case
    work = Path(tempfile.mkdtemp(prefix="sievemq-bench-", dir=args.dir))
    results = []
    try:
        raw_bytes = budget
        raw_s = median_of(args.runs, lambda: raw_write(work, raw_bytes))
        raw_mb_s = raw_bytes / raw_s / 1e6
        for size in (100, 1024):
            for per_chunk in (1, 16, 256, 1024):
                count = budget // size
                if per_chunk == 1:
                    count = min(count, 20_000 if args.quick else 60_000)
                count -= count % per_chunk
                times = []
                stored = 0
                for _ in range(args.runs):
                    elapsed, stored = append_run(work, size, per_chunk, count)
                    times.append(elapsed)
                times.sort()
                elapsed = times[len(times) // 2]
                mb_s = stored / elapsed / 1e6
                results.append(
                    {
                        "body_bytes": size,
                        "per_chunk": per_chunk,
                        "messages": count,
                        "msgs_per_s": round(count / elapsed),
                        "mb_per_s": round(mb_s, 1),
                        "payload_mb_per_s": round(count * size / elapsed / 1e6, 1),
                        "of_raw": round(mb_s / raw_mb_s, 2),
                    }
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "storage_append",
        "machine": machine(),
        "runs": args.runs,
        "raw_sequential_write_mb_per_s": round(raw_mb_s, 1),
        "results": results,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
