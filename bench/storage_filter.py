"""Filtered scan: how fast a reader finds 10 rare values behind 1M common messages.

`python -m bench.storage_filter [--quick] [--messages N]`: writes N messages in chunks of 100,
each message with one of 50 common filter values, then one chunk of 10 messages with 10 rare
values; Bloom filters of 255 bytes. A reader with FilterSpec(rare values) scans from the first
offset to the end. Reports the time to find the 10, the cost per chunk skipped by its Bloom
filter (header read only), and how many chunks were false positives. Median of 3 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from bench._util import machine, now
from sievemq.storage import FilterSpec, Message, Stream, StreamConfig

PER_CHUNK = 100
COMMON = [f"region-{i:02d}" for i in range(50)]
RARE = [f"rare-{i}" for i in range(10)]


def build(directory: Path, messages: int) -> int:
    rng = random.Random(7)
    s = Stream.open(directory, StreamConfig(filter_size_bytes=255))
    body = os.urandom(100)
    for _ in range(messages // PER_CHUNK):
        s.append([Message((rng.choice(COMMON),), "ex", "rk", b"", body) for _ in range(PER_CHUNK)])
    s.append([Message((v,), "ex", "rk", b"", b"rare") for v in RARE])
    s.close()
    return s.stats().chunks


def scan(directory: Path) -> dict[str, float]:
    s = Stream.open(directory, StreamConfig(filter_size_bytes=255))
    r = s.reader()
    spec = FilterSpec(tuple(RARE))
    found = []
    t = now()
    while True:
        found.extend(r.read(100, spec, max_chunks=1024))
        if r.at_end:
            break
    elapsed = now() - t
    s.close()
    assert len(found) == len(RARE), len(found)
    st = r.stats
    return {
        "seconds": elapsed,
        "chunks_scanned": st.chunks_scanned,
        "chunks_skipped": st.chunks_skipped,
        "chunks_false_positive": st.chunks_false_positive,
        "bytes_read": st.bytes_read,
    }


def skip_only(directory: Path) -> float:
    """Seconds per chunk for a spec no chunk can match (pure header reads)."""
    s = Stream.open(directory, StreamConfig(filter_size_bytes=255))
    r = s.reader()
    spec = FilterSpec(("absent-value",))
    t = now()
    while True:
        r.read(100, spec, max_chunks=4096)
        if r.at_end:
            break
    elapsed = now() - t
    s.close()
    return elapsed / max(1, r.stats.chunks_skipped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage_filter")
    parser.add_argument("--quick", action="store_true", help="100k messages instead of 1M")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    messages = args.messages or (100_000 if args.quick else 1_000_000)
    work = Path(tempfile.mkdtemp(prefix="sievemq-bench-"))
    try:
        t = now()
        chunks = build(work / "s", messages)
        build_s = now() - t
        scans = sorted((scan(work / "s") for _ in range(args.runs)), key=lambda x: x["seconds"])
        mid = scans[len(scans) // 2]
        skip = sorted(skip_only(work / "s") for _ in range(args.runs))[args.runs // 2]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "storage_filter",
        "machine": machine(),
        "runs": args.runs,
        "messages": messages + len(RARE),
        "chunks": chunks,
        "filter_size_bytes": 255,
        "build_seconds": round(build_s, 2),
        "find_rare_seconds": round(mid["seconds"], 4),
        "chunks_skipped": mid["chunks_skipped"],
        "chunks_false_positive": mid["chunks_false_positive"],
        "bytes_read": mid["bytes_read"],
        "us_per_chunk_in_rare_scan": round(mid["seconds"] / mid["chunks_scanned"] * 1e6, 2),
        "us_per_skipped_chunk_header_only": round(skip * 1e6, 2),
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
