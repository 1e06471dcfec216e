"""Stream protocol (port 5552) throughput with the rstream client: SieveMQ beside RabbitMQ.

`python -m bench.stream_protocol --port P [--label L] [--n N] [--runs R] [--no-filter]`
against a running server (SieveMQ's `stream=` port, or RabbitMQ's stream plugin). Prints
one JSON object: per test the median msg/s of R runs.

- publish_confirm_<size>: rstream `send_batch` of 100 messages, confirms handled by a
  callback, at most 50 batches unconfirmed; timed until every message is confirmed.
- consume_<size>: one subscriber from `first` over the N messages just published, raw
  payloads (no AMQP 1.0 decoding in the client), timed until the last one arrives.
- consume_raw_client_<size>: the same N messages again, read by a minimal stream-protocol
  client (`_consume_raw`: 1 MiB socket reads, records counted from each chunk header, one
  credit back per Deliver like rstream) instead of rstream, whose own CPU (it reads the
  socket 256 bytes per call, then a Python callback per message) is what limits
  consume_<size>: this one shows what the server delivers.
- filtered_consume_1in50: N messages in batches of 100 with filter values v0..v49 (Publish
  v2), a subscriber with `filter.0=v7`; timed until its N/50 messages arrive (needs stream
  filtering: RabbitMQ 3.13+, not the 3.10.8 peer).

The client is Python: it, not the server, may be what limits these numbers.

`python -m bench.stream_protocol --compare [--n N] [--runs R]` is the side-by-side run: it
starts SieveMQ (`sievemq serve`, free ports, `--fsync never` like RabbitMQ's unsynced
confirms) and RabbitMQ 3.10.8 with its `rabbitmq_stream` plugin (`bench/rabbitmq.sh
--stream-port`), runs the tests above on both alternately in one process, and adds the
ratios and the `loop.sendfile` probe below. RabbitMQ 3.10.8 has no stream filtering (3.13+),
so the filtered test runs on SieveMQ only. Defaults (N=100,000, 3 runs) take ~3 minutes on
a quiet 2-core machine.

`--compare --only publish`: the publish-with-confirms test alone, both servers alternately
(with the per-run figures); `--n 100000 --runs 5` takes ~3 minutes on a quiet machine.

`python -m bench.stream_protocol --baseline SRC [--n N] [--runs R]`: this tree's server and
the one whose package is in SRC (e.g. `git archive HEAD~1 src | tar -x -C /tmp/before`, then
`--baseline /tmp/before/src`), alternately in one process, with the ratios: a before/after;
it adds each server's CPU microseconds per message (from /proc), steadier than msg/s under load.

`--sendfile-probe` (part of `--compare`): how fast N stored messages reach a raw socket
reader (another process) over loopback as Deliver frames, three ways in one run: `write`,
SieveMQ's path (StreamReader.read of a real stream, cut into osiris chunks of at most 100
records, one `write` per read batch); `sendfile`, the same frames already on disk as wire
bytes (what a storage format whose chunks ARE osiris chunks would allow) sent with one
`loop.sendfile` per Deliver, as RabbitMQ does; `pread_write`, those bytes read with
`os.pread` and written. The disk copy of the frames is made before the clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rstream import (
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    MessageContext,
    OffsetType,
    Producer,
    RawMessage,
)

from bench import kit
from bench._util import machine, start_server, stop_server
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.stream import Durability
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import osiris

WINDOW = 50  # batches in flight


async def _publish(host: str, port: int, stream: str, n: int, size: int, filtered: bool) -> float:
    confirmed = 0
    done = asyncio.Event()

    def on_confirm(status: Any) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed >= n:
            done.set()

    async def extract(msg: Any) -> str:
        return f"v{msg.publishing_id % 50}"

    kwargs: dict[str, Any] = {"filter_value_extractor": extract} if filtered else {}
    body = b"x" * size
    async with Producer(host, port, username="guest", password="guest", **kwargs) as p:
        await p.create_stream(stream, exists_ok=True)
        start = time.perf_counter()
        sent = 0
        next_id = 1
        while sent < n:
            batch = []
            for _ in range(min(100, n - sent)):
                batch.append(RawMessage(body, publishing_id=next_id))
                next_id += 1
            await p.send_batch(stream, batch, on_publish_confirm=on_confirm)  # type: ignore[arg-type]
            sent += len(batch)
            while sent - confirmed > WINDOW * 100:
                await asyncio.sleep(0)
        await asyncio.wait_for(done.wait(), 120)
        return n / (time.perf_counter() - start)


async def _consume(
    host: str, port: int, stream: str, expect: int, filter_value: str | None, whole: bool = False
) -> float:
    got = 0
    done = asyncio.Event()

    async def on_message(msg: Any, ctx: MessageContext) -> None:
        nonlocal got
        got += 1
        if got >= expect:
            done.set()

    kwargs: dict[str, Any] = {}
    if filter_value is not None:
        # the client post-filters as its docs say (the payload is the raw bytes here: the
        # value is the publishing id's residue, so test the record's position instead)
        wanted = int(filter_value[1:])
        kwargs["filter_input"] = FilterConfiguration(
            values_to_filter=[filter_value], predicate=lambda m: True
        )
        if whole:
            kwargs["properties"] = {"sievemq-whole-chunks": "true"}

        async def on_filtered(msg: Any, ctx: MessageContext) -> None:
            nonlocal got
            if (ctx.offset + 1) % 50 == wanted:
                got += 1
                if got >= expect:
                    done.set()

        handler = on_filtered
    else:
        handler = on_message
    async with Consumer(host, port, username="guest", password="guest") as c:
        start = time.perf_counter()
        await c.subscribe(
            stream,
            handler,
            decoder=None,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            initial_credit=10,
            **kwargs,
        )
        await asyncio.wait_for(done.wait(), 120)
        return expect / (time.perf_counter() - start)


async def _delete(host: str, port: int, stream: str) -> None:
    async with Producer(host, port, username="guest", password="guest") as p:
        await p.delete_stream(stream, missing_ok=True)


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    host: str,
    port: int,
    runs: int,
    n: int,
    filtered: bool,
    pid: int = 0,
    publish_only: bool = False,
) -> dict[str, Any]:
    """Per size the median msg/s; with the server's ``pid``, also its CPU microseconds per
    message (steadier than msg/s on a loaded machine: waiting for a core costs no CPU).
    ``publish_only``: the publish test alone (no consume)."""
    results: dict[str, Any] = {}
    for size in (100, 1024):
        pub, con, raw, pub_cpu, con_cpu = [], [], [], [], []
        for _ in range(runs):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            c0 = _cpu_seconds(pid) if pid else 0.0
            pub.append(await _publish(host, port, stream, n, size, False))
            c1 = _cpu_seconds(pid) if pid else 0.0
            pub_cpu.append((c1 - c0) / n * 1e6)
            if not publish_only:
                con.append(await _consume(host, port, stream, n, None))
                c2 = _cpu_seconds(pid) if pid else 0.0
                raw.append(await _consume_raw(host, port, stream, n))
                con_cpu.append((c2 - c1) / n * 1e6)
            await _delete(host, port, stream)
        results[f"publish_confirm_{size}B_msg_s"] = round(statistics.median(pub))
        if pid:
            results[f"publish_confirm_{size}B_server_cpu_us_per_msg"] = round(
                statistics.median(pub_cpu), 2
            )
        if publish_only:
            continue
        results[f"consume_{size}B_msg_s"] = round(statistics.median(con))
        results[f"consume_raw_client_{size}B_msg_s"] = round(statistics.median(raw))
        if pid:
            results[f"consume_{size}B_server_cpu_us_per_msg"] = round(statistics.median(con_cpu), 2)
    if filtered:
        exact = []
        for _ in range(runs):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            await _publish(host, port, stream, n, 100, True)
            exact.append(await _consume(host, port, stream, n // 50, "v7"))
            await _delete(host, port, stream)
        results["filtered_consume_1in50_matching_msg_s"] = round(statistics.median(exact))
    return results


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    results = await _measure(args.host, args.port, args.runs, args.n, False)
    if not args.no_filter:
        exact, whole = [], []
        for _ in range(args.runs):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            await _publish(args.host, args.port, stream, args.n, 100, True)
            exact.append(await _consume(args.host, args.port, stream, args.n // 50, "v7"))
            if args.whole_chunks:
                whole.append(await _consume(args.host, args.port, stream, args.n // 50, "v7", True))
            await _delete(args.host, args.port, stream)
        results["filtered_consume_1in50_matching_msg_s"] = round(statistics.median(exact))
        if whole:
            results["filtered_whole_chunks_1in50_matching_msg_s"] = round(statistics.median(whole))
    return results


# ----------------------------------------------------------------------------- raw consumer


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def _frame(key: int, body: bytes) -> bytes:
    return struct.pack(">IHH", len(body) + 4, key, 1) + body


async def _consume_raw(host: str, port: int, stream: str, expect: int, credit: int = 10) -> float:
    """The consume test without a Python client's per-message cost: a minimal stream-protocol
    client (SASL PLAIN, Tune, Open, Subscribe from ``first`` with ``credit`` like rstream's,
    one Credit of 1 back per Deliver received, as rstream does) that reads 1 MiB at a time
    and counts each Deliver's records from its chunk header. It measures how fast the
    server gets N records onto the socket, which the rstream figure cannot show when the
    client's own cost (rstream reads the socket 256 bytes per call) is the limit."""
    loop = asyncio.get_running_loop()
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    buf = bytearray()

    async def frame() -> tuple[int, bytes]:
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            data = await loop.sock_recv(sock, 1 << 20)
            if not data:
                raise ConnectionError("server closed")
            buf.extend(data)
        size = int.from_bytes(buf[:4], "big")
        body = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        return int.from_bytes(body[:2], "big") & 0x7FFF, body[4:]

    async def call(key: int, body: bytes) -> bytes:
        await loop.sock_sendall(sock, _frame(key, body))
        while True:
            got_key, got = await frame()
            if got_key == key:
                return got

    try:
        await call(17, struct.pack(">II", 1, 0))  # PeerProperties, no properties
        await call(18, struct.pack(">I", 2))  # SaslHandshake
        plain = b"\0guest\0guest"
        await call(19, struct.pack(">I", 3) + _s("PLAIN") + struct.pack(">I", len(plain)) + plain)
        while True:  # the server's Tune, echoed before Open
            got_key, tune = await frame()
            if got_key == 20:
                await loop.sock_sendall(sock, _frame(20, tune))
                break
        opened = await call(21, struct.pack(">I", 4) + _s("/"))
        assert opened[4:6] == b"\x00\x01", opened
        start = time.perf_counter()
        sub = struct.pack(">IB", 5, 1) + _s(stream) + struct.pack(">HHI", 1, credit, 0)
        got_sub = await call(7, sub)
        assert got_sub[4:6] == b"\x00\x01", got_sub
        one_credit = _frame(9, struct.pack(">BH", 1, 1))
        got = 0
        pos = 0
        while True:
            while len(buf) - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if len(buf) - pos < 4 + size:
                    break
                if int.from_bytes(buf[pos + 4 : pos + 6], "big") == 8:  # Deliver v1 or v2
                    version = int.from_bytes(buf[pos + 6 : pos + 8], "big")
                    head = pos + 9 + (8 if version >= 2 else 0)  # past the committed chunk id
                    got += int.from_bytes(buf[head + 4 : head + 8], "big")  # num_records
                    sock.send(one_credit)
                pos += 4 + size
            if got >= expect:
                break
            del buf[:pos]
            pos = 0
            data = await loop.sock_recv(sock, 1 << 20)
            if not data:
                raise ConnectionError("server closed")
            buf += data
        elapsed = time.perf_counter() - start
    finally:
        sock.close()
    return expect / elapsed


