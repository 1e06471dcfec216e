"""A named consumer's committed offset survives SIGKILL of the real server process."""

from __future__ import annotations

from pathlib import Path

import pika

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import params, publish_to_stream


def test_commit_survives_sigkill_and_sql_subscription_resumes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(data).start()
    try:
        publish_to_stream(srv, "orders", [(f"m{i}".encode(), {"n": i}) for i in range(20)])
        conn = pika.BlockingConnection(params(srv))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=4)
        args = {
            "x-stream-consumer-name": "even",
            "x-stream-offset": "first",
            "x-stream-filter-sql": "n % 2 = 0",
        }
        tags: list[tuple[int, int]] = []
        for method, props, _ in ch.consume("orders", arguments=args, inactivity_timeout=3):
            assert method is not None
            tags.append((method.delivery_tag, props.headers["x-stream-offset"]))
            if len(tags) == 4:
                break
        assert [o for _, o in tags] == [0, 2, 4, 6]
        ch.basic_ack(tags[0][0])
        ch.basic_ack(tags[1][0])
        ch.basic_ack(tags[3][0])  # 4 is not acked: the commit stays at 3
        for _ in range(10):  # let the acks reach the server (one commit per loop tick)
            conn.process_data_events(time_limit=0.1)
        srv.kill()
    finally:
        if srv.running:
            srv.kill()
    srv.restart()
    try:
        publish_to_stream(srv, "orders", [(b"m20", {"n": 20})])
        conn = pika.BlockingConnection(params(srv))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=20)
        got: list[int] = []
        resume = {"x-stream-consumer-name": "even", "x-stream-filter-sql": "n % 2 = 0"}
        for method, props, _ in ch.consume("orders", arguments=resume, inactivity_timeout=3):
            if method is None:
                break
            got.append(props.headers["x-stream-offset"])
            ch.basic_ack(method.delivery_tag)
            if len(got) == 9:
                break
        conn.close()
        assert got == [4, 6, 8, 10, 12, 14, 16, 18, 20]
    finally:
        srv.stop()
