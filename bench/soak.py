"""Soak with faults: publishers with confirms, named and filtered consumers, and the server
SIGKILLed at random moments and restarted; JSON out.

    python -m bench.soak [--minutes 30] [--min-trials 1] [--streams 3] [--rate 150] [--seed 1]
                         [--fsync batch,always] [--data-dir DIR]

One trial: start ``sievemq serve`` (on free ports, on the same data directory each time,
cycling through the ``--fsync`` modes), run for a random 2-9 s with, per stream, a publisher
(pika, confirms, one message at a time, ``--rate`` a second), a named consumer and a named
filtered consumer (``x-stream-filter``) that ack what they get, then SIGKILL the server
wherever it is. After every restart, before the next trial:

- every message confirmed so far is in its stream, once, and every message read is whole
  (its body carries its stream, sequence number, colour and a CRC-32 of them);
- the stream never shrinks; what was added since the last check is read in full, and
  filtered reads of the same range (``x-stream-filter`` and ``x-stream-filter-sql``) get
  exactly the matching messages;
- each named consumer has seen every offset from 0 to the highest it saw (no gap; seeing
  one again after a kill is allowed), and each named filtered consumer exactly the matches;
- the server wrote no traceback and cancelled no consumer.

At the end the named consumers run until they reach the end of their streams and the whole
of every stream is read once more. Output: trials, messages published / confirmed /
unconfirmed but stored, deliveries, checks and findings (each a sentence; none expected).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from bench._util import machine
from sievemq.testing import ServerProcess
from sievemq.testing.process import ServerStartError

COLORS = ("red", "green", "blue")
FILTER_VALUE = "red"  # the named filtered consumers and the x-stream-filter reads
SQL = "color = 'blue' AND n % 2 = 0"  # the SQL reads
# a start includes recovery; on a machine shared with a full test suite (load 15-20 on two
# cores) a start took 7-11 s, so a start is given far longer than the test launcher's 60 s
START_TIMEOUT = 180.0


def sql_match(seq: int, color: str) -> bool:
    return color == "blue" and seq % 2 == 0


def color_of(seq: int) -> str:
    return COLORS[seq % len(COLORS)]


def encode_body(stream: str, seq: int) -> bytes:
    head = f"{stream}|{seq}|{color_of(seq)}|".encode() + b"x" * (seq % 64)
    return head + b"|%08x" % zlib.crc32(head)


def decode_body(body: bytes) -> tuple[str, int, str]:
    """(stream, seq, colour); ValueError for a body that is not whole."""
    head, _, crc = body.rpartition(b"|")
    if len(crc) != 8 or int(crc, 16) != zlib.crc32(head):
        raise ValueError(f"bad CRC in {body[:80]!r}")
    stream, seq, color, _pad = head.decode().split("|")
    if color != color_of(int(seq)):
        raise ValueError(f"colour does not match sequence in {body[:80]!r}")
    return stream, int(seq), color


@dataclass
class StreamState:
    name: str
    next_seq: int = 0
    confirmed: set[int] = field(default_factory=set)
    colors: dict[int, str] = field(default_factory=dict)  # offset -> colour, as read
    checked_end: int = 0  # offsets below it were read and verified
    seqs_at: dict[int, int] = field(default_factory=dict)  # offset -> seq
    named_seen: set[int] = field(default_factory=set)
    filtered_seen: set[int] = field(default_factory=set)
    named_started: bool = False
    filtered_started: bool = False


class Soak:
    def __init__(self, args: argparse.Namespace, data_dir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.modes = [m.strip() for m in args.fsync.split(",") if m.strip()]
        self.server = ServerProcess(data_dir, ("--fsync", self.modes[0]))
        self.streams = [StreamState(f"soak-{i}") for i in range(args.streams)]
        self.findings: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.trials = 0
        self.published = 0
        self.deliveries = 0
        self.checks = 0
        self.start_seconds: list[float] = []

    # ------------------------------------------------------------------ helpers

    def finding(self, text: str) -> None:
        with self.lock:
            if len(self.findings) < 200:
                self.findings.append(f"trial {self.trials}: {text}")

    def params(self) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(
            "127.0.0.1", self.server.amqp_port, heartbeat=0, blocked_connection_timeout=30
        )

    def start_server(self) -> None:
        """Start (recovery included); a start that fails is a finding, tried once more."""
        mode = self.modes[self.trials % len(self.modes)]
        self.server.extra_args = ("--fsync", mode)
        for attempt in (1, 2):
            began = time.monotonic()
            try:
                self.server.start(timeout=START_TIMEOUT)
            except ServerStartError as error:
                self.finding(f"start {attempt} failed: {str(error)[-1500:]}")
                if attempt == 2:
                    raise
                continue
            self.start_seconds.append(time.monotonic() - began)
            return

    # ------------------------------------------------------------------ trial threads

    def publisher(self, state: StreamState) -> None:
        interval = 1.0 / self.args.rate
        try:
            with pika.BlockingConnection(self.params()) as conn:
                ch = conn.channel()
                ch.queue_declare(state.name, durable=True, arguments={"x-queue-type": "stream"})
                ch.confirm_delivery()
                due = time.monotonic()
                while not self.stop.is_set():
                    seq = state.next_seq
                    state.next_seq += 1
                    color = color_of(seq)
                    props = pika.BasicProperties(
                        headers={"n": seq, "color": color, "x-stream-filter-value": color}
                    )
                    with self.lock:
                        self.published += 1
                    try:
                        ch.basic_publish("", state.name, encode_body(state.name, seq), props)
                    except pika.exceptions.NackError:
                        continue  # not confirmed: may or may not be stored
                    state.confirmed.add(seq)
                    due += interval
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    else:
                        due = time.monotonic()
        except (pika.exceptions.AMQPError, OSError):
            return  # the kill

    def named_consumer(self, state: StreamState, filtered: bool) -> None:
        name = f"{state.name}-{'red' if filtered else 'all'}"
        seen = state.filtered_seen if filtered else state.named_seen
        args: dict[str, Any] = {"x-stream-consumer-name": name}
        started = state.filtered_started if filtered else state.named_started
        if not started:
            args["x-stream-offset"] = "first"
        if filtered:
            args["x-stream-filter"] = FILTER_VALUE
        try:
            with pika.BlockingConnection(self.params()) as conn:
                ch = conn.channel()
                ch.queue_declare(state.name, durable=True, arguments={"x-queue-type": "stream"})
                ch.basic_qos(prefetch_count=200)
                if filtered:
                    state.filtered_started = True
                else:
                    state.named_started = True
                gen = ch.consume(state.name, arguments=args, inactivity_timeout=0.3)
                for method, props, body in gen:
                    if self.stop.is_set():
                        break
                    if method is None:
                        continue
                    if isinstance(method, pika.spec.Basic.Cancel):
                        self.finding(f"{name}: cancelled by the server")
                        return
                    offset = int(props.headers["x-stream-offset"])
                    self.check_body(state, offset, body, "named consumer " + name)
                    if filtered and props.headers.get("color") != FILTER_VALUE:
                        self.finding(f"{name}: offset {offset} is not {FILTER_VALUE}")
                    seen.add(offset)
                    with self.lock:
                        self.deliveries += 1
                    ch.basic_ack(method.delivery_tag)
        except (pika.exceptions.AMQPError, OSError):
            return  # the kill

    def check_body(self, state: StreamState, offset: int, body: bytes, who: str) -> None:
        try:
            stream, seq, _color = decode_body(body)
        except ValueError as error:
            self.finding(f"{who}: corrupt message at offset {offset}: {error}")
            return
        if stream != state.name:
            self.finding(f"{who}: offset {offset} of {state.name} holds a message of {stream}")
        known = state.seqs_at.get(offset)
        if known is not None and known != seq:
            self.finding(f"{who}: offset {offset} held seq {known}, now {seq}")

    # ------------------------------------------------------------------ checks

    def read_range(
        self, state: StreamState, start: int, arguments: dict[str, Any], want: int | None
    ) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
        """(offset, body, headers) from ``start``: ``want`` deliveries (then a short wait
        for extras), or, when ``want`` is None, until 1 s passes without one."""
        got = 0
        with pika.BlockingConnection(self.params()) as conn:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=1000)
            args = {"x-stream-offset": start, **arguments}
            quiet = 0.3 if want is not None else 1.0
            deadline = time.monotonic() + 60
            for method, props, body in ch.consume(
                state.name, arguments=args, inactivity_timeout=quiet
            ):
                if method is None:
                    if want is None or got >= want:
                        break
                    if time.monotonic() > deadline:
                        self.finding(f"read of {state.name} from {start} stalled at {got}/{want}")
                        break
                    continue
                got += 1
                if got % 500 == 0:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                yield int(props.headers["x-stream-offset"]), body, props.headers
            ch.cancel()

    def check_stream(self, state: StreamState, start: int) -> None:
        with pika.BlockingConnection(self.params()) as conn:
            ch = conn.channel()
            ok = ch.queue_declare(state.name, passive=True)
            end = int(ok.method.message_count)
        if end < state.checked_end:
            self.finding(f"{state.name} shrank from {state.checked_end} to {end} messages")
        expected = list(range(start, end))
        got: list[int] = []
        for offset, body, _headers in self.read_range(state, start, {}, len(expected)):
            got.append(offset)
            self.check_body(state, offset, body, "full read")
            try:
                _, seq, color = decode_body(body)
            except ValueError:
                continue
            state.seqs_at[offset] = seq
            state.colors[offset] = color
        if got != expected:
            missing = sorted(set(expected) - set(got))[:5]
            self.finding(
                f"{state.name}: read {len(got)} of offsets {start}..{end - 1}"
                f" (missing e.g. {missing})"
            )
        seq_list = list(state.seqs_at.values())
        if len(seq_list) != len(set(seq_list)):
            self.finding(f"{state.name}: a sequence number is stored twice")
        stored = set(seq_list)
        lost = sorted(state.confirmed - stored)
        if lost:
            self.finding(f"{state.name}: {len(lost)} confirmed messages missing, e.g. {lost[:5]}")
        # filtered reads of the same range: exactly the matches
        for label, arguments, match in (
            ("x-stream-filter", {"x-stream-filter": FILTER_VALUE}, _red_offsets),
            ("x-stream-filter-sql", {"x-stream-filter-sql": SQL}, _sql_offsets),
        ):
            want = match(state, start, end)
            seen = [o for o, _b, _h in self.read_range(state, start, arguments, len(want))]
            with self.lock:
                self.deliveries += len(seen)
            if seen != want:
                extra = sorted(set(seen) - set(want))[:5]
                missing = sorted(set(want) - set(seen))[:5]
                self.finding(
                    f"{state.name} {label} from {start}: {len(seen)} delivered, {len(want)}"
                    f" match (extra e.g. {extra}, missing e.g. {missing})"
                )
        state.checked_end = max(state.checked_end, end)
        self.check_named(state)
        self.checks += 1

    def check_named(self, state: StreamState) -> None:
        for label, seen, allowed in (
            ("named", state.named_seen, None),
            ("named filtered", state.filtered_seen, FILTER_VALUE),
        ):
            if not seen:
                continue
            top = max(seen)
            if allowed is None:
                want = set(range(top + 1))
            else:
                want = {o for o in range(top + 1) if state.colors.get(o) == allowed}
            if top >= state.checked_end:
                self.finding(f"{state.name} {label} consumer saw offset {top} past the end")
            gap = sorted(want - seen)[:5]
            extra = sorted(seen - want)[:5]
            if gap or extra:
                self.finding(f"{state.name} {label} consumer: gap {gap}, non-matching {extra}")

    def check_stderr(self) -> None:
        text = self.server.stderr()
        for marker in ("Traceback", "read failed", "INTERNAL_ERROR"):
            if marker in text:
                line = next(ln for ln in text.splitlines() if marker in ln)
                self.finding(f"server stderr has {marker!r}: {line[:200]}")

    # ------------------------------------------------------------------ the run

    def trial(self) -> None:
        self.start_server()
        self.stop.clear()
        threads = []
        for state in self.streams:
            threads.append(threading.Thread(target=self.publisher, args=(state,), daemon=True))
            for filtered in (False, True):
                threads.append(
                    threading.Thread(
                        target=self.named_consumer, args=(state, filtered), daemon=True
                    )
                )
        for t in threads:
            t.start()
        time.sleep(self.rng.uniform(2.0, 9.0))
        self.server.kill()
        self.stop.set()
        for t in threads:
            t.join(30)
        self.check_stderr()
        self.trials += 1
        self.start_server()
        for state in self.streams:
            # re-read a little of what the last check saw, then everything after it
            self.check_stream(state, max(0, state.checked_end - 50))
        self.check_stderr()
        self.server.stop()

    def finish(self) -> None:
        """Named consumers run to the end; the whole of every stream is read once more."""
        self.start_server()
        self.stop.clear()
        threads = [
            threading.Thread(target=self.named_consumer, args=(s, f), daemon=True)
            for s in self.streams
            for f in (False, True)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = all(
                (max(s.named_seen, default=-1) >= s.checked_end - 1)
                and (
                    max(s.filtered_seen, default=-1)
                    >= max(_red_offsets(s, 0, s.checked_end), default=-1)
                )
                for s in self.streams
            )
            if done:
                break
            time.sleep(0.2)
        self.stop.set()
        for t in threads:
            t.join(30)
        for state in self.streams:
            if len(state.named_seen) != state.checked_end:
                self.finding(
                    f"{state.name}: the named consumer saw {len(state.named_seen)} of"
                    f" {state.checked_end} messages by the end"
                )
            red = set(_red_offsets(state, 0, state.checked_end))
            if state.filtered_seen != red:
                self.finding(
                    f"{state.name}: the named filtered consumer saw"
                    f" {len(state.filtered_seen)} of {len(red)} matches by the end"
                )
            state.seqs_at.clear()
            state.checked_end = 0
            self.check_stream(state, 0)
        self.check_stderr()
        code = self.server.stop()
        if code != 0:
            self.finding(f"server exited {code} after SIGTERM")

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        budget = self.args.minutes * 60
        try:
            while time.monotonic() - started < budget or self.trials < self.args.min_trials:
                self.trial()
            self.finish()
        finally:
            if self.server.running:
                self.server.kill()
        stored = sum(len(s.seqs_at) for s in self.streams)
        confirmed = sum(len(s.confirmed) for s in self.streams)
        return {
            "benchmark": "soak",
            "machine": machine(),
            "minutes": round((time.monotonic() - started) / 60, 2),
            "streams": len(self.streams),
            "fsync_modes": self.modes,
            "trials": self.trials,
            "kills": self.trials,
            "messages_published": self.published,
            "messages_confirmed": confirmed,
            "messages_stored": stored,
            "unconfirmed_but_stored": stored - confirmed,
            "consumer_deliveries": self.deliveries,
            "start_seconds_median": round(statistics.median(self.start_seconds), 2)
            if self.start_seconds
            else None,
            "start_seconds_max": round(max(self.start_seconds, default=0.0), 2),
            "stream_checks": self.checks,
            "findings": self.findings,
        }


def _red_offsets(state: StreamState, start: int, end: int) -> list[int]:
    return [o for o in range(start, end) if state.colors.get(o) == FILTER_VALUE]


def _sql_offsets(state: StreamState, start: int, end: int) -> list[int]:
    out = []
    for o in range(start, end):
        seq = state.seqs_at.get(o)
        if seq is not None and sql_match(seq, color_of(seq)):
            out.append(o)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--min-trials", type=int, default=1, help="even past --minutes")
    p.add_argument("--streams", type=int, default=3)
    p.add_argument("--rate", type=float, default=150.0, help="messages a second per publisher")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fsync", default="batch,always", help="modes to cycle through per start")
    p.add_argument("--data-dir", type=Path, default=None, help="kept afterwards when given")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.data_dir is not None:
        return Soak(args, args.data_dir).run()
    scratch = Path(tempfile.mkdtemp(prefix="sievemq-soak-"))
    try:
        return Soak(args, scratch / "data").run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    result = run()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
