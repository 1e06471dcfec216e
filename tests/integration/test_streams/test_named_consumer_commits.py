"""Named consumers end to end: resume after reconnect, contiguous commit with a gap in acks."""

from __future__ import annotations

import time

import pika

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import params, publish_to_stream


def _deliveries(
    ch: pika.adapters.blocking_connection.BlockingChannel,
    queue: str,
    arguments: dict[str, object],
    n: int,
) -> list[tuple[int, int]]:
    """(delivery tag, x-stream-offset) of the next n deliveries, not acked."""
    out: list[tuple[int, int]] = []
    for method, props, _body in ch.consume(queue, arguments=arguments, inactivity_timeout=3):
        assert method is not None, f"timed out after {out}"
        out.append((method.delivery_tag, props.headers["x-stream-offset"]))
        if len(out) == n:
            return out
    raise AssertionError("consume ended")


def test_resume_after_reconnect_with_a_gap_in_acks(server: ServerProcess) -> None:
    publish_to_stream(server, "named-gap", [(f"m{i}".encode(), {"i": i}) for i in range(9)])
    args: dict[str, object] = {"x-stream-consumer-name": "billing", "x-stream-offset": 5}
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    d = _deliveries(ch, "named-gap", args, 3)
    assert [o for _, o in d] == [5, 6, 7]
    ch.basic_ack(d[2][0])  # ack 7, then 5; 6 stays unacked
    ch.basic_ack(d[0][0])
    time.sleep(0.2)
    conn.close()  # 6 was never acked: the commit must stay at 5
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    resume = {"x-stream-consumer-name": "billing"}
    d = _deliveries(ch, "named-gap", resume, 3)
    assert [o for _, o in d] == [6, 7, 8]  # resumes right after the contiguous commit
    for tag, _ in d:
        ch.basic_ack(tag)
    time.sleep(0.2)
    conn.close()
    publish_to_stream(server, "named-gap", [(b"m9", {"i": 9})])
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    assert [o for _, o in _deliveries(ch, "named-gap", resume, 1)] == [9]
    conn.close()


def test_first_consume_starts_at_next_and_nack_reject_settle(server: ServerProcess) -> None:
    publish_to_stream(server, "named-next", [(b"old", {})])
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    got: list[tuple[int, int]] = []

    def on_message(
        channel: object, method: pika.spec.Basic.Deliver, props: pika.BasicProperties, body: bytes
    ) -> None:
        got.append((method.delivery_tag, props.headers["x-stream-offset"]))

    ch.basic_consume("named-next", on_message, arguments={"x-stream-consumer-name": "c"})
    publish_to_stream(server, "named-next", [(b"new1", {}), (b"new2", {}), (b"new3", {})])
    deadline = time.monotonic() + 15  # ends as soon as the wait is over
    while len(got) < 3 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert [o for _, o in got] == [1, 2, 3]  # "old" (offset 0) is not delivered: next
    ch.basic_nack(got[0][0], requeue=False)
    ch.basic_reject(got[1][0], requeue=False)
    ch.basic_ack(got[2][0])
    conn.process_data_events(time_limit=0.2)
    conn.close()
    publish_to_stream(server, "named-next", [(b"new4", {})])
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    assert [o for _, o in _deliveries(ch, "named-next", {"x-stream-consumer-name": "c"}, 1)] == [4]
    conn.close()


def test_requeue_keeps_the_commit_before_the_message(server: ServerProcess) -> None:
    publish_to_stream(server, "named-requeue", [(f"m{i}".encode(), {}) for i in range(3)])
    first = {"x-stream-consumer-name": "retry", "x-stream-offset": "first"}
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    d = _deliveries(ch, "named-requeue", first, 3)
    ch.basic_ack(d[0][0])
    ch.basic_nack(d[1][0], multiple=True, requeue=True)  # "give it to me again"
    ch.basic_ack(d[2][0])
    conn.process_data_events(time_limit=0.2)
    conn.close()
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    resumed = _deliveries(ch, "named-requeue", {"x-stream-consumer-name": "retry"}, 2)
    assert [o for _, o in resumed] == [1, 2]  # at least once: the requeued message comes back
    conn.close()
