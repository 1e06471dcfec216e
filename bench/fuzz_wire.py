"""Grammar-aware wire fuzzer: valid handshakes, then generated and mutated frames; JSON out.

    python -m bench.fuzz_wire [--frames 1000000] [--seed 1] [--url amqp://...]

Without ``--url`` it starts ``sievemq serve`` on free ports (``--fsync never``) and, at the
end, stops it and reads its stderr. Each fuzz connection does a real handshake (PLAIN or
AMQPLAIN), opens channels, then sends batches of frames built from the AMQP grammar: client
methods with generated arguments (field tables nested up to 3,000 levels, up to 6,000
entries or array elements, every value type, timestamps no datetime holds, non-UTF-8 keys), content
headers with generated property lists, bodies that match or lie about their size, heartbeats;
about one frame in ten is mutated (bytes flipped, inserted, deleted, truncated, a length
field or type octet replaced, frame type/channel/end octet changed). When the server closes
a channel it is answered and reopened; when it closes the connection a new one starts.

A canary connection (pika) publishes with confirms and consumes its own stream throughout;
it must receive every message it published, in order. Reported: frames sent, connections,
the reply codes the server closed with, any 541 (a finding, with the frames that led to it
kept), whether the canary and the server survived, and tracebacks in the server's stderr.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import random
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika
from pamqp import commands, frame

from bench._util import machine, start_server, stop_server
from bench.canary import Canary

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
QUEUES = [f"fz-{i}" for i in range(8)]
EXCHANGES = ["", "amq.direct", "amq.topic", "amq.headers", "amq.fanout", "fz-x", "nope"]
SQL = [
    "a = 1",
    "region = 'eu' AND n > 3",
    "NOT (x IS NULL)",
    "k LIKE 'a%' ESCAPE '!'",
    "n BETWEEN 1 AND 9",
    "t IN ('a','b')",
    "(" * 70 + "a=1" + ")" * 70,
    "NOT " * 80 + "a=1",
    "a = 1 OR " * 600 + "a = 1",
    "a = 'unterminated",
    "1 + + + + 2 = 3",
    "x.y.z = 1",
]
STREAM_ARGS: list[tuple[str, Any]] = [
    ("x-queue-type", "stream"),
    ("x-max-age", "7D"),
    ("x-max-length-bytes", 10_000_000),
    ("x-stream-max-segment-size-bytes", 1_000_000),
    ("x-stream-filter-size-bytes", 32),
    ("x-stream-offset", "first"),
    ("x-stream-offset", -5),
    ("x-stream-filter", ["a", "b"]),
    ("x-stream-match-unfiltered", True),
    ("x-stream-consumer-name", "fz-name"),
]


class Gen:
    """Random AMQP values and frames (a seeded ``random.Random``)."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.frames = 0  # frames generated (a publish is 2 or 3)

    # -- field tables as raw bytes (pamqp cannot encode deep or odd ones) -----------------
    def value(self, depth: int) -> bytes:
        r = self.r
        kind = r.choice("tbBsuIilLfdDSATFVx" if depth < 4 else "tbsIlSTV")
        fixed = {"t": 1, "b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8}
        if kind in fixed:
            return kind.encode() + r.randbytes(fixed[kind])
        if kind in "fd":
            return kind.encode() + r.randbytes(4 if kind == "f" else 8)
        if kind == "D":
            return b"D" + r.randbytes(5)
        if kind == "T":
            return b"T" + r.choice([r.randbytes(8), struct.pack(">Q", 2**64 - 1)])
        if kind in "Sx":
            raw = r.randbytes(r.choice([0, 3, 40, 300]))
            return kind.encode() + struct.pack(">I", len(raw)) + raw
        if kind == "V":
            return b"V"
        if kind == "A":
            items = b"".join(self.value(depth + 1) for _ in range(r.randrange(0, 4)))
            return b"A" + struct.pack(">I", len(items)) + items
        return b"F" + self.table(depth + 1)

    def key(self) -> bytes:
        r = self.r
        raw = r.choice(
            [b"a", b"x-stream-filter-value", b"region", b"n", r.randbytes(r.randrange(0, 9))]
        )
        return bytes((len(raw),)) + raw

    def table(self, depth: int = 1) -> bytes:
        r = self.r
        pick = r.random()
        if depth == 1 and pick < 0.02:  # wide: around the entries / array limits
            n = r.choice([100, 4096, 4097, 6000])
            if r.random() < 0.5:
                body = b"\x01kV" * n
            else:
                arr = r.choice([b"V", b"I\x00\x00\x00\x01"]) * n
                body = b"\x01aA" + struct.pack(">I", len(arr)) + arr
            return struct.pack(">I", len(body)) + body
        if depth == 1 and pick < 0.05:  # deep: around the depth limit, or far past it
            levels = r.choice([31, 32, 33, 60, 900, 3000])
            t = struct.pack(">I", 8) + b"\x01aI" + r.randbytes(4)
            for _ in range(levels - 1):
                entry = (b"\x01aF" if r.random() < 0.8 else b"\x01aA") + t
                if entry[2:3] == b"A":  # an array holds values, not entries
                    entry = b"\x01aA" + struct.pack(">I", len(t) + 1) + b"F" + t
                t = struct.pack(">I", len(entry)) + entry
            return t
        count = r.randrange(0, 4) if depth < 4 else 0
        body = b"".join(self.key() + self.value(depth) for _ in range(count))
        return struct.pack(">I", len(body)) + body

    def args(self) -> dict[str, Any]:
        return dict(self.r.sample(STREAM_ARGS, self.r.randrange(0, 4)))

    # -- frames ----------------------------------------------------------------------------
    def method(self, channel: int) -> bytes:
        r = self.r
        q, x = r.choice(QUEUES), r.choice(EXCHANGES)
        pick = r.random()
        if pick < 0.35:
            return self.publish(channel)
        choices: list[Any] = [
            lambda: commands.Queue.Declare(
                queue=q, durable=True, arguments={"x-queue-type": "stream"}
            ),
            lambda: commands.Queue.Declare(queue=q, durable=True, arguments=self.args()),
            lambda: commands.Queue.Declare(queue=q, passive=True),
            lambda: commands.Queue.Bind(
                queue=q, exchange=x, routing_key=r.choice(["k", "#", "a.*"])
            ),
            lambda: commands.Queue.Unbind(queue=q, exchange=x, routing_key="k"),
            lambda: commands.Queue.Purge(queue=q),
            lambda: commands.Exchange.Declare(
                exchange="fz-x", exchange_type=r.choice(["topic", "zz"])
            ),
            lambda: commands.Exchange.Bind(destination="fz-x", source=x, routing_key="k"),
            lambda: commands.Basic.Qos(prefetch_count=r.choice([0, 1, 10, 65535])),
            lambda: commands.Basic.Consume(queue=q, arguments=self.args()),
            lambda: commands.Basic.Consume(
                queue=q,
                arguments={"x-stream-filter-sql": r.choice(SQL), "x-stream-offset": "first"},
            ),
            lambda: commands.Basic.Cancel(consumer_tag=r.choice(["", "ctag1.1", "zz"])),
            lambda: commands.Basic.Ack(delivery_tag=r.randrange(0, 50), multiple=r.random() < 0.5),
            lambda: commands.Basic.Nack(delivery_tag=r.randrange(0, 50)),
            lambda: commands.Basic.Reject(delivery_tag=r.randrange(0, 50)),
            lambda: commands.Basic.Recover(requeue=True),
            lambda: commands.Confirm.Select(),
            lambda: commands.Channel.Flow(active=r.random() < 0.5),
            lambda: commands.Tx.Select(),
        ]
        if r.random() < 0.01:
            choices.append(lambda: commands.Queue.Delete(queue=q))
        data = frame.marshal(r.choice(choices)(), channel)
        if r.random() < 0.15 and data[7:11] in _TABLE_METHODS:
            data = self.with_raw_table(data)
        return data

    def with_raw_table(self, data: bytes) -> bytes:
        """Replace the method's (last) arguments table by a generated raw one."""
        payload = data[7:-1]
        tlen = struct.unpack_from(">I", payload, len(payload) - 4)[0] if len(payload) > 4 else 0
        if tlen != 0:
            return data
        payload = payload[:-4] + self.table()
        return struct.pack(">BHI", 1, struct.unpack_from(">H", data, 1)[0], len(payload)) + (
            payload + b"\xce"
        )

    def properties(self) -> bytes:
        r = self.r
        flags = r.choice([0, 0x2000, 0x9000, 0x2000 | 0x0040, r.randrange(0, 0x10000) & ~1])
        out = struct.pack(">H", flags)
        kinds = [
            (0x8000, "s"),
            (0x4000, "s"),
            (0x2000, "F"),
            (0x1000, "o"),
            (0x0800, "o"),
            (0x0400, "s"),
            (0x0200, "s"),
            (0x0100, "s"),
            (0x0080, "s"),
            (0x0040, "T"),
            (0x0020, "s"),
            (0x0010, "s"),
            (0x0008, "s"),
            (0x0004, "s"),
        ]
        for bit, kind in kinds:
            if flags & bit:
                if kind == "s":
                    raw = r.randbytes(r.randrange(0, 12))
                    out += bytes((len(raw),)) + raw
                elif kind == "F":
                    out += self.table()
                elif kind == "o":
                    out += r.randbytes(1)
                else:
                    out += r.randbytes(8)
        return out

    def publish(self, channel: int) -> bytes:
        r = self.r
        method = frame.marshal(
            commands.Basic.Publish(
                exchange=r.choice(EXCHANGES), routing_key=r.choice([*QUEUES, "k", ""])
            ),
            channel,
        )
        body = r.randbytes(r.choice([0, 5, 100, 3000]))
        size = len(body) if r.random() < 0.9 else r.randrange(0, 2**20)
        payload = struct.pack(">HHQ", 60, 0, size) + self.properties()
        header = struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"
        out = method + header
        self.frames += 1  # the method is counted by the caller
        if body:
            out += struct.pack(">BHI", 3, channel, len(body)) + body + b"\xce"
            self.frames += 1
        return out

    def mutate(self, data: bytes) -> bytes:
        r = self.r
        b = bytearray(data)
        if not b:
            return data
        op = r.randrange(9)
        i = r.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << r.randrange(8)
        elif op == 1:
            b[i] = r.randrange(256)
        elif op == 2:
            b[i:i] = r.randbytes(r.randrange(1, 8))
        elif op == 3:
            del b[i : i + r.randrange(1, 8)]
        elif op == 4:
            b = b[: r.randrange(len(b))]
        elif op == 5 and len(b) > 7:
            b[3:7] = struct.pack(">I", r.choice([0, 1, 2**31, len(b) + 100, 2**32 - 1]))
        elif op == 6:
            b[0] = r.choice([0, 1, 2, 3, 4, 8, 9, 206])
        elif op == 7 and len(b) > 3:
            b[1:3] = struct.pack(">H", r.choice([0, 1, 2, 3, 65535]))
        else:
            b[-1] = r.randrange(256)
        return bytes(b)


_TABLE_METHODS = {
    struct.pack(">HH", 40, 10),
    struct.pack(">HH", 40, 30),
    struct.pack(">HH", 50, 10),
    struct.pack(">HH", 50, 20),
    struct.pack(">HH", 50, 50),
    struct.pack(">HH", 60, 20),
}


class FuzzConnection:
    """One raw connection: handshake, then batches of fuzz frames."""

    def __init__(self, host: str, port: int, gen: Gen) -> None:
        self.gen = gen
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""
        self.closed = False
        self.codes: collections.Counter[int] = collections.Counter()
        self.channels = [1, 2]

    def _read_until(self, want: tuple[int, int], timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for cid, mid, _ in self._frames():
                if (cid, mid) == want:
                    return
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed during handshake")
            self.buf += chunk
        raise TimeoutError(f"no {want}")

    def _frames(self) -> list[tuple[int, int, bytes]]:
        """Method frames in the buffer as (class, method, payload); the rest is dropped."""
        out = []
        while len(self.buf) >= 8:
            size = struct.unpack_from(">I", self.buf, 3)[0]
            if len(self.buf) < 8 + size:
                break
            ftype, channel = self.buf[0], struct.unpack_from(">H", self.buf, 1)[0]
            payload = self.buf[7 : 7 + size]
            self.buf = self.buf[8 + size :]
            if ftype == 1 and len(payload) >= 4:
                cid, mid = struct.unpack_from(">HH", payload)
                out.append((cid, mid, payload))
                if (cid, mid) == (20, 40):  # channel.close: answer and reopen
                    self.codes[struct.unpack_from(">H", payload, 4)[0]] += 1
                    self.send(frame.marshal(commands.Channel.CloseOk(), channel))
                    self.send(frame.marshal(commands.Channel.Open(), channel))
                elif (cid, mid) == (10, 50):
                    self.codes[struct.unpack_from(">H", payload, 4)[0]] += 1
                    self.send(frame.marshal(commands.Connection.CloseOk(), 0))
                    self.closed = True
        return out

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def handshake(self) -> None:
        self.sock.sendall(PROTOCOL_HEADER)
        self._read_until((10, 10))
        if self.gen.r.random() < 0.5:
            mech, resp = "PLAIN", "\0guest\0guest"
        else:
            mech, resp = (
                "AMQPLAIN",
                "\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x05guest",
            )
        self.sock.sendall(
            frame.marshal(
                commands.Connection.StartOk(
                    client_properties={"product": "fuzz"}, mechanism=mech, response=resp
                ),
                0,
            )
        )
        self._read_until((10, 30))
        self.sock.sendall(
            frame.marshal(commands.Connection.TuneOk(channel_max=16, frame_max=131072), 0)
            + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
        )
        self._read_until((10, 41))
        for ch in self.channels:
            self.sock.sendall(frame.marshal(commands.Channel.Open(), ch))
        self.sock.setblocking(False)

    def batch(self, n: int, mutate_rate: float) -> list[bytes]:
        gen = self.gen
        frames = []
        for _ in range(n):
            r = gen.r.random()
            if r < 0.02:
                data = b"\x08\x00\x00\x00\x00\x00\x00\xce"
            elif r < 0.04:
                data = gen.r.randbytes(gen.r.randrange(1, 64))
            else:
                data = gen.method(gen.r.choice(self.channels))
            gen.frames += 1
            if gen.r.random() < mutate_rate:
                data = gen.mutate(data)
            frames.append(data)
        self.send(b"".join(frames))
        return frames

    def drain(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.closed = True
                    break
                self.buf += chunk
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.closed = True
        self._frames()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def run(
    host: str,
    port: int,
    url: str,
    frames: int,
    seed: int,
    mutate: float,
    max_seconds: float = float("inf"),
) -> dict[str, Any]:
    rng = random.Random(seed)
    gen = Gen(rng)
    canary = Canary(url)
    canary.start()
    codes: collections.Counter[int] = collections.Counter()
    findings: list[dict[str, Any]] = []
    sent = conns = 0
    started = time.monotonic()
    history: collections.deque[bytes] = collections.deque(maxlen=64)
    next_report = started + 30
    while sent < frames and time.monotonic() - started < max_seconds:
        if time.monotonic() >= next_report:
            next_report += 30
            print(f"fuzz: {sent} frames, {conns} connections, codes {dict(codes)}", file=sys.stderr)
        conn = FuzzConnection(host, port, gen)
        conns += 1
        try:
            conn.handshake()
        except (OSError, TimeoutError) as exc:
            findings.append({"kind": "handshake failed", "error": repr(exc), "after": sent})
            conn.close()
            if len(findings) > 20:
                break
            continue
        rounds = 0
        while not conn.closed and sent < frames and rounds < 200:
            batch = conn.batch(rng.choice([1, 5, 20, 50]), mutate)
            history.extend(batch)
            sent = gen.frames
            rounds += 1
            time.sleep(0)
            conn.drain()
        time.sleep(0.002)
        conn.drain()
        if conn.codes.get(541):
            findings.append(
                {"kind": "541", "after": sent, "last_frames_hex": [f.hex() for f in history]}
            )
        codes.update(conn.codes)
        conn.close()
    elapsed = time.monotonic() - started
    canary.stop_event.set()
    canary.join(60)
    return {
        "frames_sent": sent,
        "connections": conns,
        "seconds": round(elapsed, 1),
        "frames_per_s": round(sent / elapsed),
        "mutate_rate": mutate,
        "close_codes": dict(sorted(codes.items())),
        "internal_errors_541": codes.get(541, 0),
        "findings": findings[:10],
        "canary": {
            "published": len(canary.published),
            "received": len(canary.received),
            "in_order_and_complete": canary.received == canary.published,
            "error": canary.error,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutate", type=float, default=0.1)
    parser.add_argument("--url", default=None, help="fuzz a running server instead")
    parser.add_argument("--max-seconds", type=float, default=float("inf"))
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": machine(), "benchmark": "fuzz_wire", "seed": args.seed}
    if args.url:
        params = pika.URLParameters(args.url)
        out.update(
            run(
                params.host,
                params.port,
                args.url,
                args.frames,
                args.seed,
                args.mutate,
                args.max_seconds,
            )
        )
    else:
        data = Path(tempfile.mkdtemp(prefix="sievemq-fuzz-"))
        stderr_path = data.with_suffix(".stderr")
        server = start_server(data, "never", stderr_path=stderr_path)
        try:
            url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
            out.update(
                run(
                    "127.0.0.1",
                    server.port,
                    url,
                    args.frames,
                    args.seed,
                    args.mutate,
                    args.max_seconds,
                )
            )
            out["server_alive"] = server.process.poll() is None
        finally:
            stop_server(server)
            err = stderr_path.read_text(errors="replace")
            out["server_tracebacks"] = err.count("Traceback")
            out["server_stderr_tail"] = err[-2000:] if "Traceback" in err else ""
            shutil.rmtree(data, ignore_errors=True)
            stderr_path.unlink(missing_ok=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
