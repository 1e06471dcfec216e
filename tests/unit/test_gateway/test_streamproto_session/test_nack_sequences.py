"""A deduplicating Stream-protocol publisher's sequence after a nack: a publish refused
unwritten rewinds it (the resend is stored), also when the connection is already gone; one
written and nacked (a fenced leader held it) keeps it (the resend is a duplicate). The chaos
suite found a written one resent and stored twice when every nack rewound."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.streamproto_session.publisher import StreamPublisher
from sievemq.storage.publishers import PublisherSequences


class Conn:
    def __init__(self) -> None:
        self.alive = True
        self.frames: list[bytes] = []
        self.credits = 0

    def write(self, frame: bytes) -> None:
        self.frames.append(frame)

    def return_publish_credits(self, n: int) -> None:
        self.credits += n


def _publisher(conn: Conn, last: int) -> tuple[StreamPublisher, Any]:
    sequences = PublisherSequences.__new__(PublisherSequences)
    sequences._last = {"p": last}  # what update() left when the ids arrived
    queue = SimpleNamespace(deleted=False, fenced=True)
    publisher = StreamPublisher(
        conn,  # type: ignore[arg-type]
        1,
        "p",
        queue,  # type: ignore[arg-type]
        SimpleNamespace(),  # type: ignore[arg-type]
        sequences,
        MessageCounters(),
    )
    return publisher, sequences


def test_refused_unwritten_rewinds_written_keeps() -> None:
    conn = Conn()
    publisher, sequences = _publisher(conn, 12)
    publisher.nack_written([11, 12])
    assert sequences.get("p") == 12 and publisher.errored == 2 and len(conn.frames) == 1
    publisher.settle_confirms([12], False)
    assert sequences.get("p") == 11 and publisher.errored == 3


def test_refused_after_the_connection_closed_still_rewinds() -> None:
    conn = Conn()
    conn.alive = False
    publisher, sequences = _publisher(conn, 12)
    publisher.settle_confirms([12], False)
    assert sequences.get("p") == 11 and conn.frames == []
    publisher.nack_written([11])
    assert sequences.get("p") == 11 and conn.frames == []