# ----------------------------------------------------------------------------- sendfile probe

_READER = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "want, got = int(sys.argv[2]), 0\n"
    "while got < want:\n"
    "    b = s.recv(1 << 20)\n"
    "    if not b: break\n"
    "    got += len(b)\n"
    "s.close()\n"
)
CHUNK_RECORDS = 100  # batches of 100: one stored chunk each, one Deliver each


def _fill(directory: Path, n: int, size: int) -> Stream:
    stream = Stream.open(directory, StreamConfig(durability=Durability.NEVER))
    body = b"x" * size
    for i in range(0, n, CHUNK_RECORDS):
        count = min(CHUNK_RECORDS, n - i)
        stream.append([Message((), "", "", b"", body, KIND_STREAM)] * count)
    return stream


def _store_batches(stream: Stream) -> Iterator[bytes]:
    """SieveMQ's consume path: read records, cut them into osiris chunks of at most
    CHUNK_RECORDS, the Deliver frames of one read joined (one write)."""
    reader = stream.reader()
    reader.seek_first()
    try:
        while True:
            records = reader.read(4096)
            if not records:
                if reader.at_end:
                    return
                continue
            frames = []
            for i in range(0, len(records), CHUNK_RECORDS):
                part = records[i : i + CHUNK_RECORDS]
                payloads = [r.body for r in part]
                frames.append(osiris.deliver(0, part[0].offset, part[0].timestamp_ms, payloads))
            yield b"".join(frames)
    finally:
        reader.close()


