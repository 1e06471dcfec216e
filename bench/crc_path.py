"""CPU per message of the stored-chunk paths that checksum every byte, zlib's CRC-32 beside
ISA-L's (``isal``), interleaved in one process.

    python -m bench.crc_path [--n 50000] [--repeats 5]

Per body size (100 B, 1 KiB): ``append`` = ``Stream.append`` of stream-protocol messages in
batches of 1,000 (``storage.chunk.encode_chunk``'s data CRC, the path AMQP publishing shares);
``read_build`` = ``StreamReader.read_chunks`` (the stored CRC checked) + the subscription's
``wire_chunks`` (the osiris chunk's CRC) with the shared cache cleared, i.e. the stream
protocol's consume path without a socket. The CRC function is swapped in the three modules
(``storage.chunk``, ``storage.reader``, ``streamproto.osiris``); both compute the same checksum.
Prints JSON: the medians in µs of CPU per message, and the isal/zlib ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from isal import isal_zlib

from bench._util import machine
from sievemq.gateway.streamproto_session.subscription import _built, wire_chunks
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage import chunk as chunk_module
from sievemq.storage import reader as reader_module
from sievemq.storage.stream import Durability
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import osiris as osiris_module


def _use(crc: Callable[..., int]) -> None:
    patched = ((chunk_module, "_crc32"), (reader_module, "fast_crc32"), (osiris_module, "crc32"))
    for module, name in patched:
        vars(module)[name] = crc


def _once(size: int, n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="sievemq-crc-") as tmp:
        stream = Stream.open(Path(tmp) / "s", StreamConfig(durability=Durability.NEVER))
        body = b"x" * size
        t0 = time.process_time()
        for i in range(0, n, 1000):
            count = min(1000, n - i)
            stream.append([Message((), "", "", b"", body, KIND_STREAM)] * count)
        t1 = time.process_time()
        reader = stream.reader()
        reader.seek_first()
        while True:
            got = reader.read_chunks(4096, None)
            if not got:
                break
            for raw in got:
                wire_chunks(stream, raw, 1 << 20)
                _built.clear()
        t2 = time.process_time()
        reader.close()
        stream.close()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    out: dict[str, Any] = {"label": "crc path", "n": args.n, "repeats": args.repeats}
    out.update(machine())
    crcs: dict[str, Callable[..., int]] = {"zlib": zlib.crc32, "isal": isal_zlib.crc32}
    try:
        for size in (100, 1024):
            got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in crcs}
            for _ in range(args.repeats):
                for name, crc in crcs.items():  # interleaved: the same noise for each
                    _use(crc)
                    a, b = _once(size, args.n)
                    got[name][0].append(a)
                    got[name][1].append(b)
            for name, (appends, builds) in got.items():
                out[f"{name}_append_{size}B_us_per_msg"] = round(statistics.median(appends), 3)
                out[f"{name}_read_build_{size}B_us_per_msg"] = round(statistics.median(builds), 3)
            for part in ("append", "read_build"):
                key = f"{part}_{size}B_us_per_msg"
                ratio = out[f"isal_{key}"] / out[f"zlib_{key}"]
                out[f"ratio_isal_over_zlib_{part}_{size}B"] = round(ratio, 2)
    finally:
        _use(isal_zlib.crc32)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
