"""One active consumer per (stream, x-stream-consumer-name): the newest consume wins."""

from __future__ import annotations

import time

import pika

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import params, publish_to_stream


def _consume(
    conn: pika.BlockingConnection, queue: str, args: dict[str, object], want: int
) -> tuple[pika.adapters.blocking_connection.BlockingChannel, list[tuple[int, int]], list[str]]:
    """A consumer with prefetch 200; (tag, offset) of what arrived, and server cancels seen."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=200)
    got: list[tuple[int, int]] = []
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_consume(
        queue,
        lambda _c, m, p, _b: got.append((m.delivery_tag, p.headers["x-stream-offset"])),
        arguments=args,
    )
    deadline = time.monotonic() + 10  # ends as soon as ``want`` came
    while len(got) < want and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=0.2)
    return ch, got, cancelled


def test_newest_named_consumer_wins_and_the_old_never_moves_the_commit_back(
    server: ServerProcess,
) -> None:
    q = "named-takeover"
    publish_to_stream(server, q, [(b"%d" % i, {}) for i in range(100)])
    named: dict[str, object] = {"x-stream-consumer-name": "n"}
    c1 = pika.BlockingConnection(params(server))
    ch_a, got_a, cancelled_a = _consume(c1, q, {**named, "x-stream-offset": "first"}, 100)
    assert [o for _, o in got_a] == list(range(100))
    ch_a.basic_ack(got_a[4][0], multiple=True)  # A is done with 0..4
    c1.process_data_events(time_limit=0.3)

    c2 = pika.BlockingConnection(params(server))
    ch_b, got_b, _ = _consume(c2, q, named, 95)
    assert got_b[0][1] == 5  # resumes after A's commit
    deadline = time.monotonic() + 10
    while not cancelled_a and time.monotonic() < deadline:
        c1.process_data_events(time_limit=0.05)
    assert cancelled_a, "the older consumer of the name was not cancelled"
    ch_b.basic_ack(got_b[-1][0], multiple=True)  # B is done with everything
    c2.process_data_events(time_limit=0.3)
    c2.close()

    # the old consumer acks late and its connection goes away: neither may write the name
    ch_a.basic_ack(got_a[9][0], multiple=True)
    c1.process_data_events(time_limit=0.3)
    c1.close()

    publish_to_stream(server, q, [(b"new", {})])
    c3 = pika.BlockingConnection(params(server))
    _, got_c, _ = _consume(c3, q, named, 1)
    assert [o for _, o in got_c] == [100]  # nothing before 100 comes again
    c3.close()