async def _serve_once(send: Any, expect: int) -> float:
    """One raw reader process takes ``expect`` bytes; seconds from its connect to its EOF."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[float] = loop.create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        await send(writer)
        await reader.read()  # the reader closes once it has everything
        done.set_result(time.perf_counter() - start)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _READER, str(port), str(expect)
    )
    try:
        return await asyncio.wait_for(done, 120)
    finally:
        await proc.wait()
        server.close()
        await server.wait_closed()


async def _sendfile_probe(n: int, size: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sievemq-sendfile-") as tmp:
        stream = _fill(Path(tmp) / "s", n, size)
        wire_frames = [f for batch in _store_batches(stream) for f in _split(batch)]
        total = sum(map(len, wire_frames))
        path = Path(tmp) / "wire"
        path.write_bytes(b"".join(wire_frames))
        spans, pos = [], 0
        for f in wire_frames:
            spans.append((pos, len(f)))
            pos += len(f)
        loop = asyncio.get_running_loop()

        async def write_path(w: asyncio.StreamWriter) -> None:
            for batch in _store_batches(stream):
                w.write(batch)
                await w.drain()

        async def sendfile_path(w: asyncio.StreamWriter) -> None:
            with open(path, "rb") as f:
                for offset, count in spans:
                    await loop.sendfile(w.transport, f, offset, count)

        async def pread_path(w: asyncio.StreamWriter) -> None:
            fd = os.open(path, os.O_RDONLY)
            try:
                for offset, count in spans:
                    w.write(os.pread(fd, count, offset))
                    if w.transport.get_write_buffer_size() > 1 << 20:
                        await w.drain()
                await w.drain()
            finally:
                os.close(fd)

        times: dict[str, list[float]] = {"write": [], "sendfile": [], "pread_write": []}
        paths = {"write": write_path, "sendfile": sendfile_path, "pread_write": pread_path}
        for _ in range(runs):
            for name, fn in paths.items():  # interleaved: the same noise for each
                times[name].append(await _serve_once(fn, total))
        stream.close()
    out: dict[str, Any] = {
        f"deliver_{name}_{size}B_msg_s": round(n / statistics.median(t))
        for name, t in times.items()
    }
    out[f"sendfile_vs_write_{size}B"] = round(
        statistics.median(times["write"]) / statistics.median(times["sendfile"]), 2
    )
    return out


def _split(batch: bytes) -> list[bytes]:
    """The Deliver frames of a joined batch (u32 size prefix each)."""
    out, pos = [], 0
    while pos < len(batch):
        size = int.from_bytes(batch[pos : pos + 4], "big") + 4
        out.append(batch[pos : pos + size])
        pos += size
    return out


# ----------------------------------------------------------------------------- side by side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _compare(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sievemq-bench-") as tmp:
        server = start_server(Path(tmp) / "data", fsync="never")
        try:
            rabbit_port = _free_port()
            with kit.rabbitmq_server(stream_port=rabbit_port):
                rabbit: dict[str, Any] = {}
                sieve: dict[str, Any] = {}
                publish_only = args.only == "publish"
                for _ in range(args.runs):  # one run each, alternately; medians at the end
                    for port, acc in ((server.stream_port, sieve), (rabbit_port, rabbit)):
                        one = await _measure(
                            args.host, port, 1, args.n, False, publish_only=publish_only
                        )
                        for k, v in one.items():
                            acc.setdefault(k, []).append(v)
                if not publish_only:
                    filt = await _measure(args.host, server.stream_port, args.runs, args.n, True)
        finally:
            stop_server(server)
    for name, acc in (("sievemq", sieve), ("rabbitmq", rabbit)):
        out[name] = {k: round(statistics.median(v)) for k, v in acc.items()}
        out[name + "_runs"] = acc
    if publish_only:
        out["ratio_sievemq_over_rabbitmq"] = {
            k: round(out["sievemq"][k] / v, 2) for k, v in out["rabbitmq"].items() if v
        }
        return out
    out["sievemq"]["filtered_consume_1in50_matching_msg_s"] = filt[
        "filtered_consume_1in50_matching_msg_s"
    ]
    out["rabbitmq"]["filtered_consume_1in50_matching_msg_s"] = None  # no filtering in 3.10.8
    out["ratio_sievemq_over_rabbitmq"] = {
        k: round(out["sievemq"][k] / v, 2) for k, v in out["rabbitmq"].items() if v
    }
    probe: dict[str, Any] = {}
    for size in (100, 1024):
        probe.update(await _sendfile_probe(args.n, size, args.runs))
    out["sendfile_probe"] = probe
    return out


async def _against_baseline(args: argparse.Namespace) -> dict[str, Any]:
    """This tree's server and a baseline's (``--baseline SRC``), alternately, in one run."""
    with tempfile.TemporaryDirectory(prefix="sievemq-bench-") as tmp:
        new = start_server(Path(tmp) / "new", fsync="never")
        old = start_server(Path(tmp) / "old", fsync="never", src=Path(args.baseline))
        acc: dict[str, dict[str, list[float]]] = {"new": {}, "baseline": {}}
        try:
            for _ in range(args.runs):
                for name, server in (("new", new), ("baseline", old)):
                    pid = server.process.pid
                    one = await _measure(
                        args.host,
                        server.stream_port,
                        1,
                        args.n,
                        False,
                        pid,
                        publish_only=args.only == "publish",
                    )
                    for k, v in one.items():
                        acc[name].setdefault(k, []).append(v)
        finally:
            stop_server(new)
            stop_server(old)
    out: dict[str, Any] = {
        name: {k: round(statistics.median(v), 2) for k, v in got.items()}
        for name, got in acc.items()
    }
    out["ratio_new_over_baseline"] = {
        k: round(out["new"][k] / v, 2) for k, v in out["baseline"].items() if v
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--label", default="server")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-filter", action="store_true")
    parser.add_argument(
        "--whole-chunks",
        action="store_true",
        help="also measure SieveMQ's sievemq-whole-chunks=true (RabbitMQ-style) delivery",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="start SieveMQ and RabbitMQ 3.10.8 (rabbitmq_stream) and measure both",
    )
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="start this tree's server and the one in SRC (a src/ folder) and measure both",
    )
    parser.add_argument(
        "--sendfile-probe", action="store_true", help="only the loop.sendfile probe"
    )
    parser.add_argument(
        "--only",
        choices=["publish"],
        help="with --compare or --baseline: the publish-with-confirms test alone (no consume)",
    )
    args = parser.parse_args()
    head = {"n": args.n, "runs": args.runs, **machine()}
    if args.compare:
        print(
            json.dumps(
                {
                    "label": "stream protocol: sievemq vs rabbitmq 3.10.8",
                    **head,
                    **asyncio.run(_compare(args)),
                }
            )
        )
        return
    if args.baseline:
        got = asyncio.run(_against_baseline(args))
        print(json.dumps({"label": "stream protocol: this tree vs baseline", **head, **got}))
        return
    if args.sendfile_probe:

        async def probe() -> dict[str, Any]:
            got: dict[str, Any] = {}
            for size in (100, 1024):
                got.update(await _sendfile_probe(args.n, size, args.runs))
            return got

        print(json.dumps({"label": "sendfile probe", **head, **asyncio.run(probe())}))
        return
    if not args.port:
        parser.error("--port is required (or --compare / --sendfile-probe)")
    results = asyncio.run(_run(args))
    print(json.dumps({"label": args.label, **head, **results}))


if __name__ == "__main__":
    main()
