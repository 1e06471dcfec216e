"""StreamPublisher.publish_frame (one pass from a Publish frame to stored messages) hands the
appender exactly what the general path (``wire.parse_publish`` + ``publish``) does: the same
messages, confirm sinks, publishing ids, duplicates and sequences, for v1 and v2 frames,
anonymous and named publishers, with and without filter values and sub-entry batches."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

import pytest

from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.streamproto_session.publisher import StreamPublisher
from sievemq.storage.publishers import read_tag
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import wire


class Conn:
    alive = True

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.credits = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def take_publish_credits(self, n: int) -> None:
        self.credits += n

    def return_publish_credits(self, n: int) -> None:
        self.credits -= n


class Appender:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], list[Any], list[int]]] = []
        self.stream = SimpleNamespace(gated=False)  # (a cluster's replicated leader: True)

    def submit_many(self, messages: Any, sinks: Any, sink: Any, seqs: list[int]) -> None:
        self.calls.append((list(messages), [s is sink for s in sinks], list(seqs)))


class Sequences:
    def __init__(self, last: int | None) -> None:
        self.last = last

    def get(self, ref: str) -> int | None:
        return self.last

    def update(self, ref: str, last: int) -> None:
        self.last = last


def _publisher(named: bool, last: int | None) -> tuple[StreamPublisher, Conn, Appender, Any]:
    conn, appender = Conn(), Appender()
    queue: Any = type("Q", (), {"deleted": False, "name": "s"})()
    seqs = Sequences(last) if named else None
    pub = StreamPublisher(
        conn,  # type: ignore[arg-type]
        3,
        "ref-é" if named else "",
        queue,
        appender,  # type: ignore[arg-type]
        seqs,  # type: ignore[arg-type]
        MessageCounters(),
    )
    return pub, conn, appender, seqs


def _frame(rng: random.Random, version: int, n: int, batches: bool) -> bytes:
    parts = [struct.pack(">Bi", 3, n)]
    pid = rng.randrange(1, 50)
    for _ in range(n):
        pid += rng.choice((1, 1, 1, 2, -3))  # ids out of order: duplicates for named ones
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 20, 300))))
        if version >= 2:
            fv = rng.choice((None, "", "emea", "amer", "ü"))
            head = struct.pack(">Q", max(pid, 0))
            raw = fv.encode() if fv is not None else b""
            head += struct.pack(">h", len(raw) if fv is not None else -1) + raw
            parts.append(head + struct.pack(">i", len(body)) + body)
        elif batches and rng.random() < 0.2:
            inner = struct.pack(">I", 2) + b"r1" + struct.pack(">I", 3) + b"r22"
            parts.append(struct.pack(">QBHII", max(pid, 0), 0x80, 2, len(inner), len(inner)))
            parts.append(inner)
        else:
            parts.append(struct.pack(">Qi", max(pid, 0), len(body)) + body)
    return b"".join(parts)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("batches", [False, True])
def test_one_pass_matches_the_general_path(version: int, named: bool, batches: bool) -> None:
    rng = random.Random(version * 10 + named * 2 + batches)
    for _ in range(40):
        body = _frame(rng, version, rng.randrange(0, 60), batches)
        last = rng.choice((None, 5, 30))
        fast, fconn, fapp, fseq = _publisher(named, last)
        slow, sconn, sapp, sseq = _publisher(named, last)
        fast.publish_frame(body, version)
        slow.publish(wire.parse_publish(body, version)[1])
        assert fapp.calls == sapp.calls
        assert fconn.written == sconn.written and fconn.credits == sconn.credits
        assert (fast.published, fast.confirmed, fast.errored) == (
            slow.published,
            slow.confirmed,
            slow.errored,
        )
        if named:
            assert fseq.last == sseq.last


def test_named_records_carry_their_tag_and_filter_value() -> None:
    pub, _, appender, seqs = _publisher(True, 1)
    entries = [
        struct.pack(">Qh", 1, 2) + b"eu" + struct.pack(">i", 1) + b"a",  # a duplicate of 1
        struct.pack(">Qh", 2, 2) + b"eu" + struct.pack(">i", 1) + b"b",
        struct.pack(">Qh", 3, -1) + struct.pack(">i", 2) + b"cc",
    ]
    pub.publish_frame(struct.pack(">Bi", 3, 3) + b"".join(entries), 2)
    [(messages, sinks, pids)] = appender.calls
    assert pids == [2, 3] and sinks == [True, True] and seqs.last == 3
    assert [(m.filter_values, m.body, m.kind) for m in messages] == [
        (("eu",), b"b", KIND_STREAM),
        ((), b"cc", KIND_STREAM),
    ]
    assert [read_tag(m.properties) for m in messages] == [("ref-é", 2), ("ref-é", 3)]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x03\x00\x00",
        struct.pack(">Bi", 3, -1),
        struct.pack(">Bi", 3, 2) + struct.pack(">Qi", 1, 1) + b"x",  # the second is missing
        struct.pack(">Bi", 3, 1) + struct.pack(">Qi", 1, 30) + b"short",
    ],
)
def test_a_torn_frame_is_a_frame_error_and_changes_nothing(body: bytes) -> None:
    pub, conn, appender, seqs = _publisher(True, 0)
    with pytest.raises(wire.FrameError):
        pub.publish_frame(body, 1)
    assert not appender.calls and not conn.written and seqs.last == 0 and pub.published == 0
